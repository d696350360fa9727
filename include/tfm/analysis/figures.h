// The figures tfm draws (SVG, svg.h): a run's loss curves, runs overlaid, time to quality, and the
// reports of `tfm attention`, `tfm heads`, `tfm sweep` and `tfm bench attention`. Each takes the data
// the command wrote (a report's JSON, a run's metrics.jsonl) and returns the document's text; the
// caller writes it (write_file_atomically).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

// One run's curves from DIR/metrics.jsonl (or a metrics file given directly). A line that is not JSON
// (the last one of a run being written, cut short) is skipped; a missing file is an IoError naming it.
struct LossCurves {
  std::string name;  // the run directory's name
  std::string dir;   // the run directory, as given (the metrics file's directory when given that)
  // every logged step; the loss is the mean over the log interval (train_loss_avg, what the log line
  // shows), or the interval's last batch (train_loss) in a record without it
  std::vector<double> step, train_loss;
  std::vector<double> lr_step, lr;         // every logged step with a learning rate
  std::vector<double> val_step, val_loss;  // the evaluations
  std::vector<double> val_minutes;         // wall-clock minutes of each evaluation (training_s)
};
LossCurves read_loss_curves(const std::string& run_dir_or_metrics);

// Train and validation loss against step (best val marked), the learning rate in a small panel below.
// At most max_points points per curve (evenly spread, first and last kept).
std::string loss_figure(const LossCurves& run, size_t max_points = 2000);
// DIR/loss.svg from DIR/metrics.jsonl, written atomically (IoError when it cannot be read or written).
void write_loss_figure(const std::string& run_dir);

// Several runs' train loss (thin) and val loss (dots) against step, one colour per run.
std::string runs_loss_figure(const std::vector<LossCurves>& runs, bool log_y, const std::string& title,
                             size_t max_points = 2000);

// Validation loss against wall-clock minutes, one curve per (label, run); tfm's metrics.jsonl and
// scripts/torch_lm.py --target-loss's output (lines with "seconds" and "val_loss") are both read.
struct TimedCurve {
  std::string label;
  std::vector<double> minutes, val_loss;
};
TimedCurve read_timed_curve(const std::string& label, const std::string& run_dir_or_file);
std::string speedrun_figure(const std::vector<TimedCurve>& runs, std::optional<double> target,
                            const std::string& title);

// `tfm attention`'s report: (file name, SVG) per layer, attention_layerL.svg (one heat map per head and
// the head-similarity matrix) or, for a seq2seq report, attention_seq2seq_layerL.svg.
std::vector<std::pair<std::string, std::string>> attention_figures(const nlohmann::json& report);
// `tfm heads`' report: loss change and gradient score per layer x head, and the pruning curve.
std::string heads_figure(const nlohmann::json& report);
// `tfm sweep`'s points (sweep.jsonl): val loss and ms/step against the swept `key`, one line per
// combination of the other swept keys; a point that diverged is a cross on the upper edge of both.
std::string sweep_figure(const std::vector<nlohmann::json>& points, const std::string& key,
                         const std::string& title);
// The swept keys of sweep.jsonl's points: the keys every point has besides the measured ones, in order.
std::vector<std::string> sweep_keys(const nlohmann::json& point);
// `tfm bench attention`'s report: time and memory against sequence length, log-log.
std::string bench_attention_figure(const nlohmann::json& report);

// A report's figures (`tfm plot report`), its kind found from the content: tfm attention's report
// (tokens and layers), heads' (layers and pruning; an older one's layer and pruning), bench attention's
// (lengths and exponents), or sweep's points (JSON Lines of objects with dir, step and stopped), whatever the
// file is called; the file's name decides only for content that says nothing. A sweep's figure is titled
// `sweep_title`. ConfigError naming `path`: text that is not JSON (the line and column), a JSON Lines line
// that is not JSON (its line; the last line is skipped instead when cut short, with no newline: a sweep being
// written), content of no report, or a report that lacks what its figure needs.
struct ReportFigures {
  std::string kind;  // "attention", "heads", "bench attention" or "sweep"
  std::vector<std::pair<std::string, std::string>> figures;  // (file name, SVG)
  size_t skipped_lines = 0;                                  // a cut last line
};
ReportFigures report_figures(const std::string& path, const std::string& text,
                             const std::string& sweep_title);

}  // namespace tfm
