#include "tfm/analysis/runs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "tfm/config/config.h"
#include "tfm/engine/enum_names.h"
#include "tfm/engine/error.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/run_lock.h"

namespace tfm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Up to `max_bytes` of `path` from byte `from` (negative: that many bytes before the end); "" when it
// cannot be read.
std::string read_part(const std::string& path, int64_t from, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  const int64_t start = from < 0 ? std::max<int64_t>(0, size + from) : std::min(from, size);
  const int64_t n = std::min<int64_t>(size - start, static_cast<int64_t>(max_bytes));
  std::string out(static_cast<size_t>(std::max<int64_t>(n, 0)), '\0');
  in.seekg(start);
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

double unix_mtime(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return 0;
  // file_clock and system_clock share the Unix epoch in libstdc++ (C++17 has no clock_cast).
  const auto since = t.time_since_epoch() - fs::file_time_type::clock::now().time_since_epoch() +
                     std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since).count();
}

double json_number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNoValue;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return kNoValue;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// "model: 27264 parameters" near the top of train.log; -1 when absent.
int64_t logged_parameters(const std::string& log_head) {
  const std::string marker = "] model: ";
  const size_t at = log_head.find(marker);
  if (at == std::string::npos) return -1;
  const char* p = log_head.c_str() + at + marker.size();
  char* end = nullptr;
  const long long n = std::strtoll(p, &end, 10);
  return end != p && std::string(end).rfind(" parameters", 0) == 0 ? n : -1;
}

// The last "[error]" line of train.log after the last start of `tfm train` in its tail; "" if none.
std::string logged_error(const std::string& log_tail) {
  const size_t start = log_tail.rfind("] tfm train: ");
  const size_t from = start == std::string::npos ? 0 : start;
  const size_t at = log_tail.rfind("[error] ");
  if (at == std::string::npos || at < from) return "";
  const size_t end = log_tail.find('\n', at);
  return log_tail.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
}

bool is_run_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kRunConfigFile, ec) || fs::is_regular_file(dir / kMetricsFile, ec);
}

// Calls visit(dir, depth) for `root` and every directory below it, sorted, symlinks not followed.
void walk_dirs(const fs::path& root, int max_depth, const std::function<void(const fs::path&)>& visit) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  visit(root);
  if (max_depth <= 0) return;
  std::vector<fs::path> children;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) children.push_back(it->path());
  std::sort(children.begin(), children.end());
  for (const fs::path& c : children) walk_dirs(c, max_depth - 1, visit);
}

}  // namespace

std::string run_name_under(const std::string& root_path, const std::string& dir_path) {
  std::error_code ec;
  const fs::path here = fs::current_path(ec);
  const fs::path dir = fs::absolute(dir_path, ec).lexically_normal();
  const fs::path from_here = ec ? fs::path() : dir.lexically_relative(here);
  if (!from_here.empty() && *from_here.begin() != "..") {
    if (from_here == ".") return here.filename().string();  // where the user stands
    const std::string name = from_here.string();
    return name.back() == '/' ? name.substr(0, name.size() - 1) : name;
  }
  const fs::path root(root_path);
  fs::path base = root.filename().empty() ? root.parent_path().filename() : root.filename();
  if (base.empty() || base == ".") base = fs::absolute(root).lexically_normal().filename();
  if (base.empty()) base = "runs";
  const fs::path rel = fs::path(dir_path).lexically_relative(root);
  return rel.empty() || rel == "." ? base.string() : (base / rel).string();
}

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::Training:
      return "training";
    case RunStatus::Finished:
      return "finished";
    case RunStatus::StoppedAtTarget:
      return "stopped: target";
    case RunStatus::StoppedAtTimeBudget:
      return "stopped: time budget";
    case RunStatus::Interrupted:
      return "interrupted";
    case RunStatus::Failed:
      return "failed";
  }
  return "?";
}

MetricsLog read_metrics(const std::string& path, int64_t since_step) {
  MetricsLog log;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    log.missing = true;
    return log;
  }
  const std::string text = read_part(path, 0, kMaxMetricsBytes);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) {  // the unfinished last line
      ++log.skipped_lines;
      break;
    }
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    json rec = json::parse(line.begin(), line.end(), nullptr, false);
    // A record is an object whose step, when it has one, is an integer: anything else is damage.
    if (!rec.is_object() || (rec.contains("step") && !rec["step"].is_number_integer())) {
      ++log.skipped_lines;
      continue;
    }
    const auto step = rec.find("step");
    if (since_step >= 0 && (step == rec.end() || !step->is_number() || step->get<int64_t>() <= since_step))
      continue;
    log.records.push_back(std::move(rec));
  }
  return log;
}

