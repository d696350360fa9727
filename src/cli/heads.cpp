// tfm heads and --mask-heads: what each attention head is worth (docs/heads.md). A head's importance as
// Michel et al. 2019 ("Are Sixteen Heads Really Better than One?") measure it: the loss change when
// the head alone is masked, and the gradient score |dL/dxi_h| of a gate xi_h = 1 on its output; a
// ranking per layer and a pruning curve (validation loss as the least important heads are masked).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/objectives/objective.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/platform.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"

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
      throw ConfigError("--mask-heads: expected LAYER:HEAD[,LAYER:HEAD...] (0-based, e.g. 0:1,3:2), got \"" + item + "\"");
    if (l < 0 || l >= layers)
      throw ConfigError("--mask-heads: layer " + std::to_string(l) + " in \"" + item + "\" is out of range [0, " +
                        std::to_string(layers) + ")");
    if (h < 0 || h >= heads)
      throw ConfigError("--mask-heads: head " + std::to_string(h) + " in \"" + item + "\" is out of range [0, " +
                        std::to_string(heads) + ")");
    gates[static_cast<size_t>(l)].data()[h] = 0.0f;
    start = end + 1;
  }
  return gates;
}

void apply_head_mask(LoadedRun& run, const std::string& spec) {
  if (spec.empty()) return;
  if (!run.model)
    throw ConfigError("--mask-heads: only for causal_lm and masked_lm runs (this run's train.objective is \"" +
                      run.objective->name() + "\")");
  const ModelConfig& c = run.model->config();
  run.model->set_head_gates(parse_head_mask(spec, c.n_layers, c.n_heads));
}

