// tfm sweep: trains every point of a grid of config values with the same seed and data, one run
// directory each, resumable, and tabulates what each point costs and reaches (docs/heads.md:
// heads against width, MHA/GQA/MQA, ...).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli.h"
#include "tfm/training/checkpoint.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/objectives/objective.h"
#include "tfm/engine/platform.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"

namespace tfm::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Points a grid may have: far more training runs than a sweep is worth, far fewer than would exhaust
// memory holding their configs.
constexpr int64_t kMaxSweepPoints = 10000;

struct SweepOptions {
  std::string config, out;
  std::vector<std::string> grid, sets;
  bool json = false, no_plot = false;
};

struct Axis {
  std::string key;
  std::vector<std::string> values;  // as written: JSON values (strings quoted or bare words)
};

// "model.n_heads=1,2,4" -> {model.n_heads, [1, 2, 4]}; the key must exist.
Axis parse_axis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw ConfigError("--grid: expected KEY=V1,V2,... (e.g. model.n_heads=1,2,4), got \"" + spec + "\"");
  Axis a{spec.substr(0, eq), {}};
  if (!find_key(a.key))
    throw ConfigError("--grid: " + a.key + " is not a config key (tfm config --keys lists them)");
  size_t start = eq + 1;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string v = spec.substr(start, end - start);
    if (v.empty()) throw ConfigError("--grid: an empty value in \"" + spec + "\"");
    a.values.push_back(v);
    start = end + 1;
  }
  return a;
}

// Every combination of the axes' values, the first axis slowest.
std::vector<std::vector<std::string>> points_of(const std::vector<Axis>& axes) {
  std::vector<std::vector<std::string>> points = {{}};
  for (const Axis& a : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points)
      for (const std::string& v : a.values) {
        auto q = p;
        q.push_back(v);
        next.push_back(q);
      }
    points = next;
  }
  return points;
}

// A point's directory name: "model.n_heads=4,model.d_model=128" with path-unsafe characters replaced.
std::string point_name(const std::vector<Axis>& axes, const std::vector<std::string>& values) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + axes[i].key + "=" + values[i];
  for (char& c : s)
    if (c == '/' || c == '"' || c == '\'' || c == ' ') c = '_';
  return s;
}

// What a finished point cost and reached, from its run directory.
json measure(const std::string& dir, const Config& config) {
  json rec;
  // Through read_file: a FIFO or device under the name is refused, not waited on.
  std::istringstream in(read_file(dir + "/metrics.jsonl", uint64_t{1} << 30));
  std::string line;
  std::vector<double> ms, tok;
  double val = NAN, best = NAN, training_s = 0, to_target = NAN;
  while (std::getline(in, line)) {
    const json r = json::parse(line, nullptr, false);
    if (r.is_discarded()) continue;
    if (r.contains("ms_per_step")) ms.push_back(r["ms_per_step"].get<double>());
    if (r.contains("tokens_per_s")) tok.push_back(r["tokens_per_s"].get<double>());
    if (r.contains("training_s")) training_s = r["training_s"].get<double>();
    if (r.contains("seconds_to_target") && std::isnan(to_target)) to_target = r["seconds_to_target"].get<double>();
    if (r.contains("val_loss")) {
      val = r["val_loss"].get<double>();
      if (!(best <= val)) best = val;
    }
  }
  const auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  LoadedRun run = load_run(dir, "last");
  const Model& model = run.objective->model();
  const int64_t C = config.integer("model.d_model"), H = config.integer("model.n_heads");
  const int64_t kv = config.integer("model.n_kv_heads") > 0 ? config.integer("model.n_kv_heads") : H;
  const int64_t layers = config.string("train.objective") == "seq2seq" ? config.integer("model.n_decoder_layers")
                                                                       : config.integer("model.n_layers");
  rec["parameters"] = model.parameter_count();
  rec["train_flops_per_token"] = run.objective->train_flops_per_token();
  rec["kv_cache_bytes_per_token"] = 2 * layers * kv * (C / H) * 4;  // K and V, float32, every layer
  rec["val_loss"] = val;
  rec["best_val_loss"] = best;
  rec["ms_per_step"] = median(ms);
  rec["tokens_per_s"] = median(tok);
  rec["step"] = run.checkpoint.state.value("step", int64_t{0});
  rec["training_s"] = training_s;
  rec["stopped"] = run.checkpoint.state.value("stopped", std::string(rec["step"] == config.integer("train.max_steps")
                                                                         ? "max_steps" : "interrupted"));
  // Time to quality (train.target_loss): seconds to the first evaluation at or below it, null if missed.
  if (config.number("train.target_loss") > 0) rec["seconds_to_target"] = std::isnan(to_target) ? json() : json(to_target);
  return rec;
}

