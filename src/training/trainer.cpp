// The training loop of a run directory: TrainingRun builds the run (objective and model, optimizer,
// workers; a resumed run's state restored) and run() steps it, evaluating, logging and checkpointing
// at their intervals. What a step computes lives beside it (micro_batch.h), what a checkpoint keeps of
// the run (run_state.h) and what the user sees (run_log.h): the loop is only the loop, the same for
// every objective (objective.h).
#include "tfm/training/trainer.h"

#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "micro_batch.h"
#include "run_log.h"
#include "run_state.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/gemm_timing.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/platform.h"
#include "tfm/training/distributed.h"
#include "tfm/training/optim.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/run_lock.h"

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

// The first parameter with a value that is not finite in `flat` (the model's flat weights or gradients,
// (P,)), "" when every value is.
std::string first_nonfinite_parameter(const Model& model, const float* flat) {
  for (const auto& p : model.parameters())
    if (first_nonfinite(flat + p.offset, p.value.numel()) < p.value.numel()) return p.name;
  return "";
}

// The checkpoint a resumed run continues from (run_dir.h: last.ckpt, else best.ckpt), read after the
// run lock is held (a writer that has not saved yet is named by the lock, not mistaken for a missing
// file).
struct ResumedCheckpoint {
  std::string path;
  Checkpoint checkpoint;
};

ResumedCheckpoint resumable_checkpoint(const std::string& dir) {
  const std::string path = resume_checkpoint_path(dir);
  if (path.empty())
    throw IoError(dir + "/" + kLastCheckpointFile + ": no checkpoint to resume from yet: the run in " + dir +
                  " has saved neither " + kLastCheckpointFile + " nor " + kBestCheckpointFile +
                  " (it saves every train.checkpoint_interval steps and when stopped). "
                  "Start it afresh with `tfm train --config CONFIG --out " +
                  dir + "` after removing " + dir + ", or wait for its first checkpoint");
  try {
    return {path, load_checkpoint(path)};
  } catch (const IoError& e) {
    // A damaged last.ckpt beside a good best.ckpt: the way on is from best.ckpt, which --resume takes
    // when last.ckpt is not there. Said, not done: moving a user's file is the user's call.
    const std::string best = dir + "/" + kBestCheckpointFile;
    if (path == best || !fs::exists(best)) throw;
    CheckpointState state;
    try {
      state = load_checkpoint_state(best);
    } catch (const IoError&) {
      throw e;
    }
    throw IoError(std::string(e.what()) + ". " + kBestCheckpointFile + " (step " +
                  std::to_string(state.step) + ") reads: to go on from it, move " + path + " aside (mv " +
                  path + " " + path + ".damaged) and --resume again");
  }
}

// The config a run trains with: train.precision "auto" replaced by what it resolves to here (a resumed
// run keeps its checkpoint's), so that the run's config.json and checkpoints record the precision used.
// `note` gets the start-up log's line about it ("" when the config named a precision).
Config with_resolved_precision(const Config& config, const Config* trained, std::string& note) {
  const TrainConfig train = config.train();
  if (train.precision != PrecisionChoice::Auto) return config;
  Config out = config;
  if (trained && trained->train().precision != PrecisionChoice::Auto) {
    out.tree["train"]["precision"] = trained->at("train.precision");
    note = "precision auto -> " + trained->at("train.precision").get<std::string>() +
           " (the run's, kept on resume)";
    return out;
  }
  const ResolvedPrecision r =
      resolve_precision(PrecisionChoice::Auto, resolve_gemm_backend(train.gemm_backend));
  out.tree["train"]["precision"] = name_of(r.precision);
  note = "precision auto -> " + name_of(r.precision) + " (" + r.reason + ")";
  return out;
}

// One call of train(): the constructor checks the input and builds everything (a resumed run's state
// restored); run() is the loop.
class TrainingRun {
 public:
  TrainingRun(const Config& config, const TrainOptions& opt, RunLock lock,
              std::optional<ResumedCheckpoint> resumed, std::string precision_note);
  TrainResult run();

 private:
  // What one optimizer step measured: the loss and gradient norm averaged over ranks, the real tokens.
  struct StepStats {
    double loss = 0, norm = 0, tokens = 0, seconds = 0;
    double mtp_loss = 0;  // model.mtp_heads: the extra heads' loss (unweighted), apart from `loss`
  };
  void check_resumed(const Checkpoint& ckpt, const Config& trained) const;  // trained: ckpt's config
  void take_best_on_disk();
  void refuse_taken_directory() const;
  void create_run_directory();
  void log_header();
  StepStats step();
  std::string nonfinite_reason(double loss) const;
  Metrics evaluate_and_keep_best();
  void log_interval(double lr, const Metrics* val, bool last = false);  // last: the run ends here
  void log_summary();
  void write_config_file() const;  // output.dir/config.json: the resolved config the run trains with
  // The run's time so far over all its processes, each one's set-up (reading the data, building the
  // model, timing the GEMM peak) included.
  double elapsed() const { return state_->elapsed_before + seconds_since(start_); }
  // The training loop's wall time so far: its steps, evaluations and checkpoints in this process and the
  // earlier ones, without any process's set-up (the clock of train.target_loss and train.max_seconds).
  double training_seconds() const { return state_->training_before + seconds_since(loop_start_); }
  bool reached_target(const Metrics& val);
  // The ETA of the log and the progress line (seconds_left) at `step_seconds` a step.
  double time_left(double step_seconds) const {
    return seconds_left(train_, max_steps_,
                        {state_->step, step_seconds, eval_s_, evals_, training_seconds(), eval_batches_});
  }
  // train.max_seconds (time_budget_spent) after this process's steps so far: a step at what the loop has
  // taken per step apart from evaluations (checkpoints and logs included).
  bool budget_spent() const {
    const int64_t steps = state_->step - first_step_;
    const double step_s =
        steps > 0 ? (seconds_since(loop_start_) - eval_s_) / static_cast<double>(steps) : 0.0;
    return time_budget_spent(train_, max_steps_,
                             {state_->step, step_s, eval_s_, evals_, training_seconds(), eval_batches_});
  }