namespace {

struct HeadsOptions {
  std::string run, which = "last", out;
  int64_t batches = 20;
  bool json = false, no_plot = false;
};

int run_heads(const HeadsOptions& o) {
  LoadedRun run = load_run(o.run, o.which, true);
  if (!run.model)
    throw ConfigError("heads: only for causal_lm and masked_lm runs (" + o.run + " was trained with train.objective \"" +
                      run.objective->name() + "\")");
  const std::string out = o.out.empty() ? o.run + "/heads" : o.out;
  check_output_path("--out", out, run_inputs(run.checkpoint_path, run.config));
  const Config& c = run.config;
  const GemmModeGuard gemm_mode(parse_precision(c.string("train.precision")),
                                resolve_gemm_backend(c.string("train.gemm_backend")));
  LanguageModel& model = *run.model;
  model.set_training(false);
  const int64_t L = model.config().n_layers, H = model.config().n_heads;
  const uint64_t seed = eval_seed(c);
  // The same validation batches for every measurement.
  const auto mean_loss = [&](const std::vector<Tensor>& gates) {
    NoGradGuard no_grad;
    model.set_head_gates(gates);
    double sum = 0;
    for (int64_t i = 0; i < o.batches; ++i)
      sum += run.objective->split_batch_loss("val", seed + static_cast<uint64_t>(i)).item();
    model.set_head_gates({});
    return sum / static_cast<double>(o.batches);
  };
  const auto ones = [&] {
    std::vector<Tensor> g;
    for (int64_t l = 0; l < L; ++l) g.push_back(Tensor::ones({H}));
    return g;
  };
  const double base = mean_loss({});
  // Masking each head alone.
  std::vector<std::vector<double>> delta(L, std::vector<double>(H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<Tensor> g = ones();
      g[l].data()[h] = 0.0f;
      delta[l][h] = mean_loss(g) - base;
    }
  // Gradient scores: E over batches of |dL/dxi| at xi = 1 (the parameters' gradients are not used).
  std::vector<std::vector<double>> grad(L, std::vector<double>(H, 0.0));
  {
    std::vector<Tensor> g = ones();
    for (Tensor& t : g) t.set_requires_grad(true);
    model.set_head_gates(g);
    for (int64_t i = 0; i < o.batches; ++i) {
      for (Tensor& t : g) t.zero_grad();
      run.objective->split_batch_loss("val", seed + static_cast<uint64_t>(i)).backward();
      for (int64_t l = 0; l < L; ++l) {
        const Tensor gr = g[l].grad();
        for (int64_t h = 0; h < H; ++h) grad[l][h] += std::fabs(gr.data()[h]) / static_cast<double>(o.batches);
      }
    }
    model.set_head_gates({});
  }
  // Michel et al. normalise the scores per layer (l2), then rank the heads globally.
  std::vector<std::vector<double>> score(L, std::vector<double>(H));
  std::vector<std::pair<double, int64_t>> order;  // (score, l * H + h)
  for (int64_t l = 0; l < L; ++l) {
    double norm = 0;
    for (double v : grad[l]) norm += v * v;
    norm = std::sqrt(norm);
    for (int64_t h = 0; h < H; ++h) {
      score[l][h] = norm > 0 ? grad[l][h] / norm : 0.0;
      order.push_back({score[l][h], l * H + h});
    }
  }
  std::sort(order.begin(), order.end());
  // The pruning curve: the least important 10%, 20%, ... 90% of the heads masked.
  nlohmann::json curve = nlohmann::json::array();
  int64_t can_go = 0;
  for (int pct = 0; pct <= 90; pct += 10) {
    const int64_t k = static_cast<int64_t>(std::lround(pct / 100.0 * static_cast<double>(L * H)));
    std::vector<Tensor> g = ones();
    for (int64_t i = 0; i < k; ++i) g[order[i].second / H].data()[order[i].second % H] = 0.0f;
    const double loss = pct == 0 ? base : mean_loss(g);
    if (loss - base <= 0.05) can_go = std::max(can_go, k);
    curve.push_back({{"percent", pct}, {"masked", k}, {"val_loss", loss}});
  }
  nlohmann::json j = {{"run", o.run}, {"checkpoint", o.which}, {"batches", o.batches}, {"layers", L}, {"heads", H},
                      {"val_loss", base}, {"pruning", curve}, {"heads_masked_within_0.05", can_go}};
  for (int64_t l = 0; l < L; ++l) {
    std::vector<int64_t> rank(H);
    std::iota(rank.begin(), rank.end(), 0);
    std::sort(rank.begin(), rank.end(), [&](int64_t a, int64_t b) { return score[l][a] > score[l][b]; });
    j["layer"].push_back({{"loss_change_when_masked", delta[l]}, {"gradient_score", grad[l]},
                          {"normalized_score", score[l]}, {"ranking", rank}});
  }
  make_output_dir(out);
  const std::string report = out + "/heads.json";
  write_file_atomically(report, j.dump(1) + "\n");
  if (o.json) {
    fmt::print("{}\n", j.dump().c_str());
    return kExitOk;
  }
  fmt::print("head importance of {} ({}.ckpt) over {} validation batches; val loss {:.4f} with every head\n",
              o.run.c_str(), o.which.c_str(), o.batches, base);
  fmt::print("{:>6} {:>5} {:>18} {:>15} {:>12}\n", "layer", "head", "loss if masked", "|dL/dxi|", "rank in layer");
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      const auto& r = j["layer"][l]["ranking"];
      const int64_t pos = std::find(r.begin(), r.end(), h) - r.begin();
      fmt::print("{:6} {:5} {:+18.4f} {:15.4g} {:12}\n", l, h, delta[l][h],
                  grad[l][h], pos + 1);
    }
  fmt::print("pruning (least important first, by normalized gradient score):\n");
  for (const auto& p : curve)
    fmt::print("  {:3}% ({:2} heads masked): val loss {:.4f} ({:+.4f})\n", p["percent"].get<int>(),
                p["masked"].get<int64_t>(), p["val_loss"].get<double>(),
                p["val_loss"].get<double>() - base);
  fmt::print("{} of {} heads can be masked before the val loss rises by more than 0.05\n",
              can_go, L * H);
  fmt::print("wrote {}\n", report.c_str());
  run_plot_script("plot_heads.py", {report}, o.no_plot);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_heads_commands(CLI::App& app) {
  auto o = std::make_shared<HeadsOptions>();
  auto* h = app.add_subcommand("heads", "Each attention head's importance (Michel et al. 2019) and a pruning curve");
  h->add_option("--run", o->run, "Run directory (causal_lm or masked_lm)")->type_name("DIR")->required();
  h->add_option("--batches", o->batches, "Validation batches per measurement")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  h->add_option("--checkpoint", o->which, "last or best")->capture_default_str()->check(checkpoint_name());
  h->add_option("--out", o->out, "Output directory (default: DIR/heads)")->type_name("DIR");
  h->add_flag("--json", o->json, "The report as one JSON object");
  h->add_flag("--no-plot", o->no_plot, "Do not run scripts/plot_heads.py");
  h->footer(
      "\nFor each head: the validation loss change when it alone is masked, and the gradient score\n"
      "|dL/dxi| of a gate xi = 1 on its output (averaged over batches, normalized per layer, as Michel et\n"
      "al. 2019); then heads are masked least important first (10%, 20%, ... 90%). Writes OUT/heads.json\n"
      "and, with python3-matplotlib, OUT/heads.png.\nExamples:\n"
      "  tfm heads --run runs/shakespeare_char\n"
      "  tfm eval --run runs/shakespeare_char --mask-heads 0:1,3:2   # the loss without two heads\n");
  return {{h, [o] { return run_heads(*o); }}};
}

}  // namespace tfm::cli