RunSummary summarize_run(const std::string& dir, const std::string& name, MetricsLog* metrics_out) {
  RunSummary r;
  r.dir = dir;
  r.name = name;
  const fs::path d(dir);
  std::error_code ec;
  const std::vector<std::string>& own = run_file_names();
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    r.files.push_back(it->path().filename().string());
    // What training writes: an analysis written into the run (attention/, heads/) is not an update.
    if (std::find(own.begin(), own.end(), r.files.back()) != own.end())
      r.last_update = std::max(r.last_update, unix_mtime(it->path()));
  }
  std::sort(r.files.begin(), r.files.end());
  if (!fs::is_directory(d, ec)) {
    r.problems.push_back(dir + ": no such directory (deleted?)");
    return r;
  }

  // The resolved config: objective and step budget.
  const std::string config_text = read_part((d / kRunConfigFile).string(), 0, 16 << 20);
  const json config = json::parse(config_text, nullptr, false);
  if (config.is_object()) {
    // Read as tfm wrote it, and a hand-edited value of another type is taken as absent, never thrown.
    const json& train =
        config.contains("train") && config["train"].is_object() ? config["train"] : json::object();
    const auto objective = train.find("objective");
    const auto max_steps = train.find("max_steps");
    r.objective =
        objective != train.end() && objective->is_string() ? objective->get<std::string>() : "causal_lm";
    r.max_steps = max_steps != train.end() && max_steps->is_number_integer() ? max_steps->get<int64_t>() : 0;
  } else {
    r.problems.push_back(std::string(kRunConfigFile) +
                         (config_text.empty() ? ": missing" : ": not valid JSON"));
  }

  // What the log says: parameters, and an error that ended the last start.
  const std::string log_path = (d / kRunLogFile).string();
  r.parameters = logged_parameters(read_part(log_path, 0, 16384));
  const std::string error = logged_error(read_part(log_path, -65536, 65536));

  // The metrics: steps, best val loss, time to target, throughput.
  MetricsLog read = read_metrics((d / kMetricsFile).string());
  const MetricsLog& metrics = metrics_out ? (*metrics_out = std::move(read)) : read;
  if (metrics.skipped_lines > 0)
    r.problems.push_back(std::string(kMetricsFile) + ": " + std::to_string(metrics.skipped_lines) +
                         " unreadable line(s) skipped (a run writing it, or cut short)");
  std::vector<double> rates;
  for (const json& rec : metrics.records) {
    r.step = std::max<int64_t>(r.step, rec.value("step", int64_t{0}));
    const double val = json_number(rec, "val_loss");
    if (std::isfinite(val) && !(r.best_val_loss <= val)) r.best_val_loss = val;
    const double accuracy = json_number(rec, "val_accuracy"), bleu = json_number(rec, "val_bleu");
    if (std::isfinite(accuracy) && !(r.best_val_accuracy >= accuracy)) r.best_val_accuracy = accuracy;
    if (std::isfinite(bleu) && !(r.best_val_bleu >= bleu)) r.best_val_bleu = bleu;
    const double to_target = json_number(rec, "seconds_to_target");
    if (std::isnan(r.seconds_to_target) && std::isfinite(to_target)) r.seconds_to_target = to_target;
    const double rate = json_number(rec, "tokens_per_s");
    if (std::isfinite(rate)) rates.push_back(rate);
  }
  r.tokens_per_s = median_of(rates);

  // The checkpoint's state: where training stopped and why. A damaged one is this run's problem, named
  // with its field, and the list goes on.
  std::optional<CheckpointState> state;
  const std::string ckpt = resume_checkpoint_path(dir);
  if (!ckpt.empty()) {
    try {
      state = load_checkpoint_state(ckpt);
    } catch (const Error& e) {
      r.problems.push_back(e.what());
    }
  }
  // best.ckpt when --resume reads last.ckpt: sample, eval and export read it by default.
  const std::string best = (d / kBestCheckpointFile).string();
  if (!ckpt.empty() && ckpt != best && fs::exists(best, ec)) {
    try {
      load_checkpoint_state(best);
    } catch (const Error& e) {
      r.problems.push_back(e.what());
    }
  }
  const int64_t ckpt_step = state ? state->step : -1;
  if (ckpt_step > r.step) r.step = ckpt_step;
  if (state && state->evaluated() && !(r.best_val_loss <= state->best_val_loss))
    r.best_val_loss = state->best_val_loss;
  const std::string stopped = state ? state->stopped : "";

  const long holder = RunLock::holder(dir);
  if (holder != 0) {
    r.status = RunStatus::Training;
    r.status_detail = "PID " + std::to_string(holder);
  } else if (!error.empty()) {
    r.status = RunStatus::Failed;
    r.status_detail = error;
  } else if (stopped == "target_loss") {
    r.status = RunStatus::StoppedAtTarget;
  } else if (stopped == "max_seconds") {
    r.status = RunStatus::StoppedAtTimeBudget;
  } else if (ckpt_step >= 0 && r.max_steps > 0 && ckpt_step >= r.max_steps) {
    r.status = RunStatus::Finished;
  } else {
    r.status = RunStatus::Interrupted;
    r.status_detail = ckpt.empty() ? "no checkpoint" : ckpt_step < 0 ? "checkpoint unreadable" : "";
    if (ckpt.empty())
      r.problems.push_back(std::string("no ") + kLastCheckpointFile + " or " + kBestCheckpointFile +
                           ": nothing to resume, sample or evaluate (a run stopped before its first save, or "
                           "its checkpoints deleted)");
  }
  return r;
}