  const Config& config_;
  const std::string precision_note_;  // train.precision "auto": what it resolved to and why
  const TrainConfig train_;           // config_'s train.* options
  const TrainOptions& opt_;
  const std::string dir_, last_path_, best_path_;
  std::string resumed_path_;  // the checkpoint a resumed run continues from ("" for a new run)
  // A resumed run's line about best.ckpt (take_best_on_disk): "" when it has none to say, else a warning
  // when best.ckpt could not be read.
  std::string best_on_disk_note_;
  bool best_on_disk_unreadable_ = false;
  // --init-from: why its vocabulary could not be checked, positions its position table lacks
  std::vector<std::string> init_from_notes_;
  const int64_t accum_, max_steps_;
  const bool mtp_;  // model.mtp_heads > 0: the extra heads' loss joins the gradient with a decaying weight
  const int rank_, nranks_;
  const bool root_;
  RunLock lock_;  // one writer per run directory (run_lock.h), held until train() returns
  std::unique_ptr<Objective> objective_;
  int threads_ = 1;
  std::optional<GemmModeGuard> gemm_mode_;  // precision and backend for every product of the run
  std::unique_ptr<MicroBatches> batches_;
  std::unique_ptr<Optimizer> optim_;
  std::unique_ptr<RunState> state_;
  const LrSchedule schedule_;
  std::optional<WeightMirror> weight_mirror_;  // bf16 products read the weights' bfloat16 copy
  std::unique_ptr<RunLog> log_;
  json head_usage_;  // top-k gating: the last evaluation's share of tokens per head, per layer
  double peak_gflops_ = 0, flops_per_token_ = 0;
  int64_t first_step_ = 0, saved_at_ = -1;
  Clock::time_point start_ = Clock::now(), loop_start_;
  int64_t skipped_ = 0, skipped_in_a_row_ = 0;
  IntervalStats interval_;
  double run_step_s_ = 0;  // this call's steps, for the allreduce share
  double eval_s_ = 0;      // this call's evaluations' time, and their count (time_left)
  int64_t evals_ = 0;
  int64_t eval_batches_ = -1;  // the forward batches of an evaluation (RunSpeed::eval_batches)
  // A resumed run: the train.max_seconds its checkpoint was saved under (0 for a new run)
  double budget_before_ = 0;
  std::string progress_extra_;  // the last evaluation's figures besides the loss, for the progress line
  TrainResult result_;
};

TrainingRun::TrainingRun(const Config& config, const TrainOptions& opt, RunLock lock,
                         std::optional<ResumedCheckpoint> resumed, std::string precision_note)
    : config_(config),
      precision_note_(std::move(precision_note)),
      train_(config.train()),
      opt_(opt),
      dir_(config.string("output.dir")),
      last_path_(dir_ + "/" + kLastCheckpointFile),
      best_path_(dir_ + "/" + kBestCheckpointFile),
      accum_(train_.grad_accum_steps),
      max_steps_(train_.max_steps),
      mtp_(config.model(0).mtp_heads > 0),
      rank_(dist::rank()),
      nranks_(dist::size()),
      root_(dist::is_root()),
      lock_(std::move(lock)),
      schedule_(lr_schedule(train_)) {
  (void)mfu_peak_from_environment();  // a bad TFM_MFU_PEAK is refused before the run directory exists
  // Every check of the input before any work. The objective reads its data and builds its model
  // (vocabularies from the checkpoint on resume); a config that cannot fit is refused there, before
  // the model is built (preflight.h).
  if (resumed) {
    resumed_path_ = resumed->path;
    const Config trained = checkpoint_config(resumed->checkpoint, resumed_path_);
    check_resumed(resumed->checkpoint, trained);
    budget_before_ = trained.train().max_seconds;
  } else {
    refuse_taken_directory();
  }
  // A stop request while the data was read (a first-use tokenization can take minutes) ends the run
  // before anything is written: no directory, step or checkpoint for a moment's training. Under MPI a
  // signal may reach one rank alone, whose tokenization then stops: every rank learns it in the same
  // collective, so that none waits for a rank that has left.
  std::string stopped_reading;  // this rank's stop while its data was read, said as it was
  try {
    objective_ =
        make_objective(config_, resumed ? &resumed->checkpoint : nullptr,
                       {true, rank_, memory_check(config_, {"train", true, dist::local_size()}), opt_.stop});
  } catch (const Interrupted& e) {
    stopped_reading = e.what();
  }
  if (dist::any(!stopped_reading.empty() || (opt_.stop && opt_.stop->load()))) {
    if (!stopped_reading.empty()) throw Interrupted(stopped_reading);
    throw Interrupted("stop requested while the data was read (data.path " + config_.data().path + ")");
  }
  // --init-from: a file that does not fit the model or its vocabulary is refused before anything is written.
  eval_batches_ = objective_->evaluation_batches("val", train_.eval_steps);
  if (!resumed && !opt_.init_from.empty()) {
    const Tokenizer* target = objective_->target_tokenizer();
    const Vocabulary run_vocabulary{objective_->tokenizer(),
                                    target ? std::optional<Tokenizer>(*target) : std::nullopt};
    init_from_notes_ = load_safetensors_into(objective_->model(), opt_.init_from, &run_vocabulary,
                                             "data.path " + config_.data().path, &config_);
  }
  create_run_directory();
  threads_ = platform::configure_threads(static_cast<int>(training_threads(config_)));
  // Precision and GEMM backend live below the model: every product of this run (any objective) uses them.
  // "auto" was resolved before (with_resolved_precision): the config names fp32 or bf16.
  const GemmBackend backend = resolve_gemm_backend(train_.gemm_backend);
  gemm_mode_.emplace(resolve_precision(train_.precision, backend).precision, backend);
  Model& model = objective_->model();
  model.set_training(true);
  batches_ =
      std::make_unique<MicroBatches>(*objective_, static_cast<int>(data_parallel_workers(config_, threads_)));
  optim_ = std::make_unique<Optimizer>(train_.optimizer, optimizer_segments(model), model.parameter_count(),
                                       max_steps_);
  state_ = std::make_unique<RunState>(config_, *objective_, *optim_, rank_, nranks_);
  if (rank_ > 0)
    model.dropout_rng().seed_with(rank_seed(static_cast<uint64_t>(config_.integer("seed")) + 1, rank_));
  if (resumed) {
    state_->restore(resumed->checkpoint, resumed_path_);
    interval_.restore(state_->restored_unlogged);
    saved_at_ = state_->step;
    if (root_) take_best_on_disk();
  } else {
    // Every rank starts from rank 0's weights (the same seed gives the same init; this makes it certain).
    dist::broadcast(model.flat_values().data(), model.parameter_count(), 0);
  }
  first_step_ = state_->step;
  weight_mirror_.emplace(model.flat_values().data(), model.parameter_count());
  log_ = std::make_unique<RunLog>(dir_, opt_.console, root_, opt_.resume, state_->step);
  log_header();
  if (!resumed && !opt_.init_from.empty())
    log_->info(fmt::format("initial weights: {} (--init-from), not the seed's", opt_.init_from.c_str()));
  for (const std::string& note : init_from_notes_) log_->warn(note);
  result_.best_val_loss = state_->best_val;
}

