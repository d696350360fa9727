// `tfm runs`: the runs under some directories as a table (or JSON), and `tfm runs --diff A B`: the
// config keys two runs differ in and their final metrics side by side (analysis/runs.h).
#include "tfm/analysis/runs.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm::cli {
namespace {

struct RunsOptions {
  std::vector<std::string> dirs;
  std::string sort = "name";
  std::vector<std::string> diff;
  bool json = false;
};

std::string number_or_dash(double v, const char* format) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : "-";
}

std::string age(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double s = std::max(0.0, now - unix_seconds);
  if (s < 120) return fmt::format("{:.0f}s ago", s);
  if (s < 7200) return fmt::format("{:.0f}m ago", s / 60);
  if (s < 172800) return fmt::format("{:.0f}h ago", s / 3600);
  return fmt::format("{:.0f}d ago", s / 86400);
}

std::string count_str(int64_t n) {
  if (n < 0) return "-";
  if (n >= 1000000) return fmt::format("{:.1f}M", double(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}k", double(n) / 1e3);
  return std::to_string(n);
}

// The resolved config of a run directory: its config.json (an IoError naming it when unreadable).
nlohmann::json run_config(const std::string& dir) {
  require_run_directory(dir);
  const std::string path = dir + "/" + kRunConfigFile;
  const nlohmann::json j = nlohmann::json::parse(read_file(path, 16 << 20), nullptr, false);
  if (!j.is_object()) throw IoError(path + ": not a JSON object (a run's resolved config)");
  return j;
}

std::string value_str(const nlohmann::json& v) {
  // 10 significant digits: a derived 0.003 / 10 shows as 0.0003, not 0.00030000000000000003.
  if (v.is_number_float()) return fmt::format("{:.10g}", v.get<double>());
  return v.is_null() ? "(absent)" : v.is_string() ? v.get<std::string>() : v.dump();
}

int diff_command(const RunsOptions& o) {
  const std::string &a = o.diff[0], &b = o.diff[1];
  const std::vector<ConfigDifference> diffs = config_diff(run_config(a), run_config(b));
  const RunSummary ra = summarize_run(a, a), rb = summarize_run(b, b);
  const MetricsLog ma = read_metrics(a + "/" + kMetricsFile), mb = read_metrics(b + "/" + kMetricsFile);
  // The final metrics: the last record's values, with the summary's figures.
  const auto last_of = [](const MetricsLog& m, const char* key) {
    for (auto it = m.records.rbegin(); it != m.records.rend(); ++it)
      if (it->contains(key) && (*it)[key].is_number()) return (*it)[key].get<double>();
    return kNoValue;
  };
  struct Row {
    const char* name;
    double a, b;
  };
  const std::vector<Row> rows = {{"step", double(ra.step), double(rb.step)},
                                 {"train_loss", last_of(ma, "train_loss"), last_of(mb, "train_loss")},
                                 {"val_loss", last_of(ma, "val_loss"), last_of(mb, "val_loss")},
                                 {"best_val_loss", ra.best_val_loss, rb.best_val_loss},
                                 {"seconds_to_target", ra.seconds_to_target, rb.seconds_to_target},
                                 {"tokens_per_s", ra.tokens_per_s, rb.tokens_per_s},
                                 {"elapsed_s", last_of(ma, "elapsed_s"), last_of(mb, "elapsed_s")}};
  if (o.json) {
    nlohmann::json out = {
        {"a", a}, {"b", b}, {"config", nlohmann::json::array()}, {"metrics", nlohmann::json::object()}};
    for (const ConfigDifference& d : diffs) out["config"].push_back({{"key", d.key}, {"a", d.a}, {"b", d.b}});
    for (const Row& r : rows)
      out["metrics"][r.name] = {std::isfinite(r.a) ? nlohmann::json(r.a) : nlohmann::json(nullptr),
                                std::isfinite(r.b) ? nlohmann::json(r.b) : nlohmann::json(nullptr)};
    out["status"] = {run_status_name(ra.status), run_status_name(rb.status)};
    fmt::print("{}\n", out.dump().c_str());
    return kExitOk;
  }
  size_t w = 17;
  for (const ConfigDifference& d : diffs) w = std::max(w, d.key.size());
  fmt::print("A: {}\nB: {}\n\n", a.c_str(), b.c_str());
  if (diffs.empty())
    fmt::print("config: identical\n");
  else
    fmt::print("{:<{}}  {:<24}  {}\n", "config key", w, "A", "B");
  for (const ConfigDifference& d : diffs)
    fmt::print("{:<{}}  {:<24}  {}\n", d.key.c_str(), w, value_str(d.a).c_str(), value_str(d.b).c_str());
  fmt::print("\n{:<{}}  {:<24}  {}\n", "final metrics", w, "A", "B");
  fmt::print("{:<{}}  {:<24}  {}\n", "status", w, run_status_name(ra.status), run_status_name(rb.status));
  for (const Row& r : rows)
    fmt::print("{:<{}}  {:<24}  {}\n", r.name, w, number_or_dash(r.a, "{:.6g}").c_str(),
               number_or_dash(r.b, "{:.6g}").c_str());
  return kExitOk;
}

int runs_command(const RunsOptions& o) {
  if (!o.diff.empty()) {
    if (o.dirs.size() > 0 && !(o.dirs.size() == 1 && o.dirs[0] == "runs"))
      throw ConfigError("--diff: compares two runs; give no DIR beside it");
    return diff_command(o);
  }
  for (const std::string& d : o.dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) throw IoError(d + ": no such directory (tfm runs DIR...)");
  }
  std::vector<RunSummary> runs = list_runs(o.dirs);
  sort_runs(runs, o.sort);
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const RunSummary& r : runs) out.push_back(run_summary_json(r));
    fmt::print("{}\n", out.dump().c_str());
    return kExitOk;
  }
  if (runs.empty()) {
    fmt::print("no runs under {} (a run is a directory with config.json or metrics.jsonl)\n",
               fmt::join(o.dirs, ", "));
    return kExitOk;
  }
  size_t w = 4;
  for (const RunSummary& r : runs) w = std::max(w, r.name.size());
  fmt::print("{:<{}}  {:<10}  {:>7}  {:<20}  {:>13}  {:>8}  {:>9}  {:>8}  {}\n", "name", w, "objective",
             "params", "status", "step", "best val", "to target", "tok/s", "updated");
  for (const RunSummary& r : runs) {
    std::string status = run_status_name(r.status);
    if (r.status == RunStatus::Failed || r.status == RunStatus::Training)
      status += " (" + r.status_detail + ")";
    if (status.size() > 20) status = status.substr(0, 19) + "~";
    fmt::print(
        "{:<{}}  {:<10}  {:>7}  {:<20}  {:>13}  {:>8}  {:>9}  {:>8}  {}\n", r.name.c_str(), w,
        r.objective.empty() ? "-" : r.objective.c_str(), count_str(r.parameters).c_str(), status.c_str(),
        (r.max_steps > 0 ? fmt::format("{}/{}", r.step, r.max_steps) : fmt::format("{}/?", r.step)).c_str(),
        number_or_dash(r.best_val_loss, "{:.4f}").c_str(),
        number_or_dash(r.seconds_to_target, "{:.1f}s").c_str(),
        r.tokens_per_s >= 0 ? count_str(static_cast<int64_t>(r.tokens_per_s)).c_str() : "-",
        age(r.last_update).c_str());
    for (const std::string& p : r.problems) fmt::print("  {}: {}\n", r.name.c_str(), p.c_str());
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_runs_commands(CLI::App& app) {
  auto o = std::make_shared<RunsOptions>();
  auto* cmd =
      app.add_subcommand("runs", "The runs under directories as a table (status, step, best val loss)");
  cmd->add_option("DIR", o->dirs, "Directories to look in for runs (default: runs)")->type_name("DIR ...");
  cmd->add_option("--sort", o->sort,
                  "Sort by name, status, step, best_val_loss, seconds_to_target, tokens_per_s, parameters or "
                  "last_update")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON array of the runs (or the diff as JSON)");
  cmd->add_option("--diff", o->diff, "Compare two runs: the config keys that differ and the final metrics")
      ->type_name("RUN_A RUN_B")
      ->expected(2);
  cmd->footer(
      "\nExamples:\n  tfm runs\n  tfm runs runs/ other_runs/ --sort best_val_loss\n"
      "  tfm runs --diff runs/a runs/b\n");
  return {{cmd, [o] {
             if (o->dirs.empty()) o->dirs = {"runs"};
             return runs_command(*o);
           }}};
}

}  // namespace tfm::cli
