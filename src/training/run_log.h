// What a training run tells its user: the log (the console unless quiet, and DIR/train.log, appended
// to on resume), a live progress line on a terminal, and DIR/metrics.jsonl, one JSON record per log
// interval. Rank 0 writes; the other ranks of an MPI run log nothing. Private to src/training/.
#pragma once
#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tfm/engine/file_io.h"
#include "tfm/training/checkpoint.h"

namespace tfm {

std::string duration_str(double seconds);  // "1h02m", "3m05s", "42s", "1.4s"; "?" when unknown
std::string rate_str(double per_second);   // "512", "12.3k"

class RunLog {
 public:
  // Opens DIR/train.log and DIR/metrics.jsonl (truncated for a new run; on resume appended to, after
  // dropping the records past `resumed_step` that a killed run logged after its last checkpoint).
  // A link or anything but a regular file at either name is refused (IoError), never followed.
  RunLog(const std::string& dir, bool console, bool root, bool resume, int64_t resumed_step);
  void info(const std::string& s) { clear_progress(), log_->info(s); }
  void warn(const std::string& s) { clear_progress(), log_->warn(s); }
  void error(const std::string& s) { clear_progress(), log_->error(s); }
  // A metrics.jsonl record (rank 0 only).
  void record(const nlohmann::json& rec);
  bool shows_progress() const { return tty_; }
  // Replaces the progress line (on a terminal only); every logged line clears it first.
  void progress(const std::string& line);
  void clear_progress();

 private:
  std::unique_ptr<spdlog::logger> log_;
  FileDescriptor metrics_;
  std::string metrics_path_;
  bool root_ = false, tty_ = false, shown_ = false, metrics_failed_ = false;
};

// What the steps since the last log line measured, for the line and its metrics.jsonl record. The
// sums of the losses and norms go into last.ckpt (UnloggedSteps), so that a resumed run's first line
// averages the steps an uninterrupted run's would; the times are this process's own steps'.
struct IntervalStats {
  double seconds = 0, loss = 0, norm = 0, tokens = 0, last_loss = 0;
  int64_t steps = 0;        // the steps loss, norm and auxiliary sum over
  int64_t timed_steps = 0;  // this process's of them, which seconds and tokens sum over
  double auxiliary = 0;     // the objective's auxiliary loss (multi-token prediction), summed like loss
  void add(double step_seconds, double step_loss, double step_norm, double step_tokens,
           double step_auxiliary = 0) {
    seconds += step_seconds, loss += step_loss, norm += step_norm, tokens += step_tokens,
        last_loss = step_loss, auxiliary += step_auxiliary;
    ++steps, ++timed_steps;
  }
  void reset() { *this = IntervalStats{0, 0, 0, 0, last_loss, 0, 0, 0}; }
  UnloggedSteps unlogged() const { return {steps, loss, norm, auxiliary}; }
  // A resumed run's: the checkpoint's sums, no time yet.
  void restore(const UnloggedSteps& u) {
    steps = u.steps, loss = u.loss, norm = u.grad_norm, auxiliary = u.auxiliary;
  }
};

}  // namespace tfm