// best.ckpt is saved at evaluations, last.ckpt at checkpoints: after a crash best.ckpt may hold an
// evaluation from after last.ckpt, which last.ckpt's best val loss so far does not know. A new best must
// beat the better of the two, or the resumed run would replace a better best.ckpt with a worse one.
// Its checksum is checked and its state read, not its weights; a best.ckpt that cannot be read or is
// damaged is said and left to the usual rule, which replaces it at the next best evaluation.
void TrainingRun::take_best_on_disk() {
  std::error_code ec;
  if (resumed_path_ != last_path_ || !fs::exists(best_path_, ec)) return;
  const std::string known =
      std::isfinite(state_->best_val)
          ? fmt::format("{} (step {}, best val loss so far {:.4f})", kLastCheckpointFile, state_->step,
                        state_->best_val)
          : fmt::format("{} (step {}, not evaluated yet)", kLastCheckpointFile, state_->step);
  CheckpointState best;
  try {
    verify_checkpoint(best_path_);  // a damaged file's val loss is no bar to set
    best = load_checkpoint_state(best_path_);
  } catch (const IoError& e) {
    best_on_disk_unreadable_ = true;
    best_on_disk_note_ =
        fmt::format("{}; the resume goes on: the first evaluation better than the best {} knows replaces {}",
                    e.what(), known.c_str(), kBestCheckpointFile);
    return;
  }
  if (!(best.best_val_loss < state_->best_val)) return;
  const std::string relation =
      best.step > state_->step ? "from after " + known : "better than what " + known + " knows";
  best_on_disk_note_ =
      fmt::format("{} holds step {} at val loss {:.4f}, {}: a new best must beat {:.4f}", kBestCheckpointFile,
                  best.step, best.best_val_loss, relation.c_str(), best.best_val_loss);
  state_->best_val = best.best_val_loss;
}

// The checkpoint's config against the run's, and its rank count against this job's.
void TrainingRun::check_resumed(const Checkpoint& ckpt, const Config& trained) const {
  check_resumable(trained, config_, resumed_path_);
  const int64_t trained_ranks = ckpt.state.ranks();
  if (trained_ranks != nranks_)
    throw ConfigError(resumed_path_ + ": the run was trained with " + std::to_string(trained_ranks) +
                      " rank(s), this run has " + std::to_string(nranks_) +
                      " (resume with the same count: mpirun -np " + std::to_string(trained_ranks) + ")");
}

// A new run never takes over a directory that holds one: any checkpoint, log or metrics file counts
// (a run saved only best.ckpt when train.checkpoint_interval is 0 and it was killed).
void TrainingRun::refuse_taken_directory() const {
  const std::vector<std::string> found = run_files_in(dir_);
  if (found.empty()) return;
  std::string names;
  for (const std::string& f : found) names += (names.empty() ? "" : ", ") + f;
  // Without a checkpoint there is nothing to resume (--resume says so too): only the logs of a run
  // stopped before its first save.
  if (resume_checkpoint_path(dir_).empty())
    throw ConfigError("output.dir: " + dir_ + " already holds a run (" + names +
                      ") that saved no checkpoint, so it cannot be continued; remove " + dir_ +
                      " to start afresh there, or choose another directory with --out");
  throw ConfigError("output.dir: " + dir_ + " already holds a run (" + names +
                    "); continue it with `tfm train --resume " + dir_ +
                    "` or choose another directory with --out");
}

// Data parallel: only rank 0 writes (the run directory lives on its machine).
void TrainingRun::create_run_directory() {
  if (!root_) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw IoError(
        dir_ + ": cannot create the run directory (output.dir): " + (ec ? ec.message() : "not a directory"));
  if (::access(dir_.c_str(), W_OK) != 0)
    throw IoError(dir_ + ": the run directory (output.dir) is not writable");
  // Every file the run writes (and the lock), refused before any is written when a link or device
  // holds its name.
  for (const std::string& name : run_file_names()) require_regular_or_absent(dir_ + "/" + name);
  // A resumed run's config.json is written when it takes a step (run()): a resume with nothing to do
  // (a lower train.max_steps) must not leave a config the checkpoint was not trained to.
  if (!opt_.resume) write_config_file();
}

void TrainingRun::write_config_file() const {
  if (root_) write_file_atomically(dir_ + "/" + kRunConfigFile, config_.tree.dump(2) + "\n");
}

