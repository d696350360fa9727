#include "tfm/analysis/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/nn/model_config.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every combination of the axes' values, the first axis slowest.
std::vector<std::vector<std::string>> points_of(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<std::string>> points = {{}};
  for (const SweepAxis& a : axes) {
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
std::string point_name(const std::vector<SweepAxis>& axes, const std::vector<std::string>& values) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + axes[i].key + "=" + values[i];
  for (char& c : s)
    if (c == '/' || c == '"' || c == '\'' || c == ' ') c = '_';
  return s;
}

}  // namespace

SweepAxis parse_sweep_axis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw ConfigError("--grid: expected KEY=V1,V2,... (e.g. model.n_heads=1,2,4), got \"" + spec + "\"");
  SweepAxis a{spec.substr(0, eq), {}};
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

namespace {

// What a point's metrics.jsonl says: the last and best val loss, the training time, the first time to
// train.target_loss, and the median interval's speed. Nothing of it when the file is missing (a point
// that diverged before its first log line).
struct PointLog {
  double val = NAN, best = NAN, training_s = 0, to_target = NAN;
  std::pair<double, double> speed{0.0, 0.0};  // (ms_per_step, tokens_per_s) of one record
};

PointLog read_point_log(const std::string& dir) {
  PointLog log;
  const std::string path = dir + "/" + kMetricsFile;
  if (!fs::exists(path)) return log;
  // Through read_file: a FIFO or device under the name is refused, not waited on.
  std::istringstream in(read_file(path, uint64_t{1} << 30));
  std::string line;
  std::vector<std::pair<double, double>> speed;
  while (std::getline(in, line)) {
    const json r = json::parse(line, nullptr, false);
    if (r.is_discarded()) continue;
    if (r.contains("ms_per_step") && r.contains("tokens_per_s"))
      speed.emplace_back(r["ms_per_step"].get<double>(), r["tokens_per_s"].get<double>());
    if (r.contains("training_s")) log.training_s = r["training_s"].get<double>();
    if (r.contains("seconds_to_target") && std::isnan(log.to_target))
      log.to_target = r["seconds_to_target"].get<double>();
    if (r.contains("val_loss")) {
      log.val = r["val_loss"].get<double>();
      if (!(log.best <= log.val)) log.best = log.val;
    }
  }
  // The median record by ms/step, its tokens/s with it (medians taken column by column paired one
  // record's ms/step with another's tokens/s); of two, the faster: the first interval holds the warm-up.
  if (!speed.empty()) {
    const auto mid = speed.begin() + static_cast<std::ptrdiff_t>((speed.size() - 1) / 2);
    std::nth_element(speed.begin(), mid, speed.end());
    log.speed = *mid;
  }
  return log;
}

// K and V of every layer that keeps a KV cache (the decoder's), float32.
int64_t kv_cache_bytes_per_token(const Config& config) {
  const ModelConfig m = resolved(config.model(0));
  const bool encoder_decoder = objective_capabilities(config.train().objective).encoder_decoder();
  const int64_t layers = encoder_decoder ? m.n_decoder_layers : m.n_layers;
  return 2 * layers * m.n_kv_heads * m.head_dim() * 4;
}

// A point that stopped on a NaN/Inf, from what its diverged.json holds (the step it stopped at and
// why) and the figures it logged before; no val loss.
json diverged_sweep_point(const std::string& dir, const Config& config, const json& failure) {
  const PointLog log = read_point_log(dir);
  json rec;
  rec["kv_cache_bytes_per_token"] = kv_cache_bytes_per_token(config);
  rec["val_loss"] = json();
  rec["best_val_loss"] = std::isnan(log.best) ? json() : json(log.best);  // before it diverged
  const bool timed = log.speed.first > 0;  // it logged an interval before it diverged
  rec["ms_per_step"] = timed ? json(log.speed.first) : json();
  rec["tokens_per_s"] = timed ? json(log.speed.second) : json();
  rec["step"] = failure.at("step");
  rec["training_s"] = log.training_s;
  rec["stopped"] = "diverged";
  rec["failed_at_step"] = failure.at("failed_at_step");
  rec["error"] = failure.at("error");
  return rec;
}

}  // namespace

