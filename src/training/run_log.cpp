#include "run_log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
using nlohmann::json;

std::string duration_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string rate_str(double r) { return r >= 1e4 ? fmt::format("{:.1f}k", r / 1e3) : fmt::format("{:.0f}", r); }

namespace {

// A run killed after its last checkpoint logged steps that the resumed run will log again: keep
// only the records up to the checkpoint's step, so metrics.jsonl reads as one uninterrupted run.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
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

}  // namespace

RunLog::RunLog(const std::string& dir, bool console, bool root, bool resume, int64_t resumed_step) : root_(root) {
  std::vector<spdlog::sink_ptr> sinks;
  if (console && root) {
    auto c = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
    c->set_pattern("%^%v%$");
    sinks.push_back(c);
  }
  if (root) {
    auto f = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/train.log", !resume);
    f->set_pattern("[%Y-%m-%d %H:%M:%S] [%l] %v");
    sinks.push_back(f);
  }
  log_ = std::make_unique<spdlog::logger>("tfm", sinks.begin(), sinks.end());
  log_->flush_on(spdlog::level::info);
  tty_ = console && root && ::isatty(STDOUT_FILENO);
  if (!root) return;
  const std::string metrics = dir + "/metrics.jsonl";
  if (resume) drop_metrics_after(metrics, resumed_step);
  metrics_.open(metrics, resume ? std::ios::app : std::ios::trunc);
  if (!metrics_) throw IoError(metrics + ": cannot open for writing");
}

void RunLog::record(const json& rec) {
  if (root_) metrics_ << rec.dump() << "\n" << std::flush;
}

void RunLog::progress(const std::string& line) {
  if (!tty_) return;
  fmt::print("\r\033[K{}", line.c_str());
  std::fflush(stdout);
  shown_ = true;
}

void RunLog::clear_progress() {
  if (shown_) std::fputs("\r\033[K", stdout), std::fflush(stdout), shown_ = false;
}

}  // namespace tfm