void TrainingRun::log_header() {
  const Model& model = objective_->model();
  const int64_t P = model.parameter_count();
  std::string breakdown;
  for (const auto& [name, n] : model.parameter_breakdown())
    breakdown += (breakdown.empty() ? "" : ", ") + name + " " + std::to_string(n);
  log_->info(fmt::format("tfm train: {} {}", opt_.resume ? "resuming" : "run directory", dir_.c_str()));
  if (!resumed_path_.empty() && resumed_path_ != last_path_)
    log_->info(fmt::format("no {}: resuming from {} (step {})", kLastCheckpointFile, kBestCheckpointFile,
                           state_->step));
  if (!best_on_disk_note_.empty()) {
    if (best_on_disk_unreadable_)
      log_->warn(best_on_disk_note_);
    else
      log_->info(best_on_disk_note_);
  }
  log_->info("objective: " + objective_->name() + "; data: " + objective_->describe_data());
  // A corpus edited since the checkpoint (its cache rebuilt on the way here, said on stderr only): the
  // batches and the validation split are no longer the ones an uninterrupted run would have seen.
  const std::string data_now = state_->data_hash();
  if (!state_->restored_data_hash.empty() && !data_now.empty() && data_now != state_->restored_data_hash)
    log_->warn(fmt::format(
        "the data changed since {} was saved at step {} (data hash {} then, {} now): the resumed run "
        "trains on other batches than an uninterrupted one would, and its val losses are measured on "
        "another split than the best val loss so far{} it must beat",
        fs::path(resumed_path_).filename().string().c_str(), first_step_, state_->restored_data_hash.c_str(),
        data_now.c_str(),
        std::isfinite(state_->best_val) ? fmt::format(" ({:.4f})", state_->best_val).c_str() : ""));
  for (const std::string& warning : objective_->data_warnings()) log_->warn(warning);
  for (const std::string& warning : config_warnings(config_)) log_->warn(warning);
  log_->info(fmt::format("model: {} parameters ({})", P, breakdown.c_str()));
  if (!precision_note_.empty()) log_->info(precision_note_);
  flops_per_token_ = objective_->train_flops_per_token();
  // The same square n = 1024 peak `tfm bench gemm` reports (a 512 cube ran ~15% below it, which
  // inflated the logged MFU), in the precision and backend in use: timed for 0.3 s the first time on
  // this machine and setup, read from the user's cache after that.
  const GemmPeak peak = root_ ? training_gemm_peak() : GemmPeak{};
  peak_gflops_ = peak.gflops;
  log_->info(fmt::format("compute: {} thread(s), {}; {}", threads_, platform::blas_summary().c_str(),
                         platform::gemm_summary().c_str()));
  for (const std::string& warning :
       thread_warnings(threads_, data_parallel_workers(config_, threads_), dist::local_size(),
                       platform::available_cores(), std::max(1u, std::thread::hardware_concurrency())))
    log_->warn(warning);
  if (root_) {
    std::string line =
        fmt::format("{} peak {:.1f} GFLOP/s for MFU: ", precision_name(gemm_precision()), peak.gflops);
    if (peak.from_environment)
      line += "given by TFM_MFU_PEAK (not measured)";
    else if (peak.from_cache)
      line += "measured " + peak.measured + ", read from " + gemm_peak_cache_path() +
              " (`tfm bench gemm --threads " + std::to_string(threads_) + "` measures it again)";
    else
      line += "measured now on " + platform::cpu_name() +
              (peak.written_to_cache
                   ? fmt::format(", kept in {} for {} days", gemm_peak_cache_path(), kTrainingPeakMaxAgeDays)
                   : "");
    if (!peak.cache_problem.empty()) line += "; " + peak.cache_problem;
    log_->info(line);
  }
  if (optim_->config().name == OptimizerKind::Muon) {
    const std::vector<ParamSegment> segments = optimizer_segments(model);
    int64_t matrices = 0, elements = 0;
    for (const ParamSegment& s : segments)
      if (s.rows > 0) ++matrices, elements += s.size;
    log_->info(fmt::format(
        "optimizer: Muon on the blocks' {} weight matrices ({} parameters), AdamW on the other {}; "
        "Newton-Schulz {:.3g} GFLOP per step (not in MFU)",
        matrices, elements, P - elements, 1e-9 * newton_schulz_flops(segments, OptimizerKind::Muon)));
  }
  if (train_.optimizer.ema_decay > 0)
    log_->info(
        fmt::format("EMA of the weights (train.ema_decay {:g}): evaluations, target_loss and best.ckpt use "
                    "it; the raw weights train (last.ckpt)",
                    train_.optimizer.ema_decay));
  if (train_.eval_steps == 0)
    log_->info("evaluation: the whole validation split, every token once (train.eval_steps 0)");
  if (batches_->workers() > 1)
    log_->info(
        fmt::format("data parallel: {} workers, each a share of every micro-batch's rows on one thread; "
                    "gradients summed in memory (train.data_parallel)",
                    batches_->workers()));
  log_->info(fmt::format("batch: {} x {} accumulation step(s); {} steps{}",
                         objective_->describe_batch().c_str(), accum_, max_steps_,
                         opt_.resume ? fmt::format(", continuing after step {}", state_->step).c_str() : ""));
  if (nranks_ > 1)
    log_->info(
        fmt::format("mpi: {} ranks x {} thread{} ({} on this machine); each rank samples its own batches, "
                    "gradients averaged with MPI_Allreduce over {} floats per step",
                    nranks_, threads_, threads_ == 1 ? "" : "s", dist::local_size(), P));
}

// The accumulated gradient of one optimizer step, averaged over the ranks, and its clipped norm.
TrainingRun::StepStats TrainingRun::step() {
  const auto t0 = Clock::now();
  Model& model = objective_->model();
  Tensor grads = model.flat_grads();
  const int64_t P = model.parameter_count();
  grads.fill_(0.0f);
  double loss_sum = 0.0, tokens = 0.0, mtp_sum = 0.0;
  const float mtp_weight =
      mtp_ ? static_cast<float>(mtp_weight_at(train_.mtp_weight, state_->step, max_steps_)) : 0.0f;
  // The step's micro-batches, drawn first: each one's loss (a mean over its counted positions) is
  // weighted by its share of every rank's counted positions, so that the update is the mean over all of
  // them, as one batch of B * accum * ranks gives. Padded pairs (seq2seq) and masks (masked_lm) count a
  // different number of positions per micro-batch; a mean of means would weigh a short one as a long one.
  std::vector<BatchShards> micro;
  uint64_t counted = 0;
  for (int64_t a = 0; a < accum_; ++a) {
    micro.push_back(batches_->next());
    counted += static_cast<uint64_t>(micro.back().counted);
  }
  double all_counted = 0.0;
  for (const uint64_t n : dist::allgather({counted})) all_counted += static_cast<double>(n);
  for (const BatchShards& shards : micro) {
    // Times the ranks: the gradient's mean over ranks below makes it a share of the whole.
    const double share = all_counted > 0 ? static_cast<double>(shards.counted) * nranks_ / all_counted : 0.0;
    const MicroBatchLoss m = batches_->run(shards, static_cast<float>(share), mtp_weight);
    loss_sum += m.loss * share, tokens += m.tokens, mtp_sum += m.auxiliary * share;
  }
  batches_->sum_gradients();
  // Data parallel: the mean over ranks of loss and gradient, before clipping, so the clip sees the
  // global gradient and every rank applies the same update (no-ops in a single process).
  StepStats s;
  s.loss = dist::allreduce_mean(loss_sum);
  if (mtp_) s.mtp_loss = dist::allreduce_mean(mtp_sum);
  s.tokens = dist::allreduce_mean(tokens) * nranks_;  // every rank's real tokens
  dist::allreduce_mean(grads.data(), P);
  s.norm = std::isfinite(s.loss) ? clip_grad_norm(grads.data(), P, train_.grad_clip) : NAN;
  s.seconds = seconds_since(t0);
  return s;
}

