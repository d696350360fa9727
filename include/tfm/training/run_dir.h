// A run directory's rules in one place: the files a run holds, what makes a directory a run, the
// checkpoint a resume continues from, loading a trained run (its config, objective and weights), and
// the guard every command that writes a file passes its output through. Only `tfm train` writes a
// run's own files; no other command may write over them or over its own input.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/data/tokenizer.h"
#include "tfm/models/language_model.h"
#include "tfm/models/model.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/checkpoint.h"

namespace tfm {

// The files `tfm train` keeps in a run directory (output.dir); the lock is RunLock::kFileName.
constexpr const char* kRunConfigFile = "config.json";     // the resolved config
constexpr const char* kLastCheckpointFile = "last.ckpt";  // at train.checkpoint_interval and the end
constexpr const char* kBestCheckpointFile = "best.ckpt";  // the evaluation with the lowest val loss
constexpr const char* kRunLogFile = "train.log";
constexpr const char* kMetricsFile = "metrics.jsonl";
// What a reader of metrics.jsonl reads at most: more than any run logs (a few hundred bytes per interval).
constexpr uint64_t kMaxMetricsBytes = uint64_t{1} << 30;

// Every name above and the lock's: the files no command but training writes.
const std::vector<std::string>& run_file_names();

// The figures a run directory holds beside those files: the loss curves training redraws at each
// evaluation, and their log-scale drawing. Only training and `tfm plot loss` write them.
constexpr const char* kLossFigureFile = "loss.svg";
constexpr const char* kLogLossFigureFile = "loss-log.svg";

// The files present in `dir` that make it a run (a checkpoint, the log or the metrics), in the
// order above; empty when there are none (or `dir` is no directory).
std::vector<std::string> run_files_in(const std::string& dir);
inline bool holds_a_run(const std::string& dir) {
  return !run_files_in(dir).empty();
}

// IoError naming `dir` when it is missing ("no such run directory") or is not a directory.
void require_run_directory(const std::string& dir);

// The checkpoint `tfm train --resume DIR` continues from: DIR/last.ckpt, else DIR/best.ckpt (a run
// with train.checkpoint_interval 0 killed before its end has only that); "" when there is neither.
std::string resume_checkpoint_path(const std::string& dir);

// What a command reads, for the output guard: `what` names it in the message ("--run's checkpoint",
// "--data").
struct CommandInput {
  std::string what, path;
};

// What a command that loaded a run reads: the checkpoint and the files of the run's config (data.path,
// each entry of a data.path list, data.tokenizer_path).
std::vector<CommandInput> run_inputs(const std::string& checkpoint_path, const Config& config);

// Refuses, before anything is written, an output `path` (a file or directory that `flag` names):
// one of a run's own files (run_file_names()) or, unless `may_draw_loss_figures` (`tfm plot loss`),
// one of its loss figures, in a directory that holds a run, by its name or by where a symlink leads;
// and any path that is the same file as one of `inputs` (same device and inode: symlinks, hard links
// and `..` spellings are caught). ConfigError naming the flag and both.
void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<CommandInput>& inputs = {}, bool may_draw_loss_figures = false);

// Creates `dir` (and its parents) for a command's output files; IoError naming it and `flag` when it
// cannot.
void make_output_dir(const std::string& dir, const std::string& flag = "--out");

// ---- loading a run ----

// The checkpoint every command that reads a trained run loads (sample, eval, export, attention, heads,
// fill-mask, translate, and whatever shows runs), in this one place: `which` "best" or "last" reads
// DIR/<which>.ckpt (IoError naming the file when it is missing); "" reads best.ckpt when the run has
// one (the lowest val loss: what a user wants from a run), else last.ckpt. ConfigError for another
// `which`; IoError when DIR is missing or no directory, or has neither checkpoint.
struct ChosenCheckpoint {
  std::string which;  // "best" or "last"
  std::string path;   // DIR/<which>.ckpt
};
ChosenCheckpoint choose_checkpoint(const std::string& dir, const std::string& which = "");

// What a loaded checkpoint is, for the line a command logs: "runs/x/best.ckpt (step 900, val loss 1.49)";
// a last.ckpt names the best val loss so far, and a run not yet evaluated says so.
std::string describe_checkpoint(const std::string& path, const Checkpoint& ckpt);

// A trained run loaded for evaluation, sampling, filling masks, translating or analysis.
struct LoadedRun {
  std::string dir;  // the run directory as given
  Config config;
  std::string which;            // "best" or "last" (choose_checkpoint)
  std::string checkpoint_path;  // DIR/<which>.ckpt, the file it was read from
  Checkpoint checkpoint;
  std::unique_ptr<Objective> objective;  // with the run's data only when load_run was asked for it
  LanguageModel* model = nullptr;        // the objective's model when it is a LanguageModel, else null
};
// Loads the checkpoint choose_checkpoint(DIR, which) names, builds its objective and model and sets the
// threads the run's train.threads asks for. With data, the objective reads the run's data files too
// (evaluation); without, it needs none.
LoadedRun load_run(const std::string& dir, const std::string& which = "", bool with_data = false);

// DIR/config.json, which tfm writes from the config a run trains with, against `trained`, the config
// of the checkpoint `checkpoint_path` that a resume continues from (and takes its config from). A key
// that may not change on resume and differs (parsed values, not bytes) was edited by hand, and the edit
// would be ignored and overwritten: ConfigError naming the file, the first such key, both values, and
// the way to change a resumable key (--resume DIR --set KEY=VALUE). A file that is no valid config is
// refused the same way. Resumable keys may differ (a resume killed after its first step and before its
// next checkpoint leaves its --set values there): returned with the file's values, for a note. Nothing
// when there is no file.
std::vector<std::pair<std::string, nlohmann::json>> check_run_config_file(const std::string& dir,
                                                                          const Config& trained,
                                                                          const std::string& checkpoint_path);

// The resolved config a checkpoint was trained with; IoError naming `path` when it is invalid.
Config checkpoint_config(const Checkpoint& ckpt, const std::string& path);

// Copies checkpoint values into a model built from the same config; IoError naming what differs, or the
// tensor and index of the first value that is not finite (NaN, Inf).
void restore_model(Model& model, const Checkpoint& ckpt, const std::string& source);

// Copies the tensors of a safetensors file (tfm export) into the model's parameters. Names and shapes
// must match model.parameters() exactly, but for a learned position table (is_position_table) of
// another length (model.max_seq_len may differ): the model takes the file's rows for the positions both
// have and keeps its own values past the file's; IoError("<path>: ...") naming the tensor otherwise, and
// naming the tensor and index of the first value that is not finite (NaN, Inf). With the
// run's `vocabulary` (its origin, e.g. "data.path FILE", named in messages), the tokenizers the file's
// metadata carries (tfm export's "tokenizer", and "target_tokenizer" for seq2seq) must be the run's:
// ConfigError naming the file, the run's and the first id whose token differs. With the run's
// `config`, every model.* key but the weights-agnostic ones (KeySpec::weights_agnostic: dropout, ...)
// must hold the value it has in the config the file's metadata carries (tfm export's "config"):
// ConfigError naming the key and both values. Returns notes for the user: the file carries no
// tokenizer or config to compare (weights from elsewhere); a position table shorter than the model's.
std::vector<std::string> load_safetensors_into(Model& model, const std::string& path,
                                               const Vocabulary* vocabulary = nullptr,
                                               const std::string& vocabulary_source = "",
                                               const Config* config = nullptr);

}  // namespace tfm
