// A sweep: every point of a grid of config values trained with the same seed and data, one run
// directory each, resumable, and what each point costs and reaches (docs/heads.md: heads against
// width, MHA/GQA/MQA, ...). tfm sweep prints its table.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"

namespace tfm {

// Points a grid may have: far more training runs than a sweep is worth, far fewer than would exhaust
// memory holding their configs.
constexpr int64_t kMaxSweepPoints = 10000;

// One swept key and its values as written (JSON values: strings quoted or bare words).
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};
// "model.n_heads=1,2,4" -> {model.n_heads, [1, 2, 4]}; ConfigError naming --grid unless the key exists
// and every value is non-empty.
SweepAxis parse_sweep_axis(const std::string& spec);
// A grid value as the table and the figure show it: a string as it is, a number in its shortest form
// (1e6 as "1000000", not JSON's "1000000.0").
std::string sweep_value_label(const nlohmann::json& value);

struct SweepSpec {
  std::string config;             // the JSON config every point starts from
  std::vector<SweepAxis> axes;    // the grid is their product, the first axis slowest
  std::vector<std::string> sets;  // KEY=VALUE overrides for every point
  std::string out;  // the sweep directory; "" = runs/sweep_<config's stem>_<each swept key's last name>
};

// What a point that stopped on a NaN/Inf leaves in its directory: the step, what went non-finite and
// the config it trained with, so that the sweep run again takes the point as failed, not trains it anew.
constexpr const char* kDivergedPointFile = "diverged.json";

struct SweepResult {
  std::string out;           // the sweep directory
  bool interrupted = false;  // a stop request ended a point's training: no sweep.jsonl, resumable
  size_t diverged = 0;       // points that stopped on a NaN/Inf (recorded as such; the others trained)
  // One object per point, as OUT/sweep.jsonl's lines: the grid values under their keys, "dir", and
  // measure_sweep_point's figures.
  std::vector<nlohmann::json> points;
};

// Before each point that trains, and after one that diverged: its index (0-based), the number of points,
// its name and what happens ("training", "continuing after step 40", "diverged at step 2: the gradient
// of emb.weight is not finite ...; the sweep goes on").
using SweepProgress =
    std::function<void(size_t index, size_t points, const std::string& point, const std::string& what)>;

// Resolves every point's config first (a bad value fails the sweep before anything trains; the same
// for an output the guard refuses), then trains each point in OUT/<key=value,...> that has not
// finished (reached train.max_steps, or stopped at train.target_loss / train.max_seconds), continuing
// an interrupted one, and writes OUT/sweep.jsonl. `stop` (SIGINT/SIGTERM) interrupts a point's
// training. A point that goes non-finite is a result, not an error: its record has "stopped":
// "diverged", "failed_at_step" (the step that went non-finite), "error" (what did), "step" (the steps
// completed), best_val_loss before it and a null val_loss, no parameters or FLOPs; the next points
// train on. It leaves OUT/<point>/diverged.json (kDivergedPointFile), so that a sweep run again with
// the same config takes it as failed; with another, it trains on from its checkpoint under the rules
// of any point, or, having saved none, trains anew (its logs replaced) when only keys a resume may change
// differ. What training refuses (ConfigError, IoError) names the point.
SweepResult run_sweep(const SweepSpec& spec, const std::atomic<bool>* stop = nullptr,
                      const SweepProgress& progress = {});

// What a finished point in `dir` trained with `config` cost and reached: parameters,
// train_flops_per_token, kv_cache_bytes_per_token (float32 K and V of every decoder layer), val_loss and
// best_val_loss (NaN when never evaluated), the median ms_per_step and tokens_per_s of its log, step,
// training_s, why it stopped ("max_steps", "interrupted", or the checkpoint's reason) and, with
// train.target_loss, seconds_to_target (null when missed).
nlohmann::json measure_sweep_point(const std::string& dir, const Config& config);

}  // namespace tfm