std::string TrainingRun::nonfinite_reason(double loss) const {
  if (!std::isfinite(loss))
    return std::string("the training loss is ") + (std::isnan(loss) ? "NaN" : "infinite");
  return "the gradient of " +
         first_nonfinite_parameter(objective_->model(), objective_->model().flat_grads().data()) +
         " is not finite (loss " + fmt::format("{:.4f}", loss) + ")";
}

// train.ema_decay: swaps the EMA (the optimizer's last buffer) into the model's weights for the scope, and
// back at its end (a swap: both come back bit for bit). RunState::ema_in_model tells a checkpoint saved
// meanwhile (best.ckpt) that its model and EMA buffer are exchanged, so a resume from it swaps them back.
class EmaInModel {
 public:
  EmaInModel(Optimizer& optim, Model& model, RunState& state)
      : ema_(optim.ema()), values_(model.flat_values().data()), n_(model.parameter_count()), state_(state) {
    swap();
  }
  ~EmaInModel() { swap(); }
  EmaInModel(const EmaInModel&) = delete;
  EmaInModel& operator=(const EmaInModel&) = delete;

 private:
  void swap() {
    if (!ema_) return;
    std::swap_ranges(values_, values_ + n_, ema_);
    state_.ema_in_model = !state_.ema_in_model;
    weights_changed(values_);  // bfloat16 products re-round the weights
  }
  float* ema_;
  float* values_;
  int64_t n_;
  RunState& state_;
};

// Rank 0 alone evaluates (nothing collective happens in here); a new best is saved as best.ckpt. A stop
// request abandons the evaluation between batches: nothing is saved or recorded from it.
// train.target_loss: at the first evaluation at or below it, the time it took (from the first step,
// evaluations included: the user's clock) goes to the log, the result and metrics.jsonl.
bool TrainingRun::reached_target(const Metrics& val) {
  const double target = train_.target_loss;
  if (target <= 0.0 || !(val.get("loss") <= target)) return false;
  result_.target_reached = true;
  result_.seconds_to_target = training_seconds();
  log_->info(
      fmt::format("step {} | target reached: val loss {:.4f} <= train.target_loss {:g} after {:.1f} s of "
                  "training, evaluations included ({}); best.ckpt holds this model",
                  state_->step, val.get("loss"), target, result_.seconds_to_target,
                  duration_str(result_.seconds_to_target)));
  return true;
}

Metrics TrainingRun::evaluate_and_keep_best() {
  Model& model = objective_->model();
  const int64_t step = state_->step;
  model.take_head_usage();  // top-k gating: count the evaluation's tokens only
  // Data-parallel workers step on shards of the batch, the evaluation on whole batches: tensors of other
  // sizes than the cached ones (the pool reuses by exact size). Handing the cache back before and after
  // keeps the two sets from being held at once.
  const bool workers = batches_->workers() > 1;
  if (workers) memory::trim();
  // train.ema_decay: the evaluation and best.ckpt's model are the EMA's; the raw weights come back after.
  EmaInModel ema_in_model(*optim_, model, *state_);
  const auto eval_start = Clock::now();
  const Metrics val = objective_->evaluate("val", train_.eval_steps, eval_seed(config_), opt_.stop);
  eval_s_ += seconds_since(eval_start), ++evals_;
  if (workers) memory::trim();
  if (val.abandoned) {
    model.take_head_usage();
    log_->info(fmt::format(
        "step {} | stop requested: the evaluation is abandoned (no val loss, best.ckpt untouched)", step));
    return val;
  }
  head_usage_ = json();
  for (const auto& [layer, share] : model.take_head_usage()) {
    head_usage_[layer] = share;
    std::string line;
    for (double f : share) line += fmt::format(" {:.2f}", f);
    log_->info(fmt::format("step {} | head usage {}:{}", step, layer.c_str(), line.c_str()));
  }
  const double val_loss = val.get("loss");
  result_.val_loss = val_loss;
  std::string note;
  if (val_loss < state_->best_val) {
    state_->best_val = val_loss;
    result_.best_val_loss = val_loss;
    // None unlogged: this step's line is written right after the evaluation.
    state_->save(best_path_, elapsed(), training_seconds(), UnloggedSteps{});
    note = ", new best: saved best.ckpt";
  }
  // The objective's other figures (masked_lm: accuracy; seq2seq: accuracy, BLEU) follow the loss, and
  // the progress line keeps showing them until the next evaluation.
  std::string extra;
  for (const auto& [name, v] : val.values)
    if (name != "loss") extra += fmt::format(" | val {} {:.4g}", name.c_str(), v);
  progress_extra_ = extra;
  log_->info(fmt::format("step {}/{} | val loss {:.4f} (best {:.4f}){}{}", step, max_steps_, val_loss,
                         state_->best_val, extra.c_str(), note.c_str()));
  return val;
}

