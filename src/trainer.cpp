#include "tfm/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tfm/bench.h"
#include "tfm/distributed.h"
#include "objective_text.h"
#include "tfm/error.h"
#include "tfm/file_io.h"
#include "tfm/gemm.h"
#include "tfm/memory.h"
#include "tfm/ops.h"
#include "tfm/optim.h"
#include "tfm/platform.h"
#include "tfm/preflight.h"
#include "tfm/run_lock.h"
#include "tfm/safetensors.h"

namespace tfm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Evaluation batches come from their own stream (the model's dropout Rng uses seed + 1, the
// training batches sampler_seed(seed, rank): objective_text.h).
constexpr uint64_t kEvalSalt = 0x4556414C42415443ULL;  // "EVALBATC"

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string duration_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return format("%ldh%02ldm", static_cast<long>(t / 3600), static_cast<long>(t / 60 % 60));
  if (t >= 60) return format("%ldm%02lds", static_cast<long>(t / 60), static_cast<long>(t % 60));
  return format("%lds", static_cast<long>(t));
}

std::string rate_str(double r) {
  return r >= 1e4 ? format("%.1fk", r / 1e3) : format("%.0f", r);
}

std::vector<ParamSegment> segments_of(const Model& model) {
  std::vector<ParamSegment> segs;
  for (const auto& p : model.parameters()) segs.push_back({p.offset, p.value.numel(), p.decay});
  return segs;
}

OptimizerConfig optimizer_config(const Config& c) {
  OptimizerConfig o;
  o.name = c.string("train.optimizer.name");
  o.beta1 = c.at("train.optimizer.betas")[0].get<double>();
  o.beta2 = c.at("train.optimizer.betas")[1].get<double>();
  o.weight_decay = c.number("train.optimizer.weight_decay");
  o.momentum = c.number("train.optimizer.momentum");
  return o;
}

LrSchedule schedule_of(const Config& c) {
  LrSchedule s;
  s.name = c.string("train.lr_schedule.name");
  s.lr = c.number("train.optimizer.lr");
  s.min_lr = c.number("train.lr_schedule.min_lr");
  s.warmup = c.integer("train.lr_schedule.warmup_steps");
  s.total = c.integer("train.max_steps");
  return s;
}

json rng_json(const Rng::State& s) {
  return json(std::vector<uint64_t>(s.begin(), s.end()));
}
Rng::State rng_state(const json& j) {
  const auto v = j.get<std::vector<uint64_t>>();
  if (v.size() != 5) throw json::other_error::create(501, "an RNG state has 5 words", nullptr);
  Rng::State s;
  std::copy(v.begin(), v.end(), s.begin());
  return s;
}

double json_loss(const json& j) {
  return j.is_number() ? j.get<double>() : std::numeric_limits<double>::infinity();
}

// The first parameter whose gradient holds a NaN or Inf, or "" when all are finite.
std::string first_nonfinite_grad(const Model& model) {
  const float* g = model.flat_grads().data();
  for (const auto& p : model.parameters())
    for (int64_t i = 0; i < p.value.numel(); ++i)
      if (!std::isfinite(g[p.offset + i])) return p.name;
  return "";
}

void write_text_file(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

// A run killed after its last checkpoint logged steps that the resumed run will log again: keep
// only the records up to the checkpoint's step, so metrics.jsonl reads as one uninterrupted run.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    int64_t s = -1;
    try {
      s = json::parse(line).at("step").get<int64_t>();
    } catch (const json::exception&) {
      dropped = true;  // a line cut short by the kill
      continue;
    }
    if (s <= step)
      kept += line + "\n";
    else
      dropped = true;
  }
  if (dropped) write_text_file(path, kept);
}

// Keys that must be equal between a checkpoint and the config that continues it.
void check_resumable(const Config& from_ckpt, const Config& config, const std::string& source) {
  for (const auto& path : differing_keys(from_ckpt, config)) {
    const KeySpec* k = find_key(path);
    if (k->resumable || path == "output.dir") continue;
    throw ConfigError(path + ": " + source + " was trained with " + from_ckpt.at(path).dump() +
                      ", the config has " + config.at(path).dump() +
                      " (only keys marked 'May change on --resume' may differ)");
  }
}

}  // namespace

