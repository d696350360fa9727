#include "tfm/training/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "tfm/analysis/bench.h"
#include "tfm/training/distributed.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/training/optim.h"
#include "tfm/engine/platform.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_lock.h"
#include "tfm/engine/safetensors.h"

namespace tfm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Evaluation batches come from their own stream (the model's dropout Rng uses seed + 1, the
// training batches rank_seed(seed, rank): random.h).
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
  if (dropped) write_file_atomically(path, kept);
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

namespace {

// The run's log: the console (unless quiet) and DIR/train.log (appended to on resume), with a live
// progress line on a TTY that every logged line clears first. Ranks other than 0 log nothing.
class RunLog {
 public:
  RunLog(const std::string& dir, bool console, bool root, bool append) {
    std::vector<spdlog::sink_ptr> sinks;
    if (console && root) {
      auto c = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
      c->set_pattern("%^%v%$");
      sinks.push_back(c);
    }
    if (root) {
      auto f = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/train.log", !append);
      f->set_pattern("[%Y-%m-%d %H:%M:%S] [%l] %v");
      sinks.push_back(f);
    }
    log_ = std::make_unique<spdlog::logger>("tfm", sinks.begin(), sinks.end());
    log_->flush_on(spdlog::level::info);
    tty_ = console && root && ::isatty(STDOUT_FILENO);
  }
  void info(const std::string& s) { clear_progress(), log_->info(s); }
  void warn(const std::string& s) { clear_progress(), log_->warn(s); }
  void error(const std::string& s) { clear_progress(), log_->error(s); }
  bool shows_progress() const { return tty_; }
  // Replaces the progress line (TTY only).
  void progress(const std::string& line) {
    if (!tty_) return;
    std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
    shown_ = true;
  }
  void clear_progress() {
    if (shown_) std::fputs("\r\033[K", stdout), std::fflush(stdout), shown_ = false;
  }

 private:
  std::unique_ptr<spdlog::logger> log_;
  bool tty_ = false, shown_ = false;
};

// One call of train(): the constructor checks the input and builds everything (a resumed run's state
// restored); run() is the loop. The objective (objective.h) knows what a batch, its loss and an
// evaluation are; everything here is the same for every objective.
class TrainingRun {
 public:
  TrainingRun(const Config& config, const TrainOptions& opt);
  TrainResult run();

 private:
  // What one optimizer step measured: the loss and gradient norm averaged over ranks, the real tokens.
  struct StepStats {
    double loss = 0, norm = 0, tokens = 0, seconds = 0;
  };
  const Checkpoint* check_resume();  // the resumed checkpoint, or nullptr for a fresh run
  void create_run_directory();
  void configure_compute();
  void restore_state();
  void open_outputs();
  void log_header();
  StepStats forward_backward();
  std::pair<double, double> sharded_micro_batch();
  void sum_replica_grads();
  std::string nonfinite_reason(double loss) const;
  Metrics evaluate_and_keep_best();
  void log_interval(double lr, const Metrics* val);
  void save(const std::string& path);
  nlohmann::json rng_json_all() const;
  void gather_rngs();
  void log_summary();
  double elapsed() const { return elapsed_before_ + seconds_since(start_); }

  const Config& config_;
  const TrainOptions& opt_;
  const std::string dir_, last_path_, best_path_;
  const int64_t accum_, max_steps_, log_every_, eval_every_, eval_steps_, ckpt_every_;
  const double grad_clip_;
  const bool skip_nonfinite_;
  const int rank_, nranks_;
  const bool root_;
  RunLock lock_;  // one writer per run directory (run_lock.h), held until train() returns
  Checkpoint resumed_;
  std::unique_ptr<Objective> objective_;
  int threads_ = 1;
  // train.data_parallel: workers_ threads each run a shard of every micro-batch through the whole
  // forward and backward with one-thread kernels (one fork/join per micro-batch instead of ~100);
  // worker 0 on the objective's model, worker w on replicas_[w - 1] (the same weights, its own gradients).
  int workers_ = 1;
  std::vector<std::unique_ptr<Model>> replicas_;
  std::optional<GemmModeGuard> gemm_mode_;  // precision and backend for every product of the run
  std::unique_ptr<Optimizer> optim_;
  LrSchedule schedule_;
  int64_t P_ = 0;
  Tensor values_, grads_;
  std::optional<WeightMirror> weight_mirror_;  // bf16 products read the weights' bfloat16 copy
  std::unique_ptr<RunLog> log_;
  std::ofstream metrics_;
  json head_usage_;  // top-k gating: the last evaluation's share of tokens per head, per layer
  double peak_gflops_ = 0, flops_per_token_ = 0;

  int64_t step_ = 0, first_step_ = 0, saved_at_ = -1;
  double best_val_ = std::numeric_limits<double>::infinity();
  double elapsed_before_ = 0;
  Clock::time_point start_ = Clock::now();
  std::vector<uint64_t> rank_rngs_;  // every rank's sampler and dropout states, gathered before a save
  int64_t skipped_ = 0, skipped_in_a_row_ = 0;
  // Interval accumulators for the log line and metrics.jsonl.
  double iv_time_ = 0, iv_loss_ = 0, iv_norm_ = 0, iv_tokens_ = 0, last_loss_ = 0;
  int64_t iv_steps_ = 0;
  double run_step_s_ = 0;       // this call's steps, for the allreduce share
  std::string progress_extra_;  // the last evaluation's figures besides the loss, for the progress line
  TrainResult result_;
};

TrainingRun::TrainingRun(const Config& config, const TrainOptions& opt)
    : config_(config),
      opt_(opt),
      dir_(config.string("output.dir")),
      last_path_(dir_ + "/last.ckpt"),
      best_path_(dir_ + "/best.ckpt"),
      accum_(config.integer("train.grad_accum_steps")),
      max_steps_(config.integer("train.max_steps")),
      log_every_(config.integer("train.log_interval")),
      eval_every_(config.integer("train.eval_interval")),
      eval_steps_(config.integer("train.eval_steps")),
      ckpt_every_(config.integer("train.checkpoint_interval")),
      grad_clip_(config.number("train.grad_clip")),
      skip_nonfinite_(config.boolean("train.skip_nonfinite")),
      rank_(dist::rank()),
      nranks_(dist::size()),
      root_(dist::is_root()),
      lock_(root_ ? RunLock::acquire(dir_) : RunLock()),  // rank 0 writes, so it holds the lock
      schedule_(schedule_of(config)) {
  // Every check of the input before any work. The objective reads its data and builds its model
  // (vocabularies from the checkpoint on resume); a config that cannot fit is refused there, before
  // the model is built (preflight.h).
  const Checkpoint* ckpt = check_resume();
  objective_ = make_objective(config_, ckpt, {true, rank_, memory_check(config_, {"train", true, dist::local_size()})});
  create_run_directory();
  configure_compute();
  Model& model = objective_->model();
  model.set_training(true);
  for (int w = 1; w < workers_; ++w) replicas_.push_back(objective_->replica());
  P_ = model.parameter_count();
  optim_ = std::make_unique<Optimizer>(optimizer_config(config_), segments_of(model), P_);
  if (rank_ > 0)
    model.dropout_rng().seed_with(rank_seed(static_cast<uint64_t>(config_.integer("seed")) + 1, rank_));
  if (opt_.resume) {
    restore_state();
  } else {
    if (!opt_.init_from.empty()) load_safetensors_into(model, opt_.init_from);
    // Every rank starts from rank 0's weights (the same seed gives the same init; this makes it certain).
    dist::broadcast(model.flat_values().data(), P_, 0);
  }
  first_step_ = step_;
  values_ = model.flat_values();
  grads_ = model.flat_grads();
  weight_mirror_.emplace(values_.data(), P_);
  open_outputs();
  log_header();
  result_.best_val_loss = best_val_;
}

const Checkpoint* TrainingRun::check_resume() {
  if (!opt_.resume) {
    if (fs::exists(last_path_))
      throw ConfigError("output.dir: " + dir_ + " already holds a run (last.ckpt); continue it with `tfm train --resume " +
                        dir_ + "` or choose another directory with --out");
    return nullptr;
  }
  if (!fs::exists(last_path_)) throw IoError(last_path_ + ": no checkpoint to resume from");
  resumed_ = load_checkpoint(last_path_);
  Config trained;
  try {
    trained = resolve_config(resumed_.config);
  } catch (const ConfigError& e) {
    throw IoError(last_path_ + ": the checkpoint's config is invalid: " + e.what());
  }
  check_resumable(trained, config_, last_path_);
  const json& rs = resumed_.state;
  const int64_t trained_ranks =
      rs.is_object() && rs.contains("ranks") && rs.at("ranks").is_number_integer() ? rs.at("ranks").get<int64_t>() : 1;
  if (trained_ranks != nranks_)
    throw ConfigError(last_path_ + ": the run was trained with " + std::to_string(trained_ranks) +
                      " rank(s), this run has " + std::to_string(nranks_) +
                      " (resume with the same count: mpirun -np " + std::to_string(trained_ranks) + ")");
  return &resumed_;
}

// Data parallel: only rank 0 writes (the run directory lives on its machine).
void TrainingRun::create_run_directory() {
  if (!root_) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw IoError(dir_ + ": cannot create the run directory (output.dir): " + (ec ? ec.message() : "not a directory"));
  if (::access(dir_.c_str(), W_OK) != 0) throw IoError(dir_ + ": the run directory (output.dir) is not writable");
  write_file_atomically(dir_ + "/config.json", config_.tree.dump(2) + "\n");
}

void TrainingRun::configure_compute() {
  threads_ = platform::configure_threads(static_cast<int>(training_threads(config_)));
  // 0: one worker per thread (never more than the rows of a micro-batch).
  workers_ = static_cast<int>(data_parallel_workers(config_, threads_));
  // Precision and GEMM backend live below the model: every product of this run (any objective) uses them.
  gemm_mode_.emplace(parse_precision(config_.string("train.precision")),
                     resolve_gemm_backend(config_.string("train.gemm_backend")));
}

// The weights, the optimizer state, the step, the best val loss and every rank's random streams.
void TrainingRun::restore_state() {
  Model& model = objective_->model();
  restore_model(model, resumed_, last_path_);
  try {
    const json& s = resumed_.state;
    step_ = s.at("step").get<int64_t>();
    best_val_ = json_loss(s.at("best_val_loss"));
    elapsed_before_ = s.at("elapsed_s").get<double>();
    // A multi-rank checkpoint holds every rank's streams under rng.ranks (rank 0's also at the top).
    const json& r = nranks_ > 1 ? s.at("rng").at("ranks").at(static_cast<size_t>(rank_)) : s.at("rng");
    objective_->sampler_rng().set_state(rng_state(r.at("sampler")));
    model.dropout_rng().set_state(rng_state(r.at("dropout")));
    const std::string name = s.at("optimizer").at("name").get<std::string>();
    if (name != optim_->config().name || resumed_.optimizer.size() != optim_->state().size())
      throw IoError(last_path_ + ": the checkpoint's optimizer state is for \"" + name + "\", the config uses \"" +
                    optim_->config().name + "\"");
    for (size_t i = 0; i < resumed_.optimizer.size(); ++i) {
      if (static_cast<int64_t>(resumed_.optimizer[i].size()) != P_)
        throw IoError(last_path_ + ": optimizer state " + std::to_string(i) + " has " +
                      std::to_string(resumed_.optimizer[i].size()) + " values, expected " + std::to_string(P_));
      optim_->state()[i] = std::move(resumed_.optimizer[i]);
    }
    optim_->set_steps_taken(s.at("optimizer").at("steps").get<int64_t>());
    if (step_ < 0) throw IoError(last_path_ + ": negative step in the checkpoint");
  } catch (const json::exception& e) {
    throw IoError(last_path_ + ": corrupt checkpoint state (" + e.what() + ")");
  }
  saved_at_ = step_;
}

void TrainingRun::open_outputs() {
  log_ = std::make_unique<RunLog>(dir_, opt_.console, root_, opt_.resume);
  if (!root_) return;
  if (opt_.resume) drop_metrics_after(dir_ + "/metrics.jsonl", step_);
  metrics_.open(dir_ + "/metrics.jsonl", opt_.resume ? std::ios::app : std::ios::trunc);
  if (!metrics_) throw IoError(dir_ + "/metrics.jsonl: cannot open for writing");
}

void TrainingRun::log_header() {
  const Model& model = objective_->model();
  std::string breakdown;
  for (const auto& [name, n] : model.parameter_breakdown())
    breakdown += (breakdown.empty() ? "" : ", ") + name + " " + std::to_string(n);
  log_->info(format("tfm train: %s %s", opt_.resume ? "resuming" : "run directory", dir_.c_str()));
  log_->info("objective: " + objective_->name() + "; data: " + objective_->describe_data());
  log_->info(format("model: %ld parameters (%s)", static_cast<long>(P_), breakdown.c_str()));
  flops_per_token_ = objective_->train_flops_per_token();
  // The same square n = 1024 peak `tfm bench gemm` reports (a 512 cube ran ~15% below it, which
  // inflated the logged MFU), timed for 0.3 s at start-up in the precision and backend in use.
  peak_gflops_ = root_ ? measure_gemm_peak_gflops(1024, 0.3) : 0.0;
  log_->info(format("compute: %d thread(s), %s; %s; measured %s peak %.1f GFLOP/s", threads_,
                    platform::blas_summary().c_str(), platform::gemm_summary().c_str(),
                    precision_name(gemm_precision()), peak_gflops_));
  if (workers_ > 1)
    log_->info(format("data parallel: %d workers, each a share of every micro-batch's rows on one thread; "
                      "gradients summed in memory (train.data_parallel)",
                      workers_));
  log_->info(format("batch: %s x %ld accumulation step(s); %ld steps%s", objective_->describe_batch().c_str(),
                    static_cast<long>(accum_), static_cast<long>(max_steps_),
                    opt_.resume ? format(", continuing after step %ld", static_cast<long>(step_)).c_str() : ""));
  if (nranks_ > 1)
    log_->info(format("mpi: %d ranks x %d thread%s (%d on this machine); each rank samples its own batches, "
                      "gradients averaged with MPI_Allreduce over %ld floats per step",
                      nranks_, threads_, threads_ == 1 ? "" : "s", dist::local_size(), static_cast<long>(P_)));
}

// The accumulated gradient of one optimizer step, averaged over the ranks, and its clipped norm.
TrainingRun::StepStats TrainingRun::forward_backward() {
  const auto t0 = Clock::now();
  grads_.fill_(0.0f);
  double loss_sum = 0.0, tokens = 0.0;
  for (int64_t a = 0; a < accum_; ++a) {
    if (workers_ > 1) {
      const auto [loss, n] = sharded_micro_batch();
      loss_sum += loss, tokens += n;
      continue;
    }
    const BatchLoss batch = objective_->train_batch();
    Tensor loss = batch.loss;
    loss_sum += loss.item();
    // Top-k head gating's load balancing joins the gradient, not the logged loss (which stays the
    // objective's, comparable across variants).
    loss = objective_->model().with_auxiliary_loss(loss);
    tokens += static_cast<double>(batch.tokens);
    // Mean over the micro-batches: the same gradient as one batch of B * accum.
    if (accum_ > 1) loss = loss * (1.0f / static_cast<float>(accum_));
    loss.backward();
  }
  if (workers_ > 1) sum_replica_grads();
  // Data parallel: the mean over ranks of loss and gradient, before clipping, so the clip sees the
  // global gradient and every rank applies the same update (no-ops in a single process).
  StepStats s;
  s.loss = dist::allreduce_mean(loss_sum / static_cast<double>(accum_));
  s.tokens = dist::allreduce_mean(tokens) * nranks_;  // every rank's real tokens
  dist::allreduce_mean(grads_.data(), P_);
  s.norm = std::isfinite(s.loss) ? clip_grad_norm(grads_.data(), P_, grad_clip_) : NAN;
  s.seconds = seconds_since(t0);
  return s;
}

// One micro-batch over the workers: its loss (the shards' sum) and real tokens. Worker 0's gradient
// lands in grads_, the others' in their replicas' buffers (sum_replica_grads adds them).
std::pair<double, double> TrainingRun::sharded_micro_batch() {
  const BatchShards shards = objective_->train_batch_shards(workers_);
  Model& master = objective_->model();
  // Each replica's dropout stream is seeded from the master's, so the checkpointed master state is
  // all a resumed run needs to draw the same masks.
  for (auto& r : replicas_) r->dropout_rng().seed_with(master.dropout_rng().next_u64());
  std::vector<double> losses(static_cast<size_t>(workers_), 0.0);
  std::exception_ptr error;
#pragma omp parallel num_threads(workers_)
  {
    const int w = omp_get_thread_num();
    omp_set_num_threads(1);  // this worker's kernels (nested regions, oneDNN) run on its own thread
    try {
      Model& model = w == 0 ? master : *replicas_[static_cast<size_t>(w - 1)];
      Tensor loss = shards.losses[static_cast<size_t>(w)](model);
      if (loss.defined()) {
        losses[static_cast<size_t>(w)] = loss.item();
        // Top-k gating's balance term over this shard's tokens, a 1/workers share of it per shard
        // (the term of the whole batch up to how the shards' head usage differs).
        const Tensor aux = model.take_auxiliary_loss();
        if (aux.defined()) loss = loss + aux * (1.0f / static_cast<float>(workers_));
        // Mean over the micro-batches: the same gradient as one batch of B * accum.
        if (accum_ > 1) loss = loss * (1.0f / static_cast<float>(accum_));
        loss.backward();
      }
    } catch (...) {
#pragma omp critical(tfm_data_parallel_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  double loss = 0.0;
  for (double l : losses) loss += l;
  return {loss, static_cast<double>(shards.tokens)};
}

// grads_ += every replica's gradient, in worker order (the same sums every run), and the replicas'
// buffers back to zero for the next step: one pass over each buffer.
void TrainingRun::sum_replica_grads() {
  float* g = grads_.data();
  const int64_t P = P_;
#pragma omp parallel num_threads(workers_)
  {
    const int n = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = P * t / n, end = P * (t + 1) / n;
    for (const auto& r : replicas_) {
      float* rg = r->flat_grads().data();
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) g[i] += rg[i];
      std::fill(rg + begin, rg + end, 0.0f);
    }
  }
}

std::string TrainingRun::nonfinite_reason(double loss) const {
  if (!std::isfinite(loss)) return std::string("the training loss is ") + (std::isnan(loss) ? "NaN" : "infinite");
  return "the gradient of " + first_nonfinite_grad(objective_->model()) + " is not finite (loss " +
         format("%.4f", loss) + ")";
}

// Rank 0 alone evaluates (nothing collective happens in here); a new best is saved as best.ckpt.
Metrics TrainingRun::evaluate_and_keep_best() {
  Model& model = objective_->model();
  model.take_head_usage();  // top-k gating: count the evaluation's tokens only
  // Data-parallel workers step on shards of the batch, the evaluation on whole batches: tensors of other
  // sizes than the cached ones (the pool reuses by exact size). Handing the cache back before and after
  // keeps the two sets from being held at once (small config, 2 workers: peak RSS 89.5 -> 83.0 MiB).
  if (workers_ > 1) memory::trim();
  const Metrics val = objective_->evaluate("val", eval_steps_, eval_seed(config_));
  if (workers_ > 1) memory::trim();
  head_usage_ = json();
  for (const auto& [layer, share] : model.take_head_usage()) {
    head_usage_[layer] = share;
    std::string line;
    for (double f : share) line += format(" %.2f", f);
    log_->info(format("step %ld | head usage %s:%s", static_cast<long>(step_), layer.c_str(), line.c_str()));
  }
  const double val_loss = val.get("loss");
  result_.val_loss = val_loss;
  std::string note;
  if (val_loss < best_val_) {
    best_val_ = val_loss;
    result_.best_val_loss = best_val_;
    save(best_path_);
    note = ", new best: saved best.ckpt";
  }
  // The objective's other figures (masked_lm: accuracy; seq2seq: accuracy, BLEU) follow the loss, and
  // the progress line keeps showing them until the next evaluation.
  std::string extra;
  for (const auto& [name, v] : val.values)
    if (name != "loss") extra += format(" | val %s %.4g", name.c_str(), v);
  progress_extra_ = extra;
  log_->info(format("step %ld/%ld | val loss %.4f (best %.4f)%s%s", static_cast<long>(step_),
                    static_cast<long>(max_steps_), val_loss, best_val_, extra.c_str(), note.c_str()));
  return val;
}

// One metrics.jsonl record and log line for the steps since the last one.
void TrainingRun::log_interval(double lr, const Metrics* val) {
  const double ms = 1e3 * iv_time_ / static_cast<double>(iv_steps_);
  const double tok_s = iv_tokens_ / iv_time_;
  const double mfu = peak_gflops_ > 0 ? flops_per_token_ * tok_s / (peak_gflops_ * 1e9 * nranks_) : 0.0;
  const double n = static_cast<double>(iv_steps_);
  json rec = {{"step", step_},
              {"train_loss", last_loss_},
              {"train_loss_avg", iv_loss_ / n},
              {"lr", lr},
              {"grad_norm", iv_norm_ / n},
              {"tokens_per_s", tok_s},
              {"ms_per_step", ms},
              {"mfu", mfu},
              {"elapsed_s", elapsed()}};
  if (val)
    for (const auto& [name, v] : val->values) rec["val_" + name] = v;
  if (val && !head_usage_.is_null()) rec["val_head_usage"] = head_usage_;  // {layer: [share per head]}
  metrics_ << rec.dump() << "\n" << std::flush;
  log_->info(format("step %ld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %.1f ms/step | %s tok/s | mfu %.1f%%",
                    static_cast<long>(step_), static_cast<long>(max_steps_), iv_loss_ / n, lr, iv_norm_ / n, ms,
                    rate_str(tok_s).c_str(), 100.0 * mfu));
  iv_time_ = iv_loss_ = iv_norm_ = iv_tokens_ = 0.0, iv_steps_ = 0;
}

// Every rank's sampler and dropout states (10 words per rank), gathered on all ranks before any step
// that may write a checkpoint (the gather is collective; only rank 0 writes).
void TrainingRun::gather_rngs() {
  Model& model = objective_->model();
  std::vector<uint64_t> mine;
  for (const Rng::State& s : {objective_->sampler_rng().state(), model.dropout_rng().state()})
    mine.insert(mine.end(), s.begin(), s.end());
  rank_rngs_ = dist::allgather(mine);
}

json TrainingRun::rng_json_all() const {
  Model& model = objective_->model();
  json rng = {{"sampler", rng_json(objective_->sampler_rng().state())}, {"dropout", rng_json(model.dropout_rng().state())}};
  if (nranks_ == 1) return rng;
  json ranks = json::array();
  for (int r = 0; r < nranks_; ++r) {
    const auto w = rank_rngs_.begin() + 10 * r;
    ranks.push_back({{"sampler", std::vector<uint64_t>(w, w + 5)}, {"dropout", std::vector<uint64_t>(w + 5, w + 10)}});
  }
  rng["ranks"] = std::move(ranks);
  return rng;
}

// Writes the run's state to `path`, streaming the parameters and optimizer buffers (no copies).
void TrainingRun::save(const std::string& path) {
  json state = {{"step", step_},
                {"best_val_loss", std::isfinite(best_val_) ? json(best_val_) : json(nullptr)},
                {"elapsed_s", elapsed()},
                {"rng", rng_json_all()},
                {"optimizer", {{"name", optim_->config().name}, {"steps", optim_->steps_taken()}}}};
  if (nranks_ > 1) state["ranks"] = nranks_;
  save_checkpoint(path, CheckpointView{config_.tree, objective_->tokenizer(), state, values_.data(),
                                       static_cast<size_t>(P_), optim_->state(), objective_->target_tokenizer()});
}

TrainResult TrainingRun::run() {
  constexpr int64_t kMaxSkipsInARow = 100;  // then the weights themselves are bad: stop
  // What set-up freed (initialisation's random tensors, the data's temporaries) has shapes no step
  // asks for again: give it back rather than hold it beside the steps' buffers (small config: peak
  // RSS 83.0 -> 71.5 MiB with 2 workers, 81.1 -> 69.1 with one; large: 1726 -> 1707 MiB).
  memory::trim();
  while (step_ < max_steps_) {
    const StepStats s = forward_backward();
    if (!std::isfinite(s.loss) || !std::isfinite(s.norm)) {
      const std::string where = nonfinite_reason(s.loss);
      if (skip_nonfinite_ && ++skipped_in_a_row_ <= kMaxSkipsInARow) {
        // Marian's and llm.c's choice: drop this batch, keep the weights, draw the next batch.
        ++skipped_;
        log_->warn(format("step %ld: %s; batch skipped, no update (train.skip_nonfinite; %ld skipped so far)",
                          static_cast<long>(step_ + 1), where.c_str(), static_cast<long>(skipped_)));
        continue;
      }
      result_.status = TrainResult::Status::NonFinite;
      result_.step = step_;
      result_.message =
          format("step %ld: %s; training stopped. ", static_cast<long>(step_ + 1), where.c_str()) +
          (saved_at_ >= 0 ? format("%s (step %ld) is untouched; ", last_path_.c_str(), static_cast<long>(saved_at_))
                          : std::string("no checkpoint was written; ")) +
          "try a lower train.optimizer.lr or train.grad_clip";
      log_->error(result_.message);
      return result_;
    }
    skipped_in_a_row_ = 0;
    const double lr = schedule_.at(step_);
    optim_->step(values_.data(), grads_.data(), lr);
    ++step_;
    run_step_s_ += s.seconds;
    if (opt_.on_step) opt_.on_step(step_, objective_->model());
    result_.losses.push_back(s.loss);
    last_loss_ = s.loss;
    iv_time_ += s.seconds, iv_loss_ += s.loss, iv_norm_ += s.norm, iv_tokens_ += s.tokens, ++iv_steps_;

    const bool eval_now = step_ % eval_every_ == 0 || step_ == max_steps_;
    const bool stop = dist::any(opt_.stop && opt_.stop->load()) || step_ == opt_.stop_at_step;
    const bool save_now = (ckpt_every_ > 0 && step_ % ckpt_every_ == 0) || step_ == max_steps_ || stop;
    if (nranks_ > 1 && (eval_now || save_now)) gather_rngs();
    Metrics val;
    if (eval_now && root_) val = evaluate_and_keep_best();
    if (root_ && (step_ % log_every_ == 0 || eval_now)) log_interval(lr, eval_now ? &val : nullptr);
    if (save_now) {
      if (root_) save(last_path_);
      saved_at_ = step_;
    }
    if (stop && step_ < max_steps_) {
      result_.status = TrainResult::Status::Interrupted;
      result_.step = step_;
      log_->info(format("interrupted after step %ld: saved %s. Continue with: %stfm train --resume %s",
                        static_cast<long>(step_), last_path_.c_str(),
                        nranks_ > 1 ? format("mpirun -np %d ", nranks_).c_str() : "", dir_.c_str()));
      return result_;
    }
    if (!log_->shows_progress()) continue;  // no line to format off a TTY
    const double rate = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
    log_->progress(format("step %ld/%ld | loss %.4f%s | %s tok/s | ETA %s", static_cast<long>(step_),
                          static_cast<long>(max_steps_), s.loss, progress_extra_.c_str(), rate_str(rate).c_str(),
                          duration_str(s.seconds * static_cast<double>(max_steps_ - step_)).c_str()));
  }
  result_.step = step_;
  log_summary();
  log_->clear_progress();
  return result_;
}

void TrainingRun::log_summary() {
  if (step_ == first_step_) {
    log_->info(format("nothing to do: the run is at step %ld of train.max_steps = %ld (raise it with --set "
                      "train.max_steps=N)",
                      static_cast<long>(step_), static_cast<long>(max_steps_)));
    return;
  }
  log_->info(format("done: %ld steps in %s; val loss %.4f (best %.4f). %s", static_cast<long>(step_),
                    duration_str(elapsed()).c_str(), result_.val_loss, best_val_,
                    objective_->usage_hint(dir_).c_str()));
  // Where the memory went: tensors at their peak, what the caching pool holds for reuse, and the whole
  // process (tensors + libraries + data) as the OS counts it.
  const memory::Stats mem = memory::stats();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  log_->info(format("memory: tensors peaked at %.1f MiB; the pool holds %.1f MiB; process peak RSS %.1f MiB",
                    static_cast<double>(mem.peak_live_bytes) / (1 << 20),
                    static_cast<double>(mem.live_bytes + mem.cached_bytes) / (1 << 20),
                    static_cast<double>(usage.ru_maxrss) / 1024.0));
  if (nranks_ > 1) {
    const double steps_run = static_cast<double>(step_ - first_step_);
    log_->info(format("allreduce: %.2f ms/step, %.1f%% of step (%.1f ms/step, %d ranks, %.1f MB of gradients)",
                      1e3 * dist::allreduce_seconds() / steps_run, 100.0 * dist::allreduce_seconds() / run_step_s_,
                      1e3 * run_step_s_ / steps_run, nranks_, 4e-6 * static_cast<double>(P_)));
  }
}

}  // namespace

TrainResult train(const Config& config, const TrainOptions& opt) {
  TrainingRun run(config, opt);
  return run.run();
}

LoadedRun load_run(const std::string& dir, const std::string& which_asked, bool with_data) {
  const std::string which =
      !which_asked.empty() ? which_asked : fs::exists(dir + "/best.ckpt") ? "best" : "last";
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
                                 {with_data, 0, memory_check(run.config, {"loading " + path, false, 1})});
  restore_model(run.objective->model(), run.checkpoint, path);
  run.model = dynamic_cast<LanguageModel*>(&run.objective->model());
  platform::configure_threads(static_cast<int>(run.config.integer("train.threads")));
  return run;
}

}  // namespace tfm