// One metrics.jsonl record and log line for the steps since the last one.
void TrainingRun::log_interval(double lr, const Metrics* val, bool last) {
  const IntervalStats& iv = interval_;
  const double ms = 1e3 * iv.seconds / static_cast<double>(iv.timed_steps);
  const double tok_s = iv.tokens / iv.seconds;
  const double mfu = peak_gflops_ > 0 ? flops_per_token_ * tok_s / (peak_gflops_ * 1e9 * nranks_) : 0.0;
  const double n = static_cast<double>(iv.steps);
  json rec = {{"step", state_->step},
              {"train_loss", iv.last_loss},
              {"train_loss_avg", iv.loss / n},
              {"lr", lr},
              {"grad_norm", iv.norm / n},
              {"tokens_per_s", tok_s},
              {"ms_per_step", ms},
              {"mfu", mfu},
              {"elapsed_s", elapsed()},
              {"training_s", training_seconds()}};  // the loop's time: the clock of train.target_loss
  // Multi-token prediction: the extra heads' loss (unweighted) and its weight at the interval's last step.
  const double mtp_weight = mtp_ ? mtp_weight_at(train_.mtp_weight, state_->step - 1, max_steps_) : 0.0;
  if (mtp_) rec["train_mtp_loss"] = iv.auxiliary / n, rec["mtp_weight"] = mtp_weight;
  if (val)
    for (const auto& [name, v] : val->values) rec["val_" + name] = v;
  if (val && !head_usage_.is_null()) rec["val_head_usage"] = head_usage_;  // {layer: [share per head]}
  if (val && result_.target_reached) rec["seconds_to_target"] = result_.seconds_to_target;
  log_->record(rec);
  const std::string mtp =
      mtp_ ? fmt::format(" | mtp loss {:.4f} (weight {:.3f})", iv.auxiliary / n, mtp_weight) : std::string();
  log_->info(fmt::format(
      "step {}/{} | loss {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:.1f} ms/step | {} tok/s | mfu {:.1f}% | "
      "eta {}",
      state_->step, max_steps_, iv.loss / n, mtp.c_str(), lr, iv.norm / n, ms, rate_str(tok_s).c_str(),
      100.0 * mfu, duration_str(last ? 0.0 : time_left(ms / 1e3)).c_str()));
  interval_.reset();
}

TrainResult TrainingRun::run() {
  constexpr int64_t kMaxSkipsInARow = 100;  // then the weights themselves are bad: stop
  const int64_t log_every = train_.log_interval, eval_every = train_.eval_interval;
  const int64_t ckpt_every = train_.checkpoint_interval;
  const double max_seconds = train_.max_seconds;
  Model& model = objective_->model();
  // What set-up freed (initialisation's random tensors, the data's temporaries) has shapes no step
  // asks for again: give it back rather than hold it beside the steps' buffers.
  memory::trim();
  int64_t& step = state_->step;
  loop_start_ = Clock::now();
  int64_t drawn_at = -1;  // the step of the last call: the end of a run just evaluated needs none
  const auto after_evaluation = [&] {
    if (!root_ || !opt_.on_evaluation || drawn_at == step) return;
    drawn_at = step;
    try {
      opt_.on_evaluation(dir_);
    } catch (const std::exception& e) {
      log_->warn(e.what());
    }
  };
  // A run that stopped at its target has nothing to do while the target stands: a lower
  // train.target_loss, or 0 for none, trains on (and anything else trains on from where it stopped).
  if (state_->stopped == "target_loss" && train_.target_loss > 0.0 &&
      state_->best_val <= train_.target_loss) {
    log_->info(
        fmt::format("nothing to do: the run reached val loss <= {:g} at step {} (best {:.4f}); to train "
                    "on, lower the target or drop it: --set train.target_loss=0",
                    train_.target_loss, step, state_->best_val));
    result_.step = step;
    result_.target_reached = true;
    return result_;
  }
  // Likewise a run whose training time (over all its processes) has used train.max_seconds, or that the
  // budget stopped, which kept its closing evaluation within it: its first step would only stop it again.
  // A larger budget, or 0 for none, trains on.
  if (max_seconds > 0 && step < max_steps_ &&
      (state_->training_before >= max_seconds ||
       (state_->stopped == "max_seconds" && max_seconds <= budget_before_))) {
    log_->info(fmt::format(
        "nothing to do: the run has used its time budget train.max_seconds = {:g} ({:.1f} s of training, "
        "step {} of {}); to train on, raise it above that: --set train.max_seconds=S, or drop it: --set "
        "train.max_seconds=0",
        max_seconds, state_->training_before, step, max_steps_));
    result_.step = step;
    result_.out_of_time = true;
    return result_;
  }
  if (opt_.resume && step < max_steps_) write_config_file();
  state_->stopped.clear();
  // Stops the run at `failed` (the step whose loss, gradient or update was not finite), saying why and
  // that the last checkpoint holds the weights from before it.
  const auto stop_nonfinite = [&](int64_t failed, const std::string& where) {
    result_.status = TrainResult::Status::NonFinite;
    result_.step = step;
    result_.nonfinite = where;
    result_.message =
        fmt::format("step {}: {}; training stopped. ", failed, where.c_str()) +
        (saved_at_ >= 0 ? fmt::format("{} (step {}) is untouched; ", last_path_.c_str(), saved_at_)
                        : std::string("no checkpoint was written; ")) +
        "try a lower train.optimizer.lr or train.grad_clip";
    log_->error(result_.message);
    return result_;
  };
  while (step < max_steps_) {
    StepStats s = this->step();
    if (!std::isfinite(s.loss) || !std::isfinite(s.norm)) {
      const std::string where = nonfinite_reason(s.loss);
      if (train_.skip_nonfinite && ++skipped_in_a_row_ <= kMaxSkipsInARow) {
        // Marian's and llm.c's choice: drop this batch, keep the weights, draw the next batch.
        ++skipped_;
        log_->warn(
            fmt::format("step {}: {}; batch skipped, no update (train.skip_nonfinite; {} skipped so far)",
                        step + 1, where.c_str(), skipped_));
        continue;
      }
      return stop_nonfinite(step + 1, where);
    }
    skipped_in_a_row_ = 0;
    const double lr = schedule_.at(step);
    // The update counts in the step's time (ms/step, tokens/s, MFU), as torch_lm.py times it: Muon's
    // Newton-Schulz products are not free.
    const auto update_start = Clock::now();
    optim_->step(model.flat_values().data(), model.flat_grads().data(), lr);
    s.seconds += seconds_since(update_start);
    ++step;
    run_step_s_ += s.seconds;
    if (opt_.on_step) opt_.on_step(step, model);
    result_.losses.push_back(s.loss);
    interval_.add(s.seconds, s.loss, s.norm, s.tokens, s.mtp_loss);

    // train.max_seconds, on rank 0's clock so every rank stops at the same step: before a step and the
    // closing evaluation would pass it.
    const bool out_of_time = max_seconds > 0 && step < max_steps_ && dist::any(root_ && budget_spent());
    const bool eval_now = step % eval_every == 0 || step == max_steps_ || out_of_time;
    const bool stop = dist::any(opt_.stop && opt_.stop->load()) || step == opt_.stop_at_step;
    const bool save_now = (ckpt_every > 0 && step % ckpt_every == 0) || step == max_steps_ || stop;
    // An update can overflow the weights while the loss and gradient it came from were finite (a huge
    // learning rate): the next step's loss would stop the run, but a checkpoint written first would
    // replace the last good one with them. Checked before anything is evaluated or written.
    if (eval_now || save_now) {
      const std::string bad = root_ ? first_nonfinite_parameter(model, model.flat_values().data()) : "";
      if (dist::any(!bad.empty())) {
        --step;  // the run is where its weights were last finite
        return stop_nonfinite(step + 1, "the update made the weights of " + (bad.empty() ? "a tensor" : bad) +
                                            " not finite (loss " + fmt::format("{:.4f}", s.loss) + ")");
      }
    }
    if (eval_now || save_now) state_->gather_streams();
    Metrics val;
    if (eval_now && root_) val = evaluate_and_keep_best();
    // Every rank stops with rank 0 when a stop request abandoned its evaluation.
    const bool abandoned = eval_now && dist::any(root_ && val.abandoned);
    // Every rank stops together at the step rank 0's evaluation reached the target.
    const bool reached = eval_now && !abandoned && dist::any(root_ && reached_target(val));
    const bool ends = reached || (out_of_time && !abandoned);  // at the target or the time budget
    if (root_ && (step % log_every == 0 || (eval_now && !abandoned)))
      log_interval(lr, eval_now && !abandoned ? &val : nullptr, ends);
    if (eval_now && !abandoned) after_evaluation();
    if (ends) {
      state_->stopped = reached ? "target_loss" : "max_seconds";
      result_.out_of_time = !reached;
      if (root_) state_->save(last_path_, elapsed(), training_seconds(), interval_.unlogged());
      break;
    }
    if (save_now || abandoned) {
      if (root_) state_->save(last_path_, elapsed(), training_seconds(), interval_.unlogged());
      saved_at_ = step;
    }
    if ((stop && step < max_steps_) || abandoned) {
      result_.status = TrainResult::Status::Interrupted;
      result_.step = step;
      after_evaluation();
      log_->info(fmt::format("interrupted after step {}: saved {}. Continue with: {}tfm train --resume {}",
                             step, last_path_.c_str(),
                             nranks_ > 1 ? fmt::format("mpirun -np {} ", nranks_).c_str() : "",
                             dir_.c_str()));
      return result_;
    }
    if (!log_->shows_progress()) continue;  // no line to format off a terminal
    const double rate = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
    log_->progress(fmt::format("step {}/{} | step loss {:.4f}{} | {} tok/s | eta {}", step, max_steps_,
                               s.loss, progress_extra_.c_str(), rate_str(rate).c_str(),
                               duration_str(time_left(s.seconds)).c_str()));
  }
  result_.step = step;
  after_evaluation();
  log_summary();
  log_->clear_progress();
  return result_;
}

