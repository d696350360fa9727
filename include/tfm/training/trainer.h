// The training loop of a run directory (loading a trained run: run_dir.h).
//
// A run directory (output.dir) holds: config.json (the resolved config), last.ckpt and best.ckpt
// (checkpoint.h), train.log (the log) and metrics.jsonl (one JSON object per log interval); its rules
// (what makes a directory a run, what a resume continues from) are in run_dir.h.
//
// Reproducibility: the model's initial values come from `seed`, dropout from the model's own Rng
// (seeded with seed + 1) and the training batches from the objective's sampler (rank_seed(seed, rank),
// random.h); every rank's streams go into each checkpoint, so a run resumed from last.ckpt continues
// bit for bit as if never stopped. Evaluation draws its batches from a fresh generator seeded with
// eval_seed(config) each time: every evaluation of a run sees the same validation batches (comparable
// numbers) and never disturbs the training stream.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/models/model.h"
#include "tfm/training/optim.h"

namespace tfm {

struct TrainOptions {
  bool resume = false;        // continue from output.dir/last.ckpt (else best.ckpt)
  int64_t stop_at_step = -1;  // stop as if interrupted once this step is done (tests)
  // Set by a stop signal: finish the step (or abandon the evaluation), checkpoint, return; while the
  // data is read (tokenized), return at once (Interrupted, message set) with nothing written.
  const std::atomic<bool>* stop = nullptr;
  bool console = true;  // log to stdout as well as train.log
  // Called on every rank after each optimizer step (tests: parameters identical across ranks).
  std::function<void(int64_t step, const Model& model)> on_step;
  std::string init_from;  // safetensors file: initial weights of a fresh run (not on resume)
  // Called on rank 0 with the run directory after each evaluation's metrics.jsonl record and once when
  // the run returns (tfm train draws DIR/loss.svg). What it throws is logged as a warning: a figure
  // never stops a run.
  std::function<void(const std::string& run_dir)> on_evaluation;
};

struct TrainResult {
  enum class Status { Finished, Interrupted, NonFinite };
  Status status = Status::Finished;
  int64_t step = 0;                                            // optimizer steps completed in total
  std::vector<double> losses;                                  // training loss of each step run by this call
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // the last evaluation
  double best_val_loss = std::numeric_limits<double>::infinity();
  // For NonFinite: what went non-finite and where. For Interrupted before the first step (while the
  // data was read, before anything was written): what was stopped, for the caller to show.
  std::string message;
  // For NonFinite: only what went non-finite ("the gradient of emb.weight is not finite (loss 4.1742)");
  // the step that did is step + 1.
  std::string nonfinite;
  // train.target_loss: whether an evaluation reached it, and the wall time from the first step to the
  // end of that evaluation (evaluations included; on resume, the earlier part of the run too).
  bool target_reached = false;
  double seconds_to_target = std::numeric_limits<double>::quiet_NaN();
  bool out_of_time = false;  // train.max_seconds stopped the run (after an evaluation and a save)
};

// Trains config (a fresh run, or with options.resume the run in output.dir continued with this
// config). The run lock (run_lock.h) is taken before anything in the directory is read. Throws
// ConfigError/IoError for bad input before any step is taken; a fresh run refuses a directory that
// already holds a run (run_dir.h: a checkpoint, train.log or metrics.jsonl).
TrainResult train(const Config& config, const TrainOptions& options = {});
// Continues the run in `dir` (`tfm train --resume DIR`): takes its lock, then reads last.ckpt (else
// best.ckpt, saying so in the log) and its config with `overrides` applied (only keys marked resumable
// may change). A directory whose run has not saved a checkpoint yet is named with what to do.
TrainResult resume(const std::string& dir, const std::vector<std::string>& overrides,
                   TrainOptions options = {});

// ConfigError naming the first key `config` may not change from `trained` (the config a checkpoint was
// trained with, `source` its file) when it continues that run: any key but those marked resumable and
// output.dir.
void check_resumable(const Config& trained, const Config& config, const std::string& source);

// The seed of the evaluation batches of a run (the same batches at every evaluation).
uint64_t eval_seed(const Config& config);

// What a run has measured of its own speed, for its ETA and its time budget.
struct RunSpeed {
  int64_t step = 0;         // steps taken
  double step_seconds = 0;  // one step's time lately
  double eval_seconds = 0;  // the evaluations' time in this process, and their count
  int64_t evals = 0;
  double training_seconds = 0;  // the loop's time so far (train.max_seconds's clock)
  // The forward batches of one evaluation (Objective::evaluation_batches: for train.eval_steps 0 the
  // whole split's), for the estimate before one is timed; < 0: train.eval_steps.
  int64_t eval_batches = -1;
};
// The seconds one evaluation takes: the mean of those timed so far or, before the first, eval_batches
// forward passes of about a third of a micro-batch step each (a forward pass is 2 of the 6 FLOPs per
// parameter and token of a step: Kaplan et al. 2020, "Scaling Laws for Neural Language Models", section
// 2.1).
double evaluation_seconds(const TrainConfig& train, const RunSpeed& speed);
// The seconds a run has left (the log line's and the progress line's "eta"): the steps left to
// train.max_steps at step_seconds each, plus the evaluations left (at every train.eval_interval and the
// last step) at evaluation_seconds each; and with train.max_seconds no more than the budget leaves, which
// time_budget_spent keeps the closing evaluation within.
double seconds_left(const TrainConfig& train, int64_t max_steps, const RunSpeed& speed);
// train.max_seconds: whether the run stops after step speed.step (short of max_steps), evaluating and
// saving there: when one more step and the closing evaluation after it, at step_seconds and
// evaluation_seconds, would end past the budget. The closing evaluation so falls within it, as far as
// the speed measured holds (a first step and evaluation longer than the whole budget still run).
bool time_budget_spent(const TrainConfig& train, int64_t max_steps, const RunSpeed& speed);

}  // namespace tfm
