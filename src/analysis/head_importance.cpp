#include "tfm/analysis/head_importance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/tensor.h"
#include "tfm/training/trainer.h"

namespace tfm {

HeadImportance head_importance(LoadedRun& run, int64_t batches) {
  if (!run.objective->capabilities().language_model())
    throw ConfigError("heads: only for causal_lm and masked_lm runs (" + run.dir +
                      " was trained with train.objective \"" + run.objective->name() + "\")");
  TFM_CHECK(run.model != nullptr && batches >= 1, "head_importance", "a language model and batches >= 1");
  const Config& c = run.config;
  const GemmBackend backend = resolve_gemm_backend(c.train().gemm_backend);
  const GemmModeGuard gemm_mode(resolve_precision(c.train().precision, backend).precision, backend);
  LanguageModel& model = *run.model;
  model.set_training(false);
  const int64_t L = model.config().n_layers, H = model.config().n_heads;
  const uint64_t seed = eval_seed(c);
  // The same validation batches for every measurement.
  const auto mean_loss = [&](const std::vector<Tensor>& gates) {
    NoGradGuard no_grad;
    model.set_head_gates(gates);
    double sum = 0;
    for (int64_t i = 0; i < batches; ++i)
      sum += run.objective->split_batch_loss("val", seed + static_cast<uint64_t>(i)).item();
    model.set_head_gates({});
    return sum / static_cast<double>(batches);
  };
  const auto ones = [&] {
    std::vector<Tensor> g;
    for (int64_t l = 0; l < L; ++l) g.push_back(Tensor::ones({H}));
    return g;
  };
  HeadImportance r;
  r.layers = L, r.heads = H, r.batches = batches;
  r.val_loss = mean_loss({});
  // Masking each head alone.
  r.loss_change.assign(L, std::vector<double>(H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<Tensor> g = ones();
      g[l].data()[h] = 0.0f;
      r.loss_change[l][h] = mean_loss(g) - r.val_loss;
    }
  // Gradient scores: E over batches of |dL/dxi| at xi = 1 (the parameters' gradients are not used).
  r.gradient_score.assign(L, std::vector<double>(H, 0.0));
  {
    std::vector<Tensor> g = ones();
    for (Tensor& t : g) t.set_requires_grad(true);
    model.set_head_gates(g);
    for (int64_t i = 0; i < batches; ++i) {
      for (Tensor& t : g) t.zero_grad();
      run.objective->split_batch_loss("val", seed + static_cast<uint64_t>(i)).backward();
      for (int64_t l = 0; l < L; ++l) {
        const Tensor gr = g[l].grad();
        for (int64_t h = 0; h < H; ++h)
          r.gradient_score[l][h] += std::fabs(gr.data()[h]) / static_cast<double>(batches);
      }
    }
    model.set_head_gates({});
  }
  // Michel et al. normalise the scores per layer (l2), then rank the heads globally.
  r.normalized_score.assign(L, std::vector<double>(H));
  std::vector<std::pair<double, int64_t>> order;  // (score, l * H + h)
  for (int64_t l = 0; l < L; ++l) {
    double norm = 0;
    for (double v : r.gradient_score[l]) norm += v * v;
    norm = std::sqrt(norm);
    for (int64_t h = 0; h < H; ++h) {
      r.normalized_score[l][h] = norm > 0 ? r.gradient_score[l][h] / norm : 0.0;
      order.push_back({r.normalized_score[l][h], l * H + h});
    }
  }
  std::sort(order.begin(), order.end());
  // The pruning curve: the least important 10%, 20%, ... 90% of the heads masked; a share that rounds to
  // the count of the one before (under 10 heads) is not measured twice.
  for (int pct = 0; pct <= 90; pct += 10) {
    const int64_t k = static_cast<int64_t>(std::lround(pct / 100.0 * static_cast<double>(L * H)));
    if (!r.pruning.empty() && r.pruning.back().masked == k) continue;
    std::vector<Tensor> g = ones();
    std::vector<std::pair<int64_t, int64_t>> masked;  // (layer, head), in `tfm eval --mask-heads` order
    for (int64_t i = 0; i < k; ++i) {
      g[order[i].second / H].data()[order[i].second % H] = 0.0f;
      masked.emplace_back(order[i].second / H, order[i].second % H);
    }
    std::sort(masked.begin(), masked.end());
    std::string spec;
    for (const auto& [l, h] : masked)
      spec += (spec.empty() ? "" : ",") + std::to_string(l) + ":" + std::to_string(h);
    const double loss = pct == 0 ? r.val_loss : mean_loss(g);
    if (loss - r.val_loss <= kPruningTolerance)
      r.heads_masked_within_tolerance = std::max(r.heads_masked_within_tolerance, k);
    r.pruning.push_back({pct, k, loss, spec});
  }
  for (int64_t l = 0; l < L; ++l) {
    std::vector<int64_t> rank(H);
    std::iota(rank.begin(), rank.end(), 0);
    const std::vector<double>& score = r.normalized_score[l];
    std::sort(rank.begin(), rank.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    r.ranking.push_back(rank);
  }
  return r;
}

nlohmann::json head_importance_json(const HeadImportance& r, const std::string& run_dir,
                                    const std::string& checkpoint) {
  nlohmann::json curve = nlohmann::json::array();
  for (const PruningPoint& p : r.pruning)
    curve.push_back({{"percent", p.percent},
                     {"masked", p.masked},
                     {"val_loss", p.val_loss},
                     {"mask_heads", p.mask_heads}});
  // "layers" holds one object per layer, each naming its "layer", as attention.json's does.
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < r.layers; ++l)
    layers.push_back({{"layer", l},
                      {"loss_change_when_masked", r.loss_change[l]},
                      {"gradient_score", r.gradient_score[l]},
                      {"normalized_score", r.normalized_score[l]},
                      {"ranking", r.ranking[l]}});
  return {{"run", run_dir},
          {"checkpoint", checkpoint},
          {"batches", r.batches},
          {"n_layers", r.layers},
          {"n_heads", r.heads},
          {"val_loss", r.val_loss},
          {"layers", layers},
          {"pruning", curve},
          {"heads_masked_within_0.05", r.heads_masked_within_tolerance}};
}

}  // namespace tfm
