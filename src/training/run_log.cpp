#include "run_log.h"

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/distributed.h"
#include "tfm/training/run_dir.h"

namespace tfm {
using nlohmann::json;

std::string duration_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  // Tenths below 10 s, so that a short run's time agrees with the "after 1.4 s" of its other lines.
  if (s < 9.95) return fmt::format("{:.1f}s", s);
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string rate_str(double r) {
  return r >= 1e4 ? fmt::format("{:.1f}k", r / 1e3) : fmt::format("{:.0f}", r);
}

namespace {

// A run killed after its last checkpoint logged steps that the resumed run will log again: keep
// only the records up to the checkpoint's step, so metrics.jsonl reads as one uninterrupted run.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::not_found) return;
  std::istringstream in(read_file(path, kMaxMetricsBytes));
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

// train.log's sink. spdlog's file sinks open with fopen, which follows a symbolic link planted at
// the name; this one writes to a descriptor from open_for_append, which refuses one.
class AppendSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  AppendSink(std::string path, bool truncate)
      : path_(std::move(path)), fd_(open_for_append(path_, truncate)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    write_all(fd_.get(), line.data(), line.size(), path_);
  }
  void flush_() override {}  // every line is written through at once

 private:
  std::string path_;
  FileDescriptor fd_;
};

// Whether the console's lines reach a terminal, which gets colours and the rewritten progress line. Under
// mpirun a rank's stdout is a pseudo-terminal Open MPI opens whatever its own output is, so there it is
// mpirun's own stdout that counts (its parent's: the rank that logs runs on mpirun's machine).
bool console_is_terminal() {
  if (!::isatty(STDOUT_FILENO)) return false;
  if (!dist::launched_by_mpirun()) return true;
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(::getppid()) + "/fd/1").c_str(), &st) != 0 || !S_ISCHR(st.st_mode))
    return false;
  // Terminal devices: the virtual consoles and serial lines (major 4), /dev/tty and the console (5), and
  // the pseudo-terminals (136-143), as the kernel's devices.txt numbers them.
  const unsigned m = major(st.st_rdev);
  return m == 4 || m == 5 || (m >= 136 && m <= 143);
}

}  // namespace

RunLog::RunLog(const std::string& dir, bool console, bool root, bool resume, int64_t resumed_step)
    : root_(root) {
  const std::string log_path = dir + "/train.log", metrics = dir + "/metrics.jsonl";
  // Both refused before either is touched: a link or device at one name leaves the other as it was.
  if (root) require_regular_or_absent(log_path), require_regular_or_absent(metrics);
  std::vector<spdlog::sink_ptr> sinks;
  tty_ = console && root && console_is_terminal();
  if (console && root) {
    // Its writes are not checked: a closed stdout (EPIPE, SIGPIPE being ignored) or terminal loses
    // only the console's lines; train.log gets them all.
    auto c = std::make_shared<spdlog::sinks::stdout_color_sink_mt>(tty_ ? spdlog::color_mode::automatic
                                                                        : spdlog::color_mode::never);
    c->set_pattern("%^%v%$");
    sinks.push_back(c);
  }
  if (root) {
    auto f = std::make_shared<AppendSink>(log_path, !resume);
    f->set_pattern("[%Y-%m-%d %H:%M:%S] [%l] %v");
    sinks.push_back(f);
  }
  log_ = std::make_unique<spdlog::logger>("tfm", sinks.begin(), sinks.end());
  log_->flush_on(spdlog::level::info);
  if (!root) return;
  if (resume) drop_metrics_after(metrics, resumed_step);
  metrics_path_ = metrics;
  metrics_ = open_for_append(metrics, !resume);
}

void RunLog::record(const json& rec) {
  if (!root_ || metrics_failed_) return;
  const std::string line = rec.dump() + "\n";
  try {
    write_all(metrics_.get(), line.data(), line.size(), metrics_path_);
  } catch (const IoError& e) {
    // Records are a by-product: a full disk costs them (said once), not the run and its checkpoints.
    metrics_failed_ = true;
    warn(std::string(e.what()) + "; no more records are written to it");
  }
}

void RunLog::progress(const std::string& line) {
  if (!tty_) return;
  // fputs, not fmt::print, which throws when the write fails: a terminal gone (SIGHUP) costs the line,
  // not the run.
  std::fputs(("\r\033[K" + line).c_str(), stdout);
  std::fflush(stdout);
  shown_ = true;
}

void RunLog::clear_progress() {
  if (shown_) std::fputs("\r\033[K", stdout), std::fflush(stdout), shown_ = false;
}

}  // namespace tfm