void restore_model(Model& model, const Checkpoint& ckpt, const std::string& source) {
  const int64_t P = model.parameter_count();
  if (static_cast<int64_t>(ckpt.model.size()) != P)
    throw IoError(source + ": the checkpoint holds " + std::to_string(ckpt.model.size()) +
                  " parameter values, the model of its config needs " + std::to_string(P) + " (" +
                  std::to_string(model.parameters().size()) + " tensors; was the config or the vocabulary changed?)");
  std::copy(ckpt.model.begin(), ckpt.model.end(), model.flat_values().data());
}

void load_safetensors_into(Model& model, const std::string& path) {
  const SafetensorsFile f = load_safetensors(path);
  for (const auto& [name, t] : f.tensors)
    if (!model.find_parameter(name)) throw IoError(path + ": tensor " + name + " is not a parameter of the model");
  for (const auto& p : model.parameters()) {
    if (!f.contains(p.name)) throw IoError(path + ": no tensor " + p.name + " (the model needs it)");
    const Tensor& t = f.at(p.name);
    if (t.shape() != p.value.shape())
      throw IoError(path + ": tensor " + p.name + " has shape " + shape_str(t.shape()) + ", the model needs " +
                    shape_str(p.value.shape()));
    const std::vector<float> v = t.to_vector();
    std::copy(v.begin(), v.end(), model.flat_values().data() + p.offset);
  }
}

uint64_t eval_seed(const Config& config) {
  return static_cast<uint64_t>(config.integer("seed")) ^ kEvalSalt;
}

