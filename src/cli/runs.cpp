// `tfm runs`: the runs under some directories as a table (or JSON), and `tfm runs --diff A B ...`: the
// config keys runs differ in and their final metrics side by side (analysis/runs.h).
#include "tfm/analysis/runs.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
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

// A run directory's resolved config (config.json), or null with what is wrong in `problem`: a run
// without one is still compared on its metrics. A path that is no run directory is an IoError.
nlohmann::json run_config(const std::string& dir, std::string& problem) {
  require_run_directory(dir);
  const std::string path = dir + "/" + kRunConfigFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (!std::filesystem::exists(dir + "/" + kMetricsFile, ec))
      throw IoError(dir + ": not a run directory (no " + kRunConfigFile + " or " + kMetricsFile + ")");
    problem = std::string(kRunConfigFile) + ": missing";
    return nullptr;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(path, 16 << 20), nullptr, false);
    if (j.is_object()) return j;
    problem = std::string(kRunConfigFile) + ": not a JSON object";
  } catch (const IoError& e) {
    problem = e.what();
  }
  return nullptr;
}

std::string value_str(const nlohmann::json& v) {
  // 10 significant digits: a derived 0.003 / 10 shows as 0.0003, not 0.00030000000000000003.
  if (v.is_number_float()) return fmt::format("{:.10g}", v.get<double>());
  return v.is_null() ? "(absent)" : v.is_string() ? v.get<std::string>() : v.dump();
}

// Rows of text: the first column left-aligned to its widest cell, the others likewise, two spaces apart.
void print_columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i)
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], width[i]) : row[i];
    fmt::print("{}\n", line);
  }
}

int diff_command(const RunsOptions& o) {
  const std::vector<std::string>& dirs = o.diff;
  const size_t n = dirs.size();
  std::vector<nlohmann::json> configs;
  std::vector<std::string> problems(n);
  std::vector<RunSummary> summaries;
  std::vector<MetricsLog> logs;
  for (size_t i = 0; i < n; ++i) {
    configs.push_back(run_config(dirs[i], problems[i]));
    logs.emplace_back();
    summaries.push_back(summarize_run(dirs[i], dirs[i], &logs.back()));  // its metrics read once
  }
  const std::vector<ConfigDifferences> diffs = config_diff(configs);
  // The final metrics: the last record's values, with the summary's figures. The train loss is the mean
  // over the last log interval, the figure train.log's last line and loss.svg show; its last batch beside.
  const auto last_of = [](const MetricsLog& m, const std::string& key) {
    for (auto it = m.records.rbegin(); it != m.records.rend(); ++it)
      if (it->contains(key) && (*it)[key].is_number()) return (*it)[key].get<double>();
    return kNoValue;
  };
  struct Row {
    std::string key, label;
    std::vector<double> values;
  };
  std::vector<Row> rows;
  const auto logged = [&](const std::string& key, const std::string& label) {
    rows.push_back({key, label, {}});
    for (const MetricsLog& m : logs) rows.back().values.push_back(last_of(m, key));
  };
  const auto summarized = [&](const char* key, const std::function<double(const RunSummary&)>& f) {
    rows.push_back({key, key, {}});
    for (const RunSummary& r : summaries) rows.back().values.push_back(f(r));
  };
  summarized("step", [](const RunSummary& r) { return double(r.step); });
  logged("train_loss_avg", "train_loss_avg (mean of the last interval)");
  logged("train_loss", "train_loss (its last batch)");
  logged("val_loss", "val_loss");
  // Every other evaluation figure a run logs: accuracy (masked_lm, seq2seq), BLEU (seq2seq).
  std::set<std::string> scores;
  for (const MetricsLog& m : logs)
    for (const nlohmann::json& rec : m.records)
      for (auto it = rec.begin(); it != rec.end(); ++it)
        if (it.key().rfind("val_", 0) == 0 && it.key() != "val_loss" && it->is_number())
          scores.insert(it.key());
  for (const std::string& key : scores) logged(key, key);
  summarized("best_val_loss", [](const RunSummary& r) { return r.best_val_loss; });
  summarized("seconds_to_target", [](const RunSummary& r) { return r.seconds_to_target; });
  summarized("tokens_per_s", [](const RunSummary& r) { return r.tokens_per_s; });
  logged("elapsed_s", "elapsed_s");

  if (o.json) {
    nlohmann::json out = {{"runs", dirs},
                          {"problems", problems},
                          {"config", nlohmann::json::array()},
                          {"metrics", nlohmann::json::object()},
                          {"status", nlohmann::json::array()}};
    for (const ConfigDifferences& d : diffs) out["config"].push_back({{"key", d.key}, {"values", d.values}});
    for (const Row& r : rows) {
      nlohmann::json& values = out["metrics"][r.key] = nlohmann::json::array();
      for (double v : r.values)
        values.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
    }
    for (const RunSummary& r : summaries) out["status"].push_back(run_status_name(r.status));
    fmt::print("{}\n", out.dump().c_str());
    return kExitOk;
  }
  // Columns A, B, C...: the runs, named once above the tables.
  std::vector<std::string> letters;
  for (size_t i = 0; i < n; ++i) letters.push_back(std::string(1, static_cast<char>('A' + i)));
  for (size_t i = 0; i < n; ++i)
    fmt::print("{}: {}{}\n", letters[i], dirs[i],
               problems[i].empty() ? "" : " (" + problems[i] + ": its config is not compared)");
  fmt::print("\n");
  std::vector<std::vector<std::string>> table;
  const auto readable =
      std::count_if(configs.begin(), configs.end(), [](const auto& c) { return !c.is_null(); });
  if (readable < 2) {
    fmt::print("config: not compared (fewer than two of the runs have a readable {})\n\n", kRunConfigFile);
  } else if (diffs.empty()) {
    fmt::print("config: identical\n\n");
  } else {
    table.push_back({"config key"});
    table.back().insert(table.back().end(), letters.begin(), letters.end());
    for (const ConfigDifferences& d : diffs) {
      table.push_back({d.key});
      for (size_t i = 0; i < n; ++i)
        table.back().push_back(configs[i].is_null() ? "-" : value_str(d.values[i]));
    }
    table.push_back({});
  }
  table.push_back({"final metrics"});
  table.back().insert(table.back().end(), letters.begin(), letters.end());
  table.push_back({"status"});
  for (const RunSummary& r : summaries) table.back().push_back(run_status_name(r.status));
  for (const Row& r : rows) {
    table.push_back({r.label});
    for (double v : r.values) table.back().push_back(number_or_dash(v, "{:.6g}"));
  }
  print_columns(table);
  return kExitOk;
}