void TrainingRun::log_summary() {
  const int64_t step = state_->step;
  if (step == first_step_) {
    log_->info(
        fmt::format("nothing to do: the run is at step {} of train.max_steps = {} (raise it with --set "
                    "train.max_steps=N)",
                    step, max_steps_));
    return;
  }
  log_->info(fmt::format("done: {} steps in {}; val loss {:.4f} (best {:.4f}). {}", step,
                         duration_str(elapsed()).c_str(), result_.val_loss, state_->best_val,
                         objective_->usage_hint(dir_).c_str()));
  if (result_.out_of_time) {
    // Steps and the closing evaluation run whole, and the budget is checked against their measured
    // times: the first step, and the evaluation before any was timed, run on a guess. A budget they alone
    // pass is spent by them, which the line says rather than leave "stopped" to read as on time.
    const double spent = training_seconds(), budget = train_.max_seconds;
    log_->info(fmt::format(
        "time budget: stopped at step {} of {} after {:.1f} s of training (train.max_seconds = {:g}){}", step,
        max_steps_, spent, budget,
        spent > budget * 1.05
            ? fmt::format("; {:.1f} s over it: steps and the closing evaluation are never cut short, and the "
                          "first of each runs before its time is known",
                          spent - budget)
            : ""));
  }
  if (const double target = train_.target_loss; target > 0.0)
    log_->info(
        result_.target_reached
            ? fmt::format("time to target: val loss <= {:g} at step {} after {:.1f} s of training", target,
                          step, result_.seconds_to_target)
            : fmt::format("time to target: val loss <= {:g} not reached in {} steps (best {:.4f}); raise "
                          "train.max_steps or change the recipe",
                          target, step, state_->best_val));
  // Where the memory went: tensors at their peak, what the caching pool holds for reuse, and the whole
  // process (tensors + libraries + data) as the OS counts it.
  const memory::Stats mem = memory::stats();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  log_->info(fmt::format(
      "memory: tensors peaked at {:.1f} MiB; the pool holds {:.1f} MiB; process peak RSS {:.1f} MiB",
      static_cast<double>(mem.peak_live_bytes) / (1 << 20),
      static_cast<double>(mem.live_bytes + mem.cached_bytes) / (1 << 20),
      static_cast<double>(usage.ru_maxrss) / 1024.0));
  if (nranks_ > 1) {
    const double steps_run = static_cast<double>(step - first_step_);
    log_->info(fmt::format(
        "allreduce: {:.2f} ms/step, {:.1f}% of step ({:.1f} ms/step, {} ranks, {:.1f} MB of gradients)",
        1e3 * dist::allreduce_seconds() / steps_run, 100.0 * dist::allreduce_seconds() / run_step_s_,
        1e3 * run_step_s_ / steps_run, nranks_,
        4e-6 * static_cast<double>(objective_->model().parameter_count())));
  }
}

}  // namespace