std::vector<std::string> find_runs(const std::vector<std::string>& roots, int max_depth) {
  std::vector<std::string> runs;
  for (const std::string& root : roots)
    walk_dirs(root, max_depth, [&](const fs::path& dir) {
      if (is_run_dir(dir)) runs.push_back(dir.string());
    });
  return runs;
}

std::vector<std::string> unique_names(std::vector<std::string> names, const std::vector<std::string>& dirs) {
  std::error_code ec;
  const fs::path here = fs::current_path(ec);
  const size_t n = names.size();
  std::vector<fs::path> absolute(n);
  std::vector<bool> fixed(n);
  for (size_t i = 0; i < n; ++i) {
    fs::path a = fs::absolute(dirs[i], ec).lexically_normal();
    if (!a.has_filename()) a = a.parent_path();  // "runs/tiny/"
    absolute[i] = a;
    const fs::path from_here = here.empty() ? fs::path() : a.lexically_relative(here);
    fixed[i] = from_here == fs::path(names[i]);
  }
  // The last `parts` components of a path; the whole absolute path when it has no more.
  const auto tail = [](const fs::path& p, size_t parts) {
    const fs::path relative = p.relative_path();
    const std::vector<fs::path> all(relative.begin(), relative.end());
    if (parts >= all.size()) return p;
    fs::path out;
    for (size_t i = all.size() - parts; i < all.size(); ++i) out /= all[i];
    return out;
  };
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::string, std::vector<size_t>> alike;
    for (size_t i = 0; i < n; ++i) alike[names[i]].push_back(i);
    for (const auto& [name, group] : alike) {
      if (group.size() < 2) continue;
      for (size_t i : group) {
        if (fixed[i] || name == absolute[i].string()) continue;  // nothing left to add
        const fs::path shown(name);
        const size_t parts = static_cast<size_t>(std::distance(shown.begin(), shown.end()));
        names[i] = tail(absolute[i], parts + 1).string();
        changed = true;
      }
    }
  }
  return names;
}

std::vector<NamedRun> find_named_runs(const std::vector<std::string>& roots,
                                      const std::function<bool(const std::string&)>& keep) {
  std::vector<NamedRun> runs;
  std::set<fs::path> seen;  // real paths: `tfm runs runs runs/tiny` lists runs/tiny once
  for (const std::string& root : roots)
    for (const std::string& dir : find_runs({root})) {
      std::error_code ec;
      fs::path real = fs::weakly_canonical(dir, ec);
      if (ec) real = fs::absolute(dir, ec).lexically_normal();
      if (!seen.insert(real).second || (keep && !keep(dir))) continue;
      runs.push_back({dir, run_name_under(root, dir)});
    }
  std::vector<std::string> names, dirs;
  for (const NamedRun& r : runs) names.push_back(r.name), dirs.push_back(r.dir);
  names = unique_names(std::move(names), dirs);
  for (size_t i = 0; i < runs.size(); ++i) runs[i].name = names[i];
  return runs;
}

