// A run directory's rules in one place: the files a run holds, what makes a directory a run, the
// checkpoint a resume continues from, and the guard every command that writes a file passes its
// output through. Only `tfm train` writes a run's own files; no other command may write over them
// or over its own input.
#pragma once
#include <string>
#include <vector>

namespace tfm {

struct Config;

// The files `tfm train` keeps in a run directory (output.dir); the lock is RunLock::kFileName.
constexpr const char* kRunConfigFile = "config.json";     // the resolved config
constexpr const char* kLastCheckpointFile = "last.ckpt";  // at train.checkpoint_interval and the end
constexpr const char* kBestCheckpointFile = "best.ckpt";  // the evaluation with the lowest val loss
constexpr const char* kRunLogFile = "train.log";
constexpr const char* kMetricsFile = "metrics.jsonl";

// Every name above and the lock's: the files no command but training writes.
const std::vector<std::string>& run_file_names();

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
// data.tokenizer_path).
std::vector<CommandInput> run_inputs(const std::string& checkpoint_path, const Config& config);

// Refuses, before anything is written, an output `path` (a file or directory that `flag` names):
// one of a run's own files (run_file_names()) in a directory that holds a run, by its name or by
// where a symlink leads; and any path that is the same file as one of `inputs` (same device and
// inode: symlinks, hard links and `..` spellings are caught). ConfigError naming the flag and both.
void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<CommandInput>& inputs = {});

}  // namespace tfm
