// The runs under some directories, as `tfm runs` and `tfm board` show them: what each run is, how far
// it got and why it stopped, its metrics read while it trains, a long series cut down for a chart, and
// the config keys two runs differ in.
//
// A run is a directory with config.json or metrics.jsonl (what `tfm train` writes first). Its status
// comes from the run lock (a live process holds DIR/train.lock), the log (an [error] line of the last
// start), and the checkpoint's state (its step against train.max_steps, and "stopped": "target_loss" or
// "max_seconds"). Every file may be missing, half written or corrupt: a summary shows what it could
// read and names the rest in `problems`, and never throws for it.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/training/run_dir.h"

namespace tfm {

enum class RunStatus { Training, Finished, StoppedAtTarget, StoppedAtTimeBudget, Interrupted, Failed };
// "training", "finished", "stopped: target", "stopped: time budget", "interrupted", "failed".
const char* run_status_name(RunStatus status);

// DIR/metrics.jsonl: one JSON object per line. A last line without its newline (being written, or cut
// by a crash) and lines that are no JSON object are skipped and counted, never fatal.
struct MetricsLog {
  std::vector<nlohmann::json> records;  // in file order, only those with step > since_step
  int64_t skipped_lines = 0;            // unreadable lines (the unfinished last one included)
  bool missing = false;                 // no such file
};
// Records with "step" > since_step (-1: all). At most kMaxMetricsBytes of the file are read.
MetricsLog read_metrics(const std::string& path, int64_t since_step = -1);

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

struct RunSummary {
  std::string dir;   // as found (root joined with the relative path)
  std::string name;  // relative to its root, prefixed with the root's own name
  std::string objective;
  int64_t parameters = -1;  // from train.log's model line; -1 when unknown
  RunStatus status = RunStatus::Interrupted;
  std::string status_detail;  // the holder's PID, the error line, the checkpoint's trouble
  int64_t step = 0, max_steps = 0;
  double best_val_loss = kNoValue;      // lowest val_loss logged (or the checkpoint's best)
  double best_val_accuracy = kNoValue;  // highest val_accuracy logged (masked_lm, seq2seq)
  double best_val_bleu = kNoValue;      // highest val_bleu logged (seq2seq)
  double seconds_to_target = kNoValue;  // train.target_loss reached after this much training
  double tokens_per_s = kNoValue;       // median over the logged intervals
  double last_update = 0;               // newest modification time of the run's own files (run_dir.h's
                                        // run_file_names(), not analyses written into it), Unix seconds
  std::vector<std::string> problems;    // what could not be read, one message each
  std::vector<std::string> files;       // the files the directory holds (names, sorted)
};

// Every run under `roots` (a root that is a run counts), depth-first and sorted by path, at most
// `max_depth` directories down; symlinked directories are not followed. A missing root is skipped.
std::vector<std::string> find_runs(const std::vector<std::string>& roots, int max_depth = 4);
// The summary of one run directory (`name` as the list shows it). `metrics`, when given, gets the run's
// metrics log as the summary read it (empty for a directory that is gone), for a caller that needs its
// records too (`tfm runs --diff`) without reading the file again.
RunSummary summarize_run(const std::string& dir, const std::string& name, MetricsLog* metrics = nullptr);
// The name a list shows for `dir` found under `root`. Below the current directory, its path from there,
// which --run takes as it is shown: "runs/tiny" for `tfm runs` and `tfm runs runs/tiny` alike (the
// current directory itself by its own name). Elsewhere, the root's own name, then the path below it.
std::string run_name_under(const std::string& root, const std::string& dir);
// `names` made unique, for lists that show runs from several places: while two are alike, each of them
// gets the next parent directory of its `dirs` entry (made absolute) before it ("runs/tiny" under ../A
// and ../B: "A/runs/tiny" and "B/runs/tiny"), but a name that is its directory's path from the current
// directory (what --run takes) stays as it is. Names alike for the same directory stay alike.
std::vector<std::string> unique_names(std::vector<std::string> names, const std::vector<std::string>& dirs);
// A run found under the roots and the name a list shows it by.
struct NamedRun {
  std::string dir, name;
};
// find_runs over every root, each directory once (two roots may reach the same), named by
// run_name_under and made unique by unique_names. `keep`, when given, leaves out the runs it refuses,
// before naming: a run left out never lengthens another's name.
std::vector<NamedRun> find_named_runs(const std::vector<std::string>& roots,
                                      const std::function<bool(const std::string& dir)>& keep = nullptr);
// find_named_runs + summarize_run.
std::vector<RunSummary> list_runs(const std::vector<std::string>& roots);
// {"name", "dir", "objective", "parameters", "status", "status_detail", "step", "max_steps",
//  "best_val_loss", "best_val_accuracy", "best_val_bleu", "seconds_to_target", "tokens_per_s",
//  "last_update", "problems", "files"}; unknown numbers are null.
nlohmann::json run_summary_json(const RunSummary& run);

// The rows sort_runs orders by: name, status, step, best_val_loss, best_val_accuracy, best_val_bleu,
// seconds_to_target, tokens_per_s, parameters, last_update (accuracy, BLEU and speed highest first, the
// update newest first). Unknown values last. ConfigError naming --sort and these otherwise.
void sort_runs(std::vector<RunSummary>& runs, const std::string& key);

// Directories under `roots` holding the results of a sweep (sweep.jsonl), an ablation (ablate.jsonl) or a
// speedrun (summary.json): {"name", "dir", "kind", "files"}, names made unique as find_named_runs does.
std::vector<nlohmann::json> find_result_sets(const std::vector<std::string>& roots, int max_depth = 4);

// Cuts a series (x ascending) to at most max_points points for a chart: the first and the last point are
// kept, the others split into (max_points - 2) / 2 buckets of consecutive points, each keeping its minimum
// and its maximum of y (in x order), so spikes survive where averaging or striding would hide them.
// Returns the kept indices, ascending; all of them when the series is short enough. Non-finite y are
// kept as they are.
std::vector<size_t> downsample_min_max(const std::vector<double>& y, size_t max_points);

// A nested config flattened to dotted keys ("train.optimizer.lr" -> value); arrays stay values.
nlohmann::json flatten_config(const nlohmann::json& config);
// The keys (dotted) whose values differ between two resolved configs, sorted; a key only one has is
// null in the other. output.dir, each run's own directory, is left out, and so is a key neither run's
// objective reads.
struct ConfigDifference {
  std::string key;
  nlohmann::json a, b;
};
std::vector<ConfigDifference> config_diff(const nlohmann::json& a, const nlohmann::json& b);
// Runs one comparison takes at most (`tfm runs --diff`, the board's /api/diff).
constexpr size_t kMaxDiffRuns = 16;
// The same over any number of configs (nested or flattened): the keys whose values are not the same in
// all of them, each with its value in every config (null where absent). A config that is not a JSON
// object (a run without a readable config.json) is missing: left out of the comparison, null in every row.
struct ConfigDifferences {
  std::string key;
  std::vector<nlohmann::json> values;
};
std::vector<ConfigDifferences> config_diff(const std::vector<nlohmann::json>& configs);

}  // namespace tfm