std::vector<RunSummary> list_runs(const std::vector<std::string>& roots) {
  std::vector<RunSummary> runs;
  for (const NamedRun& r : find_named_runs(roots)) runs.push_back(summarize_run(r.dir, r.name));
  return runs;
}

json run_summary_json(const RunSummary& run) {
  const auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"name", run.name},
          {"dir", run.dir},
          {"objective", run.objective},
          {"parameters", run.parameters >= 0 ? json(run.parameters) : json(nullptr)},
          {"status", run_status_name(run.status)},
          {"status_detail", run.status_detail},
          {"step", run.step},
          {"max_steps", run.max_steps},
          {"best_val_loss", number(run.best_val_loss)},
          {"best_val_accuracy", number(run.best_val_accuracy)},
          {"best_val_bleu", number(run.best_val_bleu)},
          {"seconds_to_target", number(run.seconds_to_target)},
          {"tokens_per_s", number(run.tokens_per_s)},
          {"last_update", run.last_update},
          {"problems", run.problems},
          {"files", run.files}};
}

void sort_runs(std::vector<RunSummary>& runs, const std::string& key) {
  using Number = std::function<double(const RunSummary&)>;
  static const std::map<std::string, Number> numbers = {
      {"step", [](const RunSummary& r) { return static_cast<double>(r.step); }},
      {"best_val_loss", [](const RunSummary& r) { return r.best_val_loss; }},
      {"best_val_accuracy", [](const RunSummary& r) { return -r.best_val_accuracy; }},  // highest first
      {"best_val_bleu", [](const RunSummary& r) { return -r.best_val_bleu; }},
      {"seconds_to_target", [](const RunSummary& r) { return r.seconds_to_target; }},
      {"tokens_per_s", [](const RunSummary& r) { return -r.tokens_per_s; }},  // fastest first
      {"parameters", [](const RunSummary& r) { return r.parameters < 0 ? kNoValue : double(r.parameters); }},
      {"last_update", [](const RunSummary& r) { return -r.last_update; }}};  // newest first
  if (key == "name" || key == "status") {
    std::stable_sort(runs.begin(), runs.end(), [&](const RunSummary& a, const RunSummary& b) {
      return key == "name" ? a.name < b.name
                           : std::string(run_status_name(a.status)) < run_status_name(b.status);
    });
    return;
  }
  const auto it = numbers.find(key);
  if (it == numbers.end())
    throw ConfigError(
        "--sort: expected one of name, status, step, best_val_loss, best_val_accuracy, best_val_bleu, "
        "seconds_to_target, tokens_per_s, parameters, last_update; got \"" +
        key + "\"");
  const Number& f = it->second;
  std::stable_sort(runs.begin(), runs.end(), [&](const RunSummary& a, const RunSummary& b) {
    const double x = f(a), y = f(b);
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);  // unknown last
    return x < y;
  });
}

std::vector<json> find_result_sets(const std::vector<std::string>& roots, int max_depth) {
  static const std::vector<std::pair<const char*, const char*>> kinds = {
      {"sweep.jsonl", "sweep"}, {"ablate.jsonl", "ablation"}, {"summary.json", "speedrun"}};
  std::vector<json> sets;
  for (const std::string& root : roots)
    walk_dirs(root, max_depth, [&](const fs::path& dir) {
      std::error_code ec;
      for (const auto& [file, kind] : kinds) {
        if (!fs::is_regular_file(dir / file, ec)) continue;
        std::vector<std::string> files;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
          if (it->is_regular_file(ec)) files.push_back(it->path().filename().string());
        std::sort(files.begin(), files.end());
        sets.push_back({{"name", run_name_under(root, dir.string())},
                        {"dir", dir.string()},
                        {"kind", kind},
                        {"files", files}});
        break;
      }
    });
  std::vector<std::string> names, dirs;
  for (const json& set : sets) names.push_back(set["name"]), dirs.push_back(set["dir"]);
  names = unique_names(std::move(names), dirs);
  for (size_t i = 0; i < sets.size(); ++i) sets[i]["name"] = names[i];
  return sets;
}