std::string sweep_value_label(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return fmt::format("{}", value.get<double>());
  return value.dump();
}

json measure_sweep_point(const std::string& dir, const Config& config) {
  const PointLog log = read_point_log(dir);
  LoadedRun run = load_run(dir, "last");
  const Model& model = run.objective->model();
  json rec;
  rec["parameters"] = model.parameter_count();
  rec["train_flops_per_token"] = run.objective->train_flops_per_token();
  rec["kv_cache_bytes_per_token"] = kv_cache_bytes_per_token(config);
  rec["val_loss"] = log.val;
  rec["best_val_loss"] = log.best;
  rec["ms_per_step"] = log.speed.first;
  rec["tokens_per_s"] = log.speed.second;
  const CheckpointState& state = run.checkpoint.state;
  rec["step"] = state.step;
  rec["training_s"] = log.training_s;
  rec["stopped"] = !state.stopped.empty()                   ? state.stopped
                   : state.step == config.train().max_steps ? "max_steps"
                                                            : "interrupted";
  // Time to quality (train.target_loss): seconds to the first evaluation at or below it, null if missed.
  if (config.train().target_loss > 0)
    rec["seconds_to_target"] = std::isnan(log.to_target) ? json() : json(log.to_target);
  return rec;
}

SweepResult run_sweep(const SweepSpec& spec, const std::atomic<bool>* stop, const SweepProgress& progress) {
  const std::vector<SweepAxis>& axes = spec.axes;
  if (axes.empty()) throw ConfigError("--grid: give at least one KEY=V1,V2,...");
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (axes[i].key == axes[j].key) throw ConfigError("--grid: " + axes[i].key + " appears twice");
  double n_points = 1;  // the grid's size, counted before its points are built
  for (const SweepAxis& a : axes) n_points *= static_cast<double>(a.values.size());
  if (n_points > static_cast<double>(kMaxSweepPoints))
    throw ConfigError("--grid: " + fmt::format("{:.0f}", n_points) +
                      " points (the product of the axes' value counts), expected at most " +
                      std::to_string(kMaxSweepPoints) + " (each point is a training run)");
  SweepResult result;
  // By default named for the config and the swept keys' last names (runs/sweep_shakespeare_char_n_heads),
  // so that sweeps of one config over other keys keep their own sweep.jsonl and figure.
  result.out = spec.out;
  if (result.out.empty()) {
    result.out = "runs/sweep_" + fs::path(spec.config).stem().string();
    for (const SweepAxis& a : axes) result.out += "_" + a.key.substr(a.key.rfind('.') + 1);
  }
  const std::string& out = result.out;
  // Every point's config is resolved before anything is trained: a bad value fails the sweep at once.
  const auto points = points_of(axes);
  std::vector<Config> configs;
  std::vector<std::string> dirs;
  for (const auto& p : points) {
    std::vector<std::string> sets = spec.sets;
    for (size_t i = 0; i < axes.size(); ++i) sets.push_back(axes[i].key + "=" + p[i]);
    const std::string dir = out + "/" + point_name(axes, p);
    sets.push_back("output.dir=" + json(dir).dump());
    try {
      configs.push_back(load_config(spec.config, sets));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("--grid point ") + point_name(axes, p) + ": " + e.what());
    }
    dirs.push_back(dir);
  }
  check_output_path("--out", out, {{"--config", spec.config}});
  make_output_dir(out);
  require_regular_or_absent(out + "/sweep.jsonl");  // refused now, not after training every point
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string& dir = dirs[i];
    const std::string point = "--grid point " + point_name(axes, points[i]) + ": ";
    const int64_t max_steps = configs[i].train().max_steps;
    const std::string advice = "; the sweep in " + out +
                               " continues the points it trained: give another --out, or delete " + dir +
                               " to train this point anew";
    // A point that diverged before, with this very config, is taken as it failed: it would fail the
    // same way again.
    const std::string diverged_path = dir + "/" + kDivergedPointFile;
    json failure;
    if (fs::exists(diverged_path)) {
      const json f = read_json_file(diverged_path);
      const bool complete = f.is_object() && f.contains("config") && f["config"].is_object() &&
                            f.contains("step") && f.contains("failed_at_step") && f.contains("error");
      if (!complete) throw ConfigError(point + diverged_path + ": not what tfm sweep writes there" + advice);
      Config failed_with;
      failed_with.tree = f["config"];
      if (failed_with.tree == configs[i].tree) {
        failure = f;
      } else {
        // Other settings: a checkpoint is continued from below, under the rules of every point; a point
        // that saved none has nothing to continue, so it trains anew when a resume could have taken
        // the new settings.
        if (resume_checkpoint_path(dir).empty()) {
          try {
            check_resumable(failed_with, configs[i], diverged_path);
          } catch (const ConfigError& e) {
            throw ConfigError(point + e.what() + advice);
          }
          std::error_code ignored;  // what is left makes training refuse the directory, by name
          for (const std::string& name : run_files_in(dir)) fs::remove(dir + "/" + name, ignored);
        }
        std::error_code ignored;
        fs::remove(diverged_path, ignored);
      }
    }
    int64_t step = -1;
    bool stopped = false;  // reached train.target_loss or ran out of train.max_seconds: done too
    if (const std::string saved = resume_checkpoint_path(dir); failure.is_null() && !saved.empty()) {
      // A point trained before is continued, or its results taken, only when it was trained as this
      // sweep's point is asked to be: its results would otherwise be another config's.
      const Checkpoint ckpt = load_checkpoint(saved);
      step = ckpt.state.step;
      stopped = !ckpt.state.stopped.empty();
      try {
        check_resumable(checkpoint_config(ckpt, saved), configs[i], saved);
      } catch (const ConfigError& e) {
        throw ConfigError(point + e.what() + advice);
      }
      if (step > max_steps)
        throw ConfigError(point + saved + " was trained to step " + std::to_string(step) +
                          ", past this sweep's train.max_steps " + std::to_string(max_steps) + advice);
    }
    if (failure.is_null() && step < max_steps && !stopped) {
      if (progress)
        progress(i, points.size(), point_name(axes, points[i]),
                 step < 0 ? "training" : "continuing after step " + std::to_string(step));
      TrainOptions t;
      t.console = false;
      t.stop = stop;
      t.resume = step >= 0;
      TrainResult r;
      // What training refuses (the memory check of a point's sizes, its data) names the point.
      try {
        r = train(configs[i], t);
      } catch (const ConfigError& e) {
        throw ConfigError(point + e.what());
      } catch (const IoError& e) {
        throw IoError(point + e.what());
      }
      if (r.status == TrainResult::Status::Interrupted) {
        result.interrupted = true;
        return result;
      }
      // A diverging point is a result of the sweep, not its end: recorded, and the others go on.
      if (r.status == TrainResult::Status::NonFinite) {
        failure = {{"step", r.step},
                   {"failed_at_step", r.step + 1},
                   {"error", r.nonfinite},
                   {"config", configs[i].tree}};
        write_file_atomically(diverged_path, failure.dump(1) + "\n");
        if (progress)
          progress(
              i, points.size(), point_name(axes, points[i]),
              "diverged at step " + std::to_string(r.step + 1) + ": " + r.nonfinite + "; the sweep goes on");
      }
    }
    json rec = failure.is_null() ? measure_sweep_point(dir, configs[i])
                                 : diverged_sweep_point(dir, configs[i], failure);
    for (size_t a = 0; a < axes.size(); ++a) {
      const json value = json::parse(points[i][a], nullptr, false);
      rec[axes[a].key] = value.is_discarded() ? json(points[i][a]) : value;
    }
    rec["dir"] = dir;
    result.diverged += !failure.is_null();
    result.points.push_back(rec);
  }
  std::string lines;
  for (const json& r : result.points) lines += r.dump() + "\n";
  write_file_atomically(out + "/sweep.jsonl", lines);
  return result;
}

}  // namespace tfm
