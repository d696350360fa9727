// tfm heads and --mask-heads: what each attention head is worth (docs/heads.md), measured by
// analysis/head_importance.h and printed here.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/analysis/figures.h"
#include "tfm/analysis/head_importance.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {

std::vector<Tensor> parse_head_mask(const std::string& spec, int64_t layers, int64_t heads) {
  std::vector<Tensor> gates;
  for (int64_t l = 0; l < layers; ++l) gates.push_back(Tensor::ones({heads}));
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    const size_t colon = item.find(':');
    char* rest = nullptr;
    const long l = colon == std::string::npos ? -1 : std::strtol(item.c_str(), &rest, 10);
    const bool l_ok = colon != std::string::npos && rest == item.c_str() + colon && colon > 0;
    const long h = l_ok ? std::strtol(item.c_str() + colon + 1, &rest, 10) : -1;
    if (!l_ok || rest != item.c_str() + item.size() || colon + 1 == item.size())
      throw ConfigError("--mask-heads: expected LAYER:HEAD[,LAYER:HEAD...] (0-based, e.g. 0:1,3:2), got \"" +
                        item + "\"");
    if (l < 0 || l >= layers)
      throw ConfigError("--mask-heads: layer " + std::to_string(l) + " in \"" + item +
                        "\" is out of range [0, " + std::to_string(layers) + ")");
    if (h < 0 || h >= heads)
      throw ConfigError("--mask-heads: head " + std::to_string(h) + " in \"" + item +
                        "\" is out of range [0, " + std::to_string(heads) + ")");
    gates[static_cast<size_t>(l)].data()[h] = 0.0f;
    start = end + 1;
  }
  return gates;
}

void apply_head_mask(LoadedRun& run, const std::string& spec) {
  if (spec.empty()) return;
  if (!run.model)
    throw ConfigError(
        "--mask-heads: only for causal_lm and masked_lm runs (this run's train.objective is \"" +
        run.objective->name() + "\")");
  const ModelConfig& c = run.model->config();
  run.model->set_head_gates(parse_head_mask(spec, c.n_layers, c.n_heads));
}

namespace {

struct HeadsOptions {
  std::string run, which, out;
  int64_t batches = 20;
  bool json = false, no_plot = false;
};

int run_heads(const HeadsOptions& o) {
  LoadedRun run = read_run(o.run, o.which, true);
  const std::string out = o.out.empty() ? run.dir + "/heads" : o.out;
  check_output_path("--out", out, run_inputs(run.checkpoint_path, run.config));
  const HeadImportance r = head_importance(run, o.batches);
  const nlohmann::json j = head_importance_json(r, run.dir, run.which);
  make_output_dir(out);
  const std::string report = out + "/heads.json";
  write_file_atomically(report, j.dump(1) + "\n");
  if (o.json) {
    fmt::print("{}\n", j.dump().c_str());
    return kExitOk;
  }
  fmt::print("head importance of {} ({}.ckpt) over {} validation batches; val loss {:.4f} with every head\n",
             run.dir.c_str(), run.which.c_str(), o.batches, r.val_loss);
  // |dL/dxi| as measured, and per layer over its l2 norm: the score the pruning ranks across layers.
  fmt::print("{:>6} {:>5} {:>18} {:>12} {:>11} {:>14}\n", "layer", "head", "loss if masked", "|dL/dxi|",
             "normalized", "rank in layer");
  for (int64_t l = 0; l < r.layers; ++l)
    for (int64_t h = 0; h < r.heads; ++h) {
      const std::vector<int64_t>& rank = r.ranking[l];
      const int64_t pos = std::find(rank.begin(), rank.end(), h) - rank.begin();
      fmt::print("{:6} {:5} {:+18.4f} {:12.4g} {:11.4f} {:14}\n", l, h, r.loss_change[l][h],
                 r.gradient_score[l][h], r.normalized_score[l][h], pos + 1);
    }
  fmt::print("pruning (least important first, by normalized gradient score):\n");
  for (const PruningPoint& p : r.pruning)
    fmt::print("  {:3} of {} heads masked ({:3.0f}%): val loss {:.4f} ({:+.4f})\n", p.masked,
               r.layers * r.heads,
               100.0 * static_cast<double>(p.masked) / static_cast<double>(r.layers * r.heads), p.val_loss,
               p.val_loss - r.val_loss);
  fmt::print("{} of {} heads can be masked before the val loss rises by more than {}\n",
             r.heads_masked_within_tolerance, r.layers * r.heads, kPruningTolerance);
  fmt::print("wrote {}\n", report.c_str());
  if (!o.no_plot) write_figure(out + "/heads.svg", heads_figure(j));
  return kExitOk;
}

}  // namespace

std::vector<Command> add_heads_commands(CLI::App& app) {
  auto o = std::make_shared<HeadsOptions>();
  auto* h = app.add_subcommand("heads",
                               "Each attention head's importance (Michel et al. 2019) and a pruning curve");
  h->add_option("--run", o->run, "Run directory (causal_lm or masked_lm)")->type_name("DIR")->required();
  h->add_option("--batches", o->batches, "Validation batches per measurement")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  add_checkpoint_option(h, o->which);
  h->add_option("--out", o->out, "Output directory (default: DIR/heads)")->type_name("DIR");
  h->add_flag("--json", o->json, "The report as one JSON object");
  h->add_flag("--no-plot", o->no_plot, "Do not draw OUT/heads.svg");
  h->footer(
      "\nFor each head: the validation loss change when it alone is masked, and the gradient score\n"
      "|dL/dxi| of a gate xi = 1 on its output (averaged over batches, normalized per layer, as Michel et\n"
      "al. 2019); then heads are masked least important first (10%, 20%, ... 90%). Writes OUT/heads.json\n"
      "and OUT/heads.svg.\nExamples:\n"
      "  tfm heads --run runs/shakespeare_char\n"
      "  tfm eval --run runs/shakespeare_char --mask-heads 0:1,3:2   # the loss without two heads\n");
  return {{h, [o] { return run_heads(*o); }}};
}

}  // namespace tfm::cli