TrainResult train(const Config& config, const TrainOptions& opt) {
  const std::string dir = config.string("output.dir");
  const std::string last_path = dir + "/last.ckpt", best_path = dir + "/best.ckpt";
  const uint64_t seed = static_cast<uint64_t>(config.integer("seed"));
  const int64_t accum = config.integer("train.grad_accum_steps");
  const int64_t max_steps = config.integer("train.max_steps");
  const int64_t log_every = config.integer("train.log_interval");
  const int64_t eval_every = config.integer("train.eval_interval");
  const int64_t eval_steps = config.integer("train.eval_steps");
  const int64_t ckpt_every = config.integer("train.checkpoint_interval");
  const double grad_clip = config.number("train.grad_clip");
  const bool skip_nonfinite = config.boolean("train.skip_nonfinite");
  constexpr int64_t kMaxSkipsInARow = 100;  // then the weights themselves are bad: stop
  int64_t skipped = 0, skipped_in_a_row = 0;
  // One writer per run directory (run_lock.h): held until train() returns; rank 0 writes, so it holds it.
  const RunLock run_lock = dist::is_root() ? RunLock::acquire(dir) : RunLock();

  // ---- every check of the input before any work ----
  Checkpoint resumed;
  if (opt.resume) {
    if (!fs::exists(last_path)) throw IoError(last_path + ": no checkpoint to resume from");
    resumed = load_checkpoint(last_path);
    Config trained;
    try {
      trained = resolve_config(resumed.config);
    } catch (const ConfigError& e) {
      throw IoError(last_path + ": the checkpoint's config is invalid: " + e.what());
    }
    check_resumable(trained, config, last_path);
    const json& rs = resumed.state;
    const int64_t trained_ranks = rs.is_object() && rs.contains("ranks") && rs.at("ranks").is_number_integer()
                                      ? rs.at("ranks").get<int64_t>()
                                      : 1;
    if (trained_ranks != dist::size())
      throw ConfigError(last_path + ": the run was trained with " + std::to_string(trained_ranks) +
                        " rank(s), this run has " + std::to_string(dist::size()) +
                        " (resume with the same count: mpirun -np " + std::to_string(trained_ranks) + ")");
  } else if (fs::exists(last_path)) {
    throw ConfigError("output.dir: " + dir +
                      " already holds a run (last.ckpt); continue it with `tfm train --resume " + dir +
                      "` or choose another directory with --out");
  }
  // Data parallel: only rank 0 writes (the run directory lives on its machine).
  const int rank = dist::rank(), nranks = dist::size();
  // The objective reads its data and builds its model (vocabularies from the checkpoint on resume).
  // A config that cannot fit is refused there, before the model is built (preflight.h).
  const std::unique_ptr<Objective> objective = make_objective(
      config, opt.resume ? &resumed : nullptr, {true, rank, MemoryCheck{"train", true, dist::local_size()}});
  Model& model = objective->model();
  const bool root = dist::is_root();
  if (root) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      throw IoError(
          dir + ": cannot create the run directory (output.dir): " + (ec ? ec.message() : "not a directory"));
    if (::access(dir.c_str(), W_OK) != 0)
      throw IoError(dir + ": the run directory (output.dir) is not writable");
    write_text_file(dir + "/config.json", config.tree.dump(2) + "\n");
  }

  // ---- the run ----
  // train.threads = 0: all cores, shared among the ranks on this machine (at least 1 each).
  const int64_t threads_key = config.integer("train.threads");
  const int threads = platform::configure_threads(
      threads_key > 0 || !dist::active()
          ? static_cast<int>(threads_key)
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / dist::local_size()));
  // Precision and GEMM backend live below the model: every product of this run (any objective) uses them.
  const GemmModeGuard gemm_mode(parse_precision(config.string("train.precision")),
                                resolve_gemm_backend(config.string("train.gemm_backend")));
  model.set_training(true);
  const int64_t P = model.parameter_count();
  Optimizer optim(optimizer_config(config), segments_of(model), P);
  const LrSchedule schedule = schedule_of(config);
  Rng& sampler = objective->sampler_rng();
  if (rank > 0) model.dropout_rng().seed_with(sampler_seed(seed + 1, rank));
  int64_t step = 0;
  double best_val = std::numeric_limits<double>::infinity();
  double elapsed_before = 0.0;
  if (!opt.resume && !opt.init_from.empty()) load_safetensors_into(model, opt.init_from);
  // Every rank starts from rank 0's weights (the same seed gives the same init; this makes it certain).
  if (!opt.resume) dist::broadcast(model.flat_values().data(), P, 0);
  if (opt.resume) {
    restore_model(model, resumed, last_path);
    try {
      const json& s = resumed.state;
      step = s.at("step").get<int64_t>();
      best_val = json_loss(s.at("best_val_loss"));
      elapsed_before = s.at("elapsed_s").get<double>();
      // A multi-rank checkpoint holds every rank's streams under rng.ranks (rank 0's also at the top).
      const json& r = nranks > 1 ? s.at("rng").at("ranks").at(static_cast<size_t>(rank)) : s.at("rng");
      sampler.set_state(rng_state(r.at("sampler")));
      model.dropout_rng().set_state(rng_state(r.at("dropout")));
      if (s.at("optimizer").at("name").get<std::string>() != optim.config().name ||
          resumed.optimizer.size() != optim.state().size())
        throw IoError(last_path + ": the checkpoint's optimizer state is for \"" +
                      s.at("optimizer").at("name").get<std::string>() + "\", the config uses \"" +
                      optim.config().name + "\"");
      for (size_t i = 0; i < resumed.optimizer.size(); ++i) {
        if (static_cast<int64_t>(resumed.optimizer[i].size()) != P)
          throw IoError(last_path + ": optimizer state " + std::to_string(i) + " has " +
                        std::to_string(resumed.optimizer[i].size()) + " values, expected " +
                        std::to_string(P));
        optim.state()[i] = std::move(resumed.optimizer[i]);
      }
      optim.set_steps_taken(s.at("optimizer").at("steps").get<int64_t>());
      if (step < 0) throw IoError(last_path + ": negative step in the checkpoint");
    } catch (const json::exception& e) {
      throw IoError(last_path + ": corrupt checkpoint state (" + e.what() + ")");
    }
  }

  // Logging: console (unless quiet) and DIR/train.log, appended to on resume.
  std::vector<spdlog::sink_ptr> sinks;
  if (opt.console && root) {
    auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
    console->set_pattern("%^%v%$");
    sinks.push_back(console);
  }
  if (root) {
    auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/train.log", !opt.resume);
    file_sink->set_pattern("[%Y-%m-%d %H:%M:%S] [%l] %v");
    sinks.push_back(file_sink);
  }
  spdlog::logger log("tfm", sinks.begin(), sinks.end());
  log.flush_on(spdlog::level::info);
  const bool tty = opt.console && root && ::isatty(STDOUT_FILENO);
  bool progress_shown = false;
  auto clear_progress = [&] {
    if (progress_shown) std::fputs("\r\033[K", stdout), std::fflush(stdout), progress_shown = false;
  };
  auto info = [&](const std::string& s) { clear_progress(), log.info(s); };

  std::ofstream metrics;
  if (root) {
    if (opt.resume) drop_metrics_after(dir + "/metrics.jsonl", step);
    metrics.open(dir + "/metrics.jsonl", opt.resume ? std::ios::app : std::ios::trunc);
    if (!metrics) throw IoError(dir + "/metrics.jsonl: cannot open for writing");
  }

  const auto run_start = Clock::now();
  auto elapsed = [&] { return elapsed_before + seconds_since(run_start); };
  // Every rank's sampler and dropout states (10 words per rank), gathered on all ranks before any
  // step that may write a checkpoint (the gather is collective; only rank 0 writes).
  std::vector<uint64_t> rank_rngs;
  auto gather_rngs = [&] {
    std::vector<uint64_t> mine;
    for (const Rng::State& s : {sampler.state(), model.dropout_rng().state()})
      mine.insert(mine.end(), s.begin(), s.end());
    rank_rngs = dist::allgather(mine);
  };
  auto rng_json_all = [&] {
    json rng = {{"sampler", rng_json(sampler.state())}, {"dropout", rng_json(model.dropout_rng().state())}};
    if (nranks == 1) return rng;
    json ranks = json::array();
    for (int r = 0; r < nranks; ++r) {
      const auto w = rank_rngs.begin() + 10 * r;
      ranks.push_back({{"sampler", std::vector<uint64_t>(w, w + 5)}, {"dropout", std::vector<uint64_t>(w + 5, w + 10)}});
    }
    rng["ranks"] = std::move(ranks);
    return rng;
  };
  // Writes the run's state to `path`, streaming the parameters and optimizer buffers (no copies).
  auto save_run = [&](const std::string& path) {
    json state = {{"step", step},
                  {"best_val_loss", std::isfinite(best_val) ? json(best_val) : json(nullptr)},
                  {"elapsed_s", elapsed()},
                  {"rng", rng_json_all()},
                  {"optimizer", {{"name", optim.config().name}, {"steps", optim.steps_taken()}}}};
    if (nranks > 1) state["ranks"] = nranks;
    save_checkpoint(path, CheckpointView{config.tree, objective->tokenizer(), state, model.flat_values().data(),
                                         static_cast<size_t>(P), optim.state(),
                                         objective->target_tokenizer()});
  };

  std::string breakdown;
  for (const auto& [name, n] : model.parameter_breakdown())
    breakdown += (breakdown.empty() ? "" : ", ") + name + " " + std::to_string(n);
  info(format("tfm train: %s %s", opt.resume ? "resuming" : "run directory", dir.c_str()));
  info("objective: " + objective->name() + "; data: " + objective->describe_data());
  info(format("model: %ld parameters (%s)", static_cast<long>(P), breakdown.c_str()));
  const double flops_per_token = objective->train_flops_per_token();
  // The same square n = 1024 peak `tfm bench gemm` reports (a 512 cube ran ~15% below it, which
  // inflated the logged MFU), timed for 0.3 s at start-up in the precision and backend in use.
  const double peak_gflops = root ? measure_gemm_peak_gflops(1024, 0.3) : 0.0;
  info(format("compute: %d thread(s), %s; %s; measured %s peak %.1f GFLOP/s", threads,
              platform::blas_summary().c_str(), platform::gemm_summary().c_str(),
              precision_name(gemm_precision()), peak_gflops));
  info(format("batch: %s x %ld accumulation step(s); %ld steps%s", objective->describe_batch().c_str(),
              static_cast<long>(accum), static_cast<long>(max_steps),
              opt.resume ? format(", continuing after step %ld", static_cast<long>(step)).c_str() : ""));
  if (nranks > 1)
    info(format("mpi: %d ranks x %d thread%s (%d on this machine); each rank samples its own batches, "
                "gradients averaged with MPI_Allreduce over %ld floats per step",
                nranks, threads, threads == 1 ? "" : "s", dist::local_size(), static_cast<long>(P)));

  TrainResult result;
  result.best_val_loss = best_val;
  Tensor values = model.flat_values(), grads = model.flat_grads();
  // bf16 products read the weights from one bfloat16 copy, refreshed after each optimizer step.
  const WeightMirror weight_mirror(values.data(), P);
  // Interval accumulators for the log line and metrics.jsonl.
  double iv_time = 0.0, iv_loss = 0.0, iv_norm = 0.0, iv_tokens = 0.0;
  int64_t iv_steps = 0;
  int64_t saved_at = opt.resume ? step : -1;
  double run_step_s = 0.0;  // this call's steps, for the allreduce share
  const int64_t first_step = step;
  std::string progress_extra;  // the last evaluation's figures besides the loss, for the progress line

  while (step < max_steps) {
    const auto t0 = Clock::now();
    grads.fill_(0.0f);
    double loss_sum = 0.0, tokens = 0.0;
    for (int64_t a = 0; a < accum; ++a) {
      BatchLoss batch = objective->train_batch();
      Tensor loss = batch.loss;
      loss_sum += loss.item();
      tokens += static_cast<double>(batch.tokens);
      // Mean over the micro-batches: the same gradient as one batch of B * accum.
      if (accum > 1) loss = loss * (1.0f / static_cast<float>(accum));
      loss.backward();
    }
    // Data parallel: the mean over ranks of loss and gradient, before clipping, so the clip sees the
    // global gradient and every rank applies the same update (no-ops in a single process).
    const double train_loss = dist::allreduce_mean(loss_sum / static_cast<double>(accum));
    const double step_tokens = dist::allreduce_mean(tokens) * nranks;  // every rank's real tokens
    dist::allreduce_mean(grads.data(), P);
    const double norm = std::isfinite(train_loss) ? clip_grad_norm(grads.data(), P, grad_clip) : NAN;
    if (!std::isfinite(train_loss) || !std::isfinite(norm)) {
      const std::string where =
          std::isfinite(train_loss)
              ? "the gradient of " + first_nonfinite_grad(model) + " is not finite (loss " +
                    format("%.4f", train_loss) + ")"
              : std::string("the training loss is ") + (std::isnan(train_loss) ? "NaN" : "infinite");
      if (skip_nonfinite && ++skipped_in_a_row <= kMaxSkipsInARow) {
        // Marian's and llm.c's choice: drop this batch, keep the weights, draw the next batch.
        ++skipped;
        log.warn(format("step %ld: %s; batch skipped, no update (train.skip_nonfinite; %ld skipped so far)",
                        static_cast<long>(step + 1), where.c_str(), static_cast<long>(skipped)));
        continue;
      }
      result.status = TrainResult::Status::NonFinite;
      result.step = step;
      result.message =
          format("step %ld: %s; training stopped. ", static_cast<long>(step + 1), where.c_str()) +
          (saved_at >= 0
               ? format("%s (step %ld) is untouched; ", last_path.c_str(), static_cast<long>(saved_at))
               : std::string("no checkpoint was written; ")) +
          "try a lower train.optimizer.lr or train.grad_clip";
      clear_progress();
      log.error(result.message);
      return result;
    }
    skipped_in_a_row = 0;
    const double lr = schedule.at(step);
    optim.step(values.data(), grads.data(), lr);
    ++step;
    const double step_s = seconds_since(t0);
    run_step_s += step_s;
    if (opt.on_step) opt.on_step(step, model);
    result.losses.push_back(train_loss);
    iv_time += step_s, iv_loss += train_loss, iv_norm += norm, iv_tokens += step_tokens, ++iv_steps;

    double val_loss = NAN;
    Metrics val;
    const bool eval_now = step % eval_every == 0 || step == max_steps;
    const bool stop = dist::any(opt.stop && opt.stop->load()) || step == opt.stop_at_step;
    const bool save_now = (ckpt_every > 0 && step % ckpt_every == 0) || step == max_steps || stop;
    if (nranks > 1 && (eval_now || save_now)) gather_rngs();
    if (eval_now && root) {  // rank 0 alone evaluates: nothing collective happens in here
      val = objective->evaluate("val", eval_steps, eval_seed(config));
      val_loss = val.get("loss");
      result.val_loss = val_loss;
      std::string note;
      if (val_loss < best_val) {
        best_val = val_loss;
        result.best_val_loss = best_val;
        save_run(best_path);
        note = ", new best: saved best.ckpt";
      }
      // The objective's other figures (masked_lm: accuracy; seq2seq: accuracy, BLEU) follow the loss,
      // and the progress line keeps showing them until the next evaluation.
      std::string extra;
      for (const auto& [name, v] : val.values)
        if (name != "loss") extra += format(" | val %s %.4g", name.c_str(), v);
      progress_extra = extra;
      info(format("step %ld/%ld | val loss %.4f (best %.4f)%s%s", static_cast<long>(step),
                  static_cast<long>(max_steps), val_loss, best_val, extra.c_str(), note.c_str()));
    }
    if (root && (step % log_every == 0 || eval_now || step == max_steps)) {
      const double ms = 1e3 * iv_time / iv_steps;
      const double tok_s = iv_tokens / iv_time;
      const double mfu = peak_gflops > 0 ? flops_per_token * tok_s / (peak_gflops * 1e9 * nranks) : 0.0;
      json rec = {{"step", step},
                  {"train_loss", train_loss},
                  {"train_loss_avg", iv_loss / iv_steps},
                  {"lr", lr},
                  {"grad_norm", iv_norm / iv_steps},
                  {"tokens_per_s", tok_s},
                  {"ms_per_step", ms},
                  {"mfu", mfu},
                  {"elapsed_s", elapsed()}};
      if (eval_now)
        for (const auto& [name, v] : val.values) rec["val_" + name] = v;
      metrics << rec.dump() << "\n" << std::flush;
      info(
          format("step %ld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %.1f ms/step | %s tok/s | mfu %.1f%%",
                 static_cast<long>(step), static_cast<long>(max_steps), iv_loss / iv_steps, lr,
                 iv_norm / iv_steps, ms, rate_str(tok_s).c_str(), 100.0 * mfu));
      iv_time = iv_loss = iv_norm = iv_tokens = 0.0, iv_steps = 0;
    }
    if (save_now) {
      if (root) save_run(last_path);
      saved_at = step;
    }
    if (stop && step < max_steps) {
      result.status = TrainResult::Status::Interrupted;
      result.step = step;
      info(format("interrupted after step %ld: saved %s. Continue with: %stfm train --resume %s",
                  static_cast<long>(step), last_path.c_str(),
                  nranks > 1 ? format("mpirun -np %d ", nranks).c_str() : "", dir.c_str()));
      return result;
    }
    if (tty) {
      const double rate = step_s > 0 ? step_tokens / step_s : 0.0;
      const double eta = step_s * static_cast<double>(max_steps - step);
      std::printf("\r\033[Kstep %ld/%ld | loss %.4f%s | %s tok/s | ETA %s", static_cast<long>(step),
                  static_cast<long>(max_steps), train_loss, progress_extra.c_str(), rate_str(rate).c_str(),
                  duration_str(eta).c_str());
      std::fflush(stdout);
      progress_shown = true;
    }
  }
  result.step = step;
  if (step == first_step) {
    info(
        format("nothing to do: the run is at step %ld of train.max_steps = %ld (raise it with --set "
               "train.max_steps=N)",
               static_cast<long>(step), static_cast<long>(max_steps)));
  } else {
    info(format("done: %ld steps in %s; val loss %.4f (best %.4f). %s", static_cast<long>(step),
                duration_str(elapsed()).c_str(), result.val_loss, best_val, objective->usage_hint(dir).c_str()));
    // Where the memory went: tensors at their peak, what the caching pool holds for reuse, and the
    // whole process (tensors + libraries + data) as the OS counts it.
    const memory::Stats mem = memory::stats();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    info(format("memory: tensors peaked at %.1f MiB; the pool holds %.1f MiB; process peak RSS %.1f MiB",
                static_cast<double>(mem.peak_live_bytes) / (1 << 20),
                static_cast<double>(mem.live_bytes + mem.cached_bytes) / (1 << 20),
                static_cast<double>(usage.ru_maxrss) / 1024.0));
    if (nranks > 1) {
      const double steps_run = static_cast<double>(step - first_step);
      info(format("allreduce: %.2f ms/step, %.1f%% of step (%.1f ms/step, %d ranks, %.1f MB of gradients)",
                  1e3 * dist::allreduce_seconds() / steps_run,
                  100.0 * dist::allreduce_seconds() / run_step_s, 1e3 * run_step_s / steps_run, nranks,
                  4e-6 * static_cast<double>(P)));
    }
  }
  clear_progress();
  return result;
}

LoadedRun load_run(const std::string& dir, const std::string& which, bool with_data) {
  if (which != "last" && which != "best")
    throw ConfigError("--checkpoint: expected \"last\" or \"best\", got \"" + which + "\"");
  const std::string path = dir + "/" + which + ".ckpt";
  if (!fs::is_directory(dir)) throw IoError(dir + ": no such run directory");
  if (!fs::exists(path)) throw IoError(path + ": no checkpoint here (has the run written one yet?)");
  LoadedRun run;
  run.checkpoint = load_checkpoint(path);
  try {
    run.config = resolve_config(run.checkpoint.config);
  } catch (const ConfigError& e) {
    throw IoError(path + ": the checkpoint's config is invalid: " + e.what());
  }
  run.objective = make_objective(run.config, &run.checkpoint,
                                 {with_data, 0, MemoryCheck{"loading " + path, false, 1}});
  restore_model(run.objective->model(), run.checkpoint, path);
  run.model = dynamic_cast<LanguageModel*>(&run.objective->model());
  return run;
}

}  // namespace tfm