int runs_command(const RunsOptions& o) {
  if (!o.diff.empty()) {
    if (o.dirs.size() > 0 && !(o.dirs.size() == 1 && o.dirs[0] == "runs"))
      throw ConfigError("--diff: compares the runs it names; give no DIR beside it");
    if (o.diff.size() < 2 || o.diff.size() > kMaxDiffRuns)
      throw ConfigError(fmt::format("--diff: compares 2 to {} runs, got {}", kMaxDiffRuns, o.diff.size()));
    return diff_command(o);
  }
  for (const std::string& d : o.dirs) {
    std::error_code ec;
    if (!std::filesystem::exists(d, ec)) throw IoError(d + ": no such directory (tfm runs DIR...)");
    if (!std::filesystem::is_directory(d, ec))
      throw IoError(d +
                    ": a file, not a directory of runs (tfm runs DIR...: the directories runs are under)");
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
  // Accuracy (masked_lm, seq2seq) and BLEU (seq2seq) when a run listed logs them.
  const auto any = [&](double RunSummary::*field) {
    return std::any_of(runs.begin(), runs.end(),
                       [&](const RunSummary& r) { return std::isfinite(r.*field); });
  };
  const bool accuracy = any(&RunSummary::best_val_accuracy), bleu = any(&RunSummary::best_val_bleu);
  const auto scores = [&](const std::string& a, const std::string& b) {
    return (accuracy ? fmt::format("  {:>7}", a) : "") + (bleu ? fmt::format("  {:>8}", b) : "");
  };
  fmt::print("{:<{}}  {:<10}  {:>7}  {:<20}  {:>13}  {:>8}{}  {:>9}  {:>8}  {}\n", "name", w, "objective",
             "params", "status", "step", "best val", scores("val acc", "val BLEU"), "to target", "tok/s",
             "updated");
  for (const RunSummary& r : runs) {
    std::string status = run_status_name(r.status);
    if (r.status == RunStatus::Failed || r.status == RunStatus::Training)
      status += " (" + r.status_detail + ")";
    if (status.size() > 20) status = status.substr(0, 19) + "~";
    fmt::print(
        "{:<{}}  {:<10}  {:>7}  {:<20}  {:>13}  {:>8}{}  {:>9}  {:>8}  {}\n", r.name.c_str(), w,
        r.objective.empty() ? "-" : r.objective.c_str(), count_str(r.parameters).c_str(), status.c_str(),
        (r.max_steps > 0 ? fmt::format("{}/{}", r.step, r.max_steps) : fmt::format("{}/?", r.step)).c_str(),
        number_or_dash(r.best_val_loss, "{:.4f}").c_str(),
        scores(number_or_dash(r.best_val_accuracy, "{:.3f}"), number_or_dash(r.best_val_bleu, "{:.1f}")),
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
                  "Sort by name, status, step, best_val_loss, best_val_accuracy, best_val_bleu, "
                  "seconds_to_target, tokens_per_s, parameters or last_update")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "One JSON array of the runs (or the diff as JSON)");
  cmd->add_option("--diff", o->diff,
                  fmt::format("Compare runs (2 to {}): the config keys that differ and the final metrics "
                              "side by side",
                              kMaxDiffRuns))
      ->type_name("RUN_A RUN_B ...")
      ->expected(1, CLI::detail::expected_max_vector_size);
  cmd->footer(
      "\nExamples:\n  tfm runs\n  tfm runs runs/ other_runs/ --sort best_val_loss\n"
      "  tfm runs --diff runs/a runs/b runs/c\n");
  return {{cmd, [o] {
             if (o->dirs.empty()) o->dirs = {"runs"};
             return runs_command(*o);
           }}};
}

}  // namespace tfm::cli
