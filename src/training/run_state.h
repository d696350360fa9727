// What a checkpoint keeps of a run besides its weights, written by every save and read back by
// --resume so that a resumed run continues bit for bit: the step, the best val loss so far, the wall
// time trained, every rank's random streams (batch sampler, dropout) and the optimizer's state and step
// count. Private to src/training/.
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/optim.h"

namespace tfm {

class RunState {
 public:
  RunState(const Config& config, Objective& objective, Optimizer& optimizer, int rank, int nranks);

  int64_t step = 0;
  double best_val = std::numeric_limits<double>::infinity();
  // The run's time before this process started: all of it (CheckpointState::elapsed_s) and the training
  // loop's alone (training_s, the clock of train.target_loss and train.max_seconds).
  double elapsed_before = 0, training_before = 0;
  // Why the run stopped before train.max_steps, saved with the checkpoint so a sweep knows the point
  // is done: "target_loss" or "max_seconds" ("" while it runs, and after a resume).
  std::string stopped;
  // train.ema_decay: the model's weights hold the EMA and the optimizer's EMA buffer the raw weights
  // (during an evaluation: best.ckpt is saved so). Saved with the checkpoint; restore() swaps them back.
  bool ema_in_model = false;
  // The hash of the data the checkpoint restored had trained on (CheckpointState::data_hash), "" when
  // it kept none: a resume says when the data changed under the run.
  std::string restored_data_hash;
  UnloggedSteps restored_unlogged;  // the checkpoint's steps since its last log line
  // Objective::data_hash() now, as a checkpoint keeps it ("" without data).
  std::string data_hash() const;

  // From a checkpoint read from `path` (named in errors; its optimizer buffers are moved out): the
  // weights, the optimizer, this rank's streams and the counters above. IoError when the state does
  // not fit the model or is corrupt.
  void restore(Checkpoint& ckpt, const std::string& path);
  // Every rank's sampler and dropout states, gathered on all ranks before any step that may write a
  // checkpoint (the gather is collective; only rank 0 writes). A no-op in a single process.
  void gather_streams();
  // Writes the run to `path` (rank 0), streaming the parameters and optimizer buffers (no copies).
  // `elapsed` and `training`: the run's seconds so far, all of them and the training loop's.
  // `unlogged`: the steps since the last log line (last.ckpt's; none for best.ckpt).
  void save(const std::string& path, double elapsed, double training, const UnloggedSteps& unlogged) const;

 private:
  std::vector<RankStreams> streams() const;  // every rank's, rank 0 first

  const Config& config_;
  Objective& objective_;
  Optimizer& optimizer_;
  const int rank_, nranks_;
  std::vector<uint64_t> rank_streams_;  // 10 words per rank: sampler state, then dropout state
};

}  // namespace tfm
