// The training loop, evaluation and sampling of a run directory.
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
#include <memory>
#include <string>
#include <vector>

#include "tfm/training/checkpoint.h"
#include "tfm/config/config.h"
#include "tfm/data/dataset.h"
#include "tfm/models/language_model.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/optim.h"

namespace tfm {

struct TrainOptions {
  bool resume = false;                      // continue from output.dir/last.ckpt (else best.ckpt)
  int64_t stop_at_step = -1;                // stop as if interrupted once this step is done (tests)
  // Set by SIGINT/SIGTERM: finish the step (or abandon the evaluation), checkpoint, return.
  const std::atomic<bool>* stop = nullptr;
  bool console = true;                      // log to stdout as well as train.log
  // Called on every rank after each optimizer step (tests: parameters identical across ranks).
  std::function<void(int64_t step, const Model& model)> on_step;
  std::string init_from;                    // safetensors file: initial weights of a fresh run (not on resume)
};

struct TrainResult {
  enum class Status { Finished, Interrupted, NonFinite };
  Status status = Status::Finished;
  int64_t step = 0;                                            // optimizer steps completed in total
  std::vector<double> losses;                                  // training loss of each step run by this call
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // the last evaluation
  double best_val_loss = std::numeric_limits<double>::infinity();
  std::string message;  // for NonFinite: what went non-finite and where
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
TrainResult resume(const std::string& dir, const std::vector<std::string>& overrides, TrainOptions options = {});

// A trained run loaded for evaluation, sampling, filling masks or translating.
struct LoadedRun {
  Config config;
  std::string checkpoint_path;  // DIR/<which>.ckpt, the file it was read from
  Checkpoint checkpoint;
  std::unique_ptr<Objective> objective;  // with the run's data only when load_run was asked for it
  LanguageModel* model = nullptr;        // the objective's model when it is a LanguageModel, else null
};
// Loads DIR/<which>.ckpt ("last" or "best"; "" = best when the run has one, else last; IoError when DIR
// is missing or no directory), builds its objective and model and sets the threads the run's
// train.threads asks for. With data, the objective reads the run's data files too (evaluation);
// without, it needs none.
LoadedRun load_run(const std::string& dir, const std::string& which = "", bool with_data = false);

// Copies checkpoint values into a model built from the same config; IoError naming what differs.
void restore_model(Model& model, const Checkpoint& ckpt, const std::string& source);

// Copies the tensors of a safetensors file (tfm export) into the model's parameters. Names and shapes
// must match model.parameters() exactly; IoError("<path>: ...") naming the tensor otherwise. With the
// run's `vocabulary` (its origin, e.g. "data.path FILE", named in messages), the tokenizers the file's
// metadata carries (tfm export's "tokenizer", and "target_tokenizer" for seq2seq) must be the run's:
// ConfigError naming the file, the run's and the first id whose token differs. Returns a warning for
// the user when the file carries none to compare (weights from elsewhere), else "".
std::string load_safetensors_into(Model& model, const std::string& path,
                                  const Vocabulary* vocabulary = nullptr,
                                  const std::string& vocabulary_source = "");

// The seed of the evaluation batches of a run (the same batches at every evaluation).
uint64_t eval_seed(const Config& config);

}  // namespace tfm