std::vector<size_t> downsample_min_max(const std::vector<double>& y, size_t max_points) {
  const size_t n = y.size();
  std::vector<size_t> kept;
  if (n <= max_points || max_points < 2) {
    for (size_t i = 0; i < n && (max_points >= 2 || i < max_points); ++i) kept.push_back(i);
    return kept;
  }
  // The first and the last point always: where the chart starts and ends (the newest value, and the step
  // a page polling for what is new goes on from); the points between in buckets.
  kept.push_back(0);
  const size_t inner = n - 2, buckets = (max_points - 2) / 2;  // n > max_points >= 2: inner >= 1
  for (size_t b = 0; b < buckets; ++b) {
    // [lo, hi), never empty: inner > buckets
    const size_t lo = 1 + b * inner / buckets, hi = 1 + (b + 1) * inner / buckets;
    size_t min_i = lo, max_i = lo;
    for (size_t i = lo; i < hi; ++i) {
      if (y[i] < y[min_i] || std::isnan(y[min_i])) min_i = i;
      if (y[i] > y[max_i] || std::isnan(y[max_i])) max_i = i;
    }
    kept.push_back(std::min(min_i, max_i));
    if (max_i != min_i) kept.push_back(std::max(min_i, max_i));
  }
  kept.push_back(n - 1);
  return kept;
}

json flatten_config(const json& config) {
  json flat = json::object();
  const std::function<void(const json&, const std::string&)> walk = [&](const json& j,
                                                                        const std::string& at) {
    if (j.is_object() && !j.empty()) {
      for (auto it = j.begin(); it != j.end(); ++it)
        walk(it.value(), at.empty() ? it.key() : at + "." + it.key());
    } else if (!at.empty()) {
      flat[at] = j;
    }
  };
  walk(config, "");
  return flat;
}

std::vector<ConfigDifferences> config_diff(const std::vector<json>& configs) {
  std::vector<json> flat;
  std::vector<std::optional<ObjectiveKind>> objectives;  // a present run's; none: it reads every key
  std::map<std::string, bool> keys;                      // every key of a present config, sorted
  for (const json& c : configs) {
    flat.push_back(c.is_object() ? flatten_config(c) : json());
    if (!c.is_object()) continue;
    flat.back().erase("output.dir");  // where each run is: always different, never the point
    const auto it = flat.back().find("train.objective");
    objectives.push_back(it != flat.back().end() && it->is_string()
                             ? enum_from<ObjectiveKind>(it->get<std::string>())
                             : std::nullopt);
    for (auto k = flat.back().begin(); k != flat.back().end(); ++k) keys[k.key()] = true;
  }
  std::vector<ConfigDifferences> out;
  for (const auto& [key, unused] : keys) {
    ConfigDifferences d{key, {}};
    bool differs = false;
    std::optional<size_t> first;  // the first present config's value
    const KeySpec* spec = find_key(key);
    for (const json& f : flat) {
      const auto it = f.is_object() ? f.find(key) : f.end();
      json value = nullptr;
      // data.path's list, recorded as a list or (before) as its text: one corpus, one value
      if (f.is_object() && it != f.end()) value = spec ? comparable_value(*spec, *it) : *it;
      d.values.push_back(std::move(value));
      if (!f.is_object()) continue;  // missing: not compared
      if (!first) first = d.values.size() - 1;
      differs = differs || d.values[*first] != d.values.back();
    }
    if (!differs) continue;
    // A key no run's objective reads (data.max_source_len between causal_lm runs) says nothing.
    if (spec && std::none_of(objectives.begin(), objectives.end(),
                             [&](const auto& objective) { return !objective || spec->read_by(*objective); }))
      continue;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<ConfigDifference> config_diff(const json& a, const json& b) {
  std::vector<ConfigDifference> out;
  for (ConfigDifferences& d :
       config_diff(std::vector<json>{a.is_object() ? a : json::object(), b.is_object() ? b : json::object()}))
    out.push_back({d.key, std::move(d.values[0]), std::move(d.values[1])});
  return out;
}

}  // namespace tfm