void check_resumable(const Config& trained, const Config& config, const std::string& source) {
  // Paths compare as files: a run started before runs recorded absolute paths named its data relative
  // to the working directory, where it is resumed from.
  for (const auto& path : differing_keys(with_absolute_paths(trained), with_absolute_paths(config))) {
    const KeySpec* k = find_key(path);
    if (k->resumable || path == "output.dir") continue;
    throw ConfigError(path + ": " + source + " was trained with " + trained.at(path).dump() +
                      ", the config has " + config.at(path).dump() +
                      " (only keys marked 'May change on --resume' may differ)");
  }
}

double evaluation_seconds(const TrainConfig& train, const RunSpeed& speed) {
  if (speed.evals > 0) return speed.eval_seconds / static_cast<double>(speed.evals);
  // train.eval_steps 0 (the whole validation split) without eval_batches: of a size not known here.
  const int64_t batches = speed.eval_batches >= 0 ? speed.eval_batches : train.eval_steps;
  return speed.step_seconds / (3.0 * static_cast<double>(train.grad_accum_steps)) *
         static_cast<double>(batches);
}

double seconds_left(const TrainConfig& train, int64_t max_steps, const RunSpeed& speed) {
  const int64_t step = speed.step, every = train.eval_interval;
  // Evaluations come at every multiple of train.eval_interval and at the last step.
  const int64_t evals_left = max_steps / every - step / every + (max_steps % every != 0 && step < max_steps);
  double left = speed.step_seconds * static_cast<double>(max_steps - step) +
                evaluation_seconds(train, speed) * static_cast<double>(evals_left);
  if (train.max_seconds > 0) left = std::min(left, std::max(0.0, train.max_seconds - speed.training_seconds));
  return left;
}

bool time_budget_spent(const TrainConfig& train, int64_t max_steps, const RunSpeed& speed) {
  return train.max_seconds > 0 && speed.step < max_steps &&
         speed.training_seconds + speed.step_seconds + evaluation_seconds(train, speed) > train.max_seconds;
}

uint64_t eval_seed(const Config& config) {
  return static_cast<uint64_t>(config.integer("seed")) ^ kEvalSalt;
}

namespace {

// A run stopped before its first step (Interrupted: while its data was read): nothing was written.
TrainResult stopped_before_training(const Interrupted& e, int64_t step) {
  TrainResult r;
  r.status = TrainResult::Status::Interrupted;
  r.step = step;
  r.message = std::string(e.what()) + "; no step was trained and nothing was saved";
  return r;
}

}  // namespace

TrainResult train(const Config& config, const TrainOptions& opt) {
  const std::string dir = config.string("output.dir");
  // The lock before anything in the directory is read: a second writer is named by its PID.
  RunLock lock = dist::is_root() ? RunLock::acquire(dir) : RunLock();  // rank 0 writes, so it holds it
  std::optional<ResumedCheckpoint> resumed;
  if (opt.resume) resumed = resumable_checkpoint(dir);
  std::string note;
  std::optional<Config> trained;
  if (resumed) trained = checkpoint_config(resumed->checkpoint, resumed->path);
  // The run records its files' absolute paths, so that it finds them from any directory.
  const Config run_config =
      with_resolved_precision(with_absolute_paths(config), trained ? &*trained : nullptr, note);
  const int64_t step = resumed ? resumed->checkpoint.state.step : 0;
  try {
    return TrainingRun(run_config, opt, std::move(lock), std::move(resumed), note).run();
  } catch (const Interrupted& e) {
    return stopped_before_training(e, step);
  }
}

TrainResult resume(const std::string& dir, const std::vector<std::string>& overrides, TrainOptions opt) {
  require_run_directory(dir);
  RunLock lock = dist::is_root() ? RunLock::acquire(dir) : RunLock();
  ResumedCheckpoint ckpt = resumable_checkpoint(dir);
  Config trained = checkpoint_config(ckpt.checkpoint, ckpt.path);
  trained.tree["output"]["dir"] = dir;  // the directory may have moved since
  // Before anything is written: a hand-edited config.json is refused, not silently overwritten.
  const auto file_keys = check_run_config_file(dir, trained, ckpt.path);
  std::string note;
  const Config config = with_resolved_precision(resume_config(trained, overrides), &trained, note);
  // A resumable key config.json holds another value of (and no --set names): said, not silently dropped.
  for (const auto& [path, value] : file_keys)
    if (config.at(path) == trained.at(path))
      note += (note.empty() ? "" : "; ") +
              fmt::format(
                  "{}/{} has {} = {}, which a resume does not read (a resume stopped before its first "
                  "checkpoint leaves its --set there): the run goes on with the checkpoint's {}; --set "
                  "{}={} uses it",
                  dir.c_str(), kRunConfigFile, path.c_str(), value.dump().c_str(),
                  config.at(path).dump().c_str(), path.c_str(), value.dump().c_str());
  // What the overrides changed: the run goes on from its checkpoint, but a new max_steps also stretches
  // or shrinks the learning-rate schedule from here (it is a function of max_steps), so the steps after
  // it are not those of a run started with it.
  for (const std::string& path : differing_keys(trained, config, "train.")) {
    if (path == "train.precision") continue;  // the note above says what "auto" became
    note += (note.empty() ? "" : "; ") + fmt::format("{} changed on resume: {} -> {}", path,
                                                     trained.at(path).dump(), config.at(path).dump());
    if (path == "train.max_steps")
      note += fmt::format(
          " (from step {} the learning rate follows a {}-step schedule: bit-identical to "
          "neither run)",
          ckpt.checkpoint.state.step + 1, config.at(path).dump());
  }
  opt.resume = true;
  const int64_t step = ckpt.checkpoint.state.step;
  try {
    return TrainingRun(config, opt, std::move(lock), std::move(ckpt), note).run();
  } catch (const Interrupted& e) {
    return stopped_before_training(e, step);
  }
}

}  // namespace tfm