int run_sweep(const SweepOptions& o) {
  std::vector<Axis> axes;
  for (const std::string& g : o.grid) axes.push_back(parse_axis(g));
  if (axes.empty()) throw ConfigError("--grid: give at least one KEY=V1,V2,...");
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (axes[i].key == axes[j].key) throw ConfigError("--grid: " + axes[i].key + " appears twice");
  double n_points = 1;  // the grid's size, counted before its points are built
  for (const Axis& a : axes) n_points *= static_cast<double>(a.values.size());
  if (n_points > static_cast<double>(kMaxSweepPoints))
    throw ConfigError("--grid: " + fmt::format("{:.0f}", n_points) +
                      " points (the product of the axes' value counts), expected at most " +
                      std::to_string(kMaxSweepPoints) + " (each point is a training run)");
  const std::string out = o.out.empty() ? "runs/sweep_" + fs::path(o.config).stem().string() : o.out;
  // Every point's config is resolved before anything is trained: a bad value fails the sweep at once.
  const auto points = points_of(axes);
  std::vector<Config> configs;
  std::vector<std::string> dirs;
  for (const auto& p : points) {
    std::vector<std::string> sets = o.sets;
    for (size_t i = 0; i < axes.size(); ++i) sets.push_back(axes[i].key + "=" + p[i]);
    const std::string dir = out + "/" + point_name(axes, p);
    sets.push_back("output.dir=" + json(dir).dump());
    try {
      configs.push_back(load_config(o.config, sets));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("--grid point ") + point_name(axes, p) + ": " + e.what());
    }
    dirs.push_back(dir);
  }
  check_output_path("--out", out, {{"--config", o.config}});
  make_output_dir(out);
  require_regular_or_absent(out + "/sweep.jsonl");  // refused now, not after training every point
  const std::atomic<bool>* stop = platform::stop_on_signals();
  json all = json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string& dir = dirs[i];
    const int64_t max_steps = configs[i].integer("train.max_steps");
    int64_t step = -1;
    bool stopped = false;  // reached train.target_loss or ran out of train.max_seconds: done too
    if (const std::string saved = resume_checkpoint_path(dir); !saved.empty()) {
      const json state = load_checkpoint(saved).state;
      step = state.value("step", int64_t{0});
      stopped = state.contains("stopped");
    }
    if (step < max_steps && !stopped) {
      fmt::print(stderr, "sweep: {}/{} {}: {}\n", i + 1, points.size(), point_name(axes, points[i]).c_str(),
                   step < 0 ? "training" : ("continuing after step " + std::to_string(step)).c_str());
      TrainOptions t;
      t.console = false;
      t.stop = stop;
      t.resume = step >= 0;
      const TrainResult r = train(configs[i], t);
      if (r.status == TrainResult::Status::Interrupted) {
        fmt::print(stderr, "sweep: interrupted; run the same command again to continue\n");
        return kExitOk;
      }
      if (r.status == TrainResult::Status::NonFinite)
        throw Error("--grid point " + point_name(axes, points[i]) + ": " + r.message);
    }
    json rec = measure(dir, configs[i]);
    for (size_t a = 0; a < axes.size(); ++a) rec[axes[a].key] = json::parse(points[i][a], nullptr, false).is_discarded()
                                                                   ? json(points[i][a])
                                                                   : json::parse(points[i][a]);
    rec["dir"] = dir;
    all.push_back(rec);
  }
  std::string lines;
  for (const json& r : all) lines += r.dump() + "\n";
  write_file_atomically(out + "/sweep.jsonl", lines);
  if (o.json) {
    fmt::print("{}\n", json({{"points", all}, {"keys", [&] {
                                json k = json::array();
                                for (const Axis& a : axes) k.push_back(a.key);
                                return k;
                              }()}}).dump().c_str());
    return kExitOk;
  }
  // Time to quality columns when the points have a target: seconds to it ("-" when missed).
  const bool target = std::any_of(all.begin(), all.end(), [](const json& r) { return r.contains("seconds_to_target"); });
  const auto number = [](const json& v, const char* format) {
    return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
  };
  for (const Axis& a : axes) fmt::print("| {} ", a.key);
  fmt::print("| parameters | train FLOPs/token | KV cache bytes/token | val loss | best val | steps | training s |{} "
             "ms/step | tokens/s |\n",
             target ? " s to target |" : "");
  for (size_t a = 0; a < axes.size() + 9 + (target ? 1 : 0); ++a) fmt::print("|---");
  fmt::print("|\n");
  for (const json& r : all) {
    for (const Axis& a : axes) fmt::print("| {} ", r[a.key].dump());
    fmt::print("| {} | {:.3g} | {} | {} | {} | {}{} | {:.1f} |", r["parameters"].get<int64_t>(),
               r["train_flops_per_token"].get<double>(), r["kv_cache_bytes_per_token"].get<int64_t>(),
               number(r["val_loss"], "{:.4f}"), number(r["best_val_loss"], "{:.4f}"), r["step"].get<int64_t>(),
               r["stopped"] == "max_steps" ? "" : " (" + r["stopped"].get<std::string>() + ")",
               r["training_s"].get<double>());
    if (target) fmt::print(" {} |", number(r.value("seconds_to_target", json()), "{:.1f}"));
    fmt::print(" {:.1f} | {:.0f} |\n", r["ms_per_step"].get<double>(), r["tokens_per_s"].get<double>());
  }
  fmt::print("wrote {}/sweep.jsonl\n", out.c_str());
  run_plot_script("plot_sweep.py", {out + "/sweep.jsonl", axes[0].key}, o.no_plot);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_sweep_commands(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  auto* s = app.add_subcommand("sweep", "Train every point of a grid of config values and tabulate cost and val loss");
  s->add_option("--config", o->config, "JSON config every point starts from")->type_name("FILE")->required();
  s->add_option("--grid", o->grid,
                "A swept key and its values (repeatable: the grid is their product, at most " +
                    std::to_string(kMaxSweepPoints) + " points)")
      ->type_name("KEY=V1,V2,...")
      ->required();
  s->add_option("--set", o->sets, "Override a key for every point (repeatable)")->type_name("KEY=VALUE");
  s->add_option("--out", o->out, "Sweep directory (default: runs/sweep_<config name>)")->type_name("DIR");
  s->add_flag("--json", o->json, "The table as one JSON object");
  s->add_flag("--no-plot", o->no_plot, "Do not run scripts/plot_sweep.py");
  s->footer(
      "\nEach point trains in OUT/<key=value,...> with the same seed and data; a finished point is not\n"
      "trained again and an interrupted one continues (run the same command again), so a stopped sweep\n"
      "picks up where it was. Writes OUT/sweep.jsonl (one line per point: the grid values, parameters,\n"
      "training FLOPs per token, KV-cache bytes per token, last and best val loss, steps, training\n"
      "seconds, why it stopped, ms/step, tokens/s) and, with python3-matplotlib, OUT/sweep.png (val loss\n"
      "against the first key).\n"
      "Time to quality: with train.target_loss each point stops at its first evaluation at or below it\n"
      "and the table gains 's to target'; with train.max_seconds each point stops at that time budget\n"
      "(a point that stopped either way counts as done).\nExamples:\n"
      "  tfm sweep --config configs/shakespeare_char.json --grid model.n_heads=1,2,4,8,16,32\n"
      "  tfm sweep --config configs/shakespeare_char.json --set model.n_heads=8 --grid model.n_kv_heads=8,4,2,1\n"
      "  tfm sweep --config configs/shakespeare_speedrun.json --set train.max_seconds=120 \\\n"
      "            --grid train.optimizer.muon_lr=0.01,0.02,0.04 --grid model.dropout=0,0.1\n");
  return {{s, [o] { return run_sweep(*o); }}};
}

}  // namespace tfm::cli
