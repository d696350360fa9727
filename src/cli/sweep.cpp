// tfm sweep: trains every point of a grid of config values (analysis/sweep.h) and tabulates what each
// point costs and reaches.
#include "tfm/analysis/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/analysis/figures.h"
#include "tfm/engine/platform.h"

namespace tfm::cli {
namespace {

using nlohmann::json;

struct SweepOptions {
  std::string config, out;
  std::vector<std::string> grid, sets;
  bool json = false, no_plot = false;
};

int run_sweep_command(const SweepOptions& o) {
  SweepSpec spec;
  spec.config = o.config;
  spec.sets = o.sets;
  spec.out = o.out;
  for (const std::string& g : o.grid) spec.axes.push_back(parse_sweep_axis(g));
  const auto progress = [](size_t i, size_t n, const std::string& point, const std::string& what) {
    fmt::print(stderr, "sweep: {}/{} {}: {}\n", i + 1, n, point.c_str(), what.c_str());
  };
  const SweepResult result = run_sweep(spec, platform::stop_on_signals(), progress);
  if (result.interrupted) {
    fmt::print(stderr, "sweep: interrupted; run the same command again to continue\n");
    return kExitOk;
  }
  const std::vector<SweepAxis>& axes = spec.axes;
  const std::vector<json>& all = result.points;
  if (o.json) {
    fmt::print("{}\n", json({{"points", all},
                             {"keys",
                              [&] {
                                json k = json::array();
                                for (const SweepAxis& a : axes) k.push_back(a.key);
                                return k;
                              }()}})
                           .dump()
                           .c_str());
    return result.diverged > 0 ? kExitDiverged : kExitOk;
  }
  // Time to quality columns when the points have a target: seconds to it ("-" when missed).
  const bool target =
      std::any_of(all.begin(), all.end(), [](const json& r) { return r.contains("seconds_to_target"); });
  const auto number = [](const json& v, const char* format) {
    return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
  };
  for (const SweepAxis& a : axes) fmt::print("| {} ", a.key);
  fmt::print(
      "| parameters | train FLOPs/token | KV cache bytes/token | val loss | best val | steps | training s "
      "|{} "
      "ms/step | tokens/s |\n",
      target ? " s to target |" : "");
  for (size_t a = 0; a < axes.size() + 9 + (target ? 1 : 0); ++a) fmt::print("|---");
  fmt::print("|\n");
  // A point that diverged has no val loss, parameters or speed to show: "-", and why after the table.
  for (const json& r : all) {
    for (const SweepAxis& a : axes) fmt::print("| {} ", sweep_value_label(r[a.key]));
    const std::string stopped = r["stopped"].get<std::string>();
    const std::string why = stopped == "max_steps" ? ""
                            : stopped == "diverged"
                                ? fmt::format(" (diverged at step {})", r["failed_at_step"].get<int64_t>())
                                : " (" + stopped + ")";
    fmt::print("| {} | {} | {} | {} | {} | {}{} | {:.1f} |", number(r.value("parameters", json()), "{:.0f}"),
               number(r.value("train_flops_per_token", json()), "{:.3g}"),
               r["kv_cache_bytes_per_token"].get<int64_t>(), number(r["val_loss"], "{:.4f}"),
               number(r["best_val_loss"], "{:.4f}"), r["step"].get<int64_t>(), why.c_str(),
               r["training_s"].get<double>());
    if (target) fmt::print(" {} |", number(r.value("seconds_to_target", json()), "{:.1f}"));
    fmt::print(" {} | {} |\n", number(r["ms_per_step"], "{:.1f}"), number(r["tokens_per_s"], "{:.0f}"));
  }
  for (const json& r : all)
    if (r["stopped"] == "diverged")
      fmt::print("diverged: {} at step {}: {}\n", r["dir"].get<std::string>().c_str(),
                 r["failed_at_step"].get<int64_t>(), r["error"].get<std::string>().c_str());
  fmt::print("wrote {}/sweep.jsonl\n", result.out.c_str());
  if (!o.no_plot)
    write_figure(result.out + "/sweep.svg",
                 sweep_figure(all, axes[0].key, std::filesystem::path(result.out).filename().string()));
  if (result.diverged > 0)
    fmt::print(stderr, "sweep: {} of {} points diverged (a NaN/Inf): exit status {}\n", result.diverged,
               all.size(), kExitDiverged);
  return result.diverged > 0 ? kExitDiverged : kExitOk;
}

}  // namespace

std::vector<Command> add_sweep_commands(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  auto* s = app.add_subcommand("sweep",
                               "Train every point of a grid of config values and tabulate cost and val loss");
  s->add_option("--config", o->config, "JSON config every point starts from")->type_name("FILE")->required();
  s->add_option("--grid", o->grid,
                "A swept key and its values (repeatable: the grid is their product, at most " +
                    std::to_string(kMaxSweepPoints) + " points)")
      ->type_name("KEY=V1,V2,...")
      ->required();
  s->add_option("--set", o->sets, "Override a key for every point (repeatable)")->type_name("KEY=VALUE");
  s->add_option(
       "--out", o->out,
       "Sweep directory (default: runs/sweep_<config name>_<swept keys>, as runs/sweep_tiny_n_heads)")
      ->type_name("DIR");
  s->add_flag("--json", o->json, "The table as one JSON object");
  s->add_flag("--no-plot", o->no_plot, "Do not draw OUT/sweep.svg");
  s->footer(
      "\nEach point trains in OUT/<key=value,...> with the same seed and data; a finished point is not\n"
      "trained again and an interrupted one continues (run the same command again), so a stopped sweep\n"
      "picks up where it was. Writes OUT/sweep.jsonl (one line per point: the grid values, parameters,\n"
      "training FLOPs per token, KV-cache bytes per token, last and best val loss, steps, training\n"
      "seconds, why it stopped, ms/step, tokens/s) and OUT/sweep.svg (val loss and ms/step\n"
      "against the first key).\n"
      "Time to quality: with train.target_loss each point stops at its first evaluation at or below it\n"
      "and the table gains 's to target'; with train.max_seconds each point stops at that time budget\n"
      "(a point that stopped either way counts as done).\n"
      "A point whose training goes NaN/Inf (a learning rate too high, say) is a result: recorded as\n"
      "diverged (the step and what went non-finite) in sweep.jsonl, the table and the figure, and the\n"
      "other points train on; run again, it is not retrained. Exit status 3 when a point diverged\n"
      "(everything written), 0 when none did, 2 for a bad grid or a point's config refused by name.\n"
      "Examples:\n"
      "  tfm sweep --config configs/shakespeare_char.json --set model.n_kv_heads=null \\\n"
      "            --grid model.n_heads=1,2,4,8,16,32   # n_kv_heads (the config's 4) follows n_heads\n"
      "  tfm sweep --config configs/shakespeare_char.json --set model.n_heads=8 --grid "
      "model.n_kv_heads=8,4,2,1\n"
      "  tfm sweep --config configs/shakespeare_speedrun.json --set train.max_seconds=120 \\\n"
      "            --grid train.optimizer.muon_lr=0.01,0.02,0.04 --grid model.dropout=0,0.1\n");
  return {{s, [o] { return run_sweep_command(*o); }}};
}

}  // namespace tfm::cli
