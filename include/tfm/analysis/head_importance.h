// What each attention head of a trained language-model run is worth (docs/heads.md), as Michel et al.
// 2019 ("Are Sixteen Heads Really Better than One?") measure it: the validation loss change when the
// head alone is masked, and the gradient score |dL/dxi_h| of a gate xi_h = 1 on its output; a ranking
// per layer and a pruning curve (the validation loss as the least important heads are masked).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/training/run_dir.h"

namespace tfm {

// A pruning curve's point: the `masked` least important heads (percent of all) masked.
struct PruningPoint {
  int percent = 0;
  int64_t masked = 0;
  double val_loss = 0.0;
  std::string mask_heads;  // which, as `tfm eval --mask-heads` takes them ("0:1,2:3"; "" for none)
};

// Per layer l and head h ([l][h]) over the same validation batches.
struct HeadImportance {
  int64_t layers = 0, heads = 0, batches = 0;
  double val_loss = 0.0;                            // every head on
  std::vector<std::vector<double>> loss_change;     // val loss with head h of layer l masked, minus val_loss
  std::vector<std::vector<double>> gradient_score;  // E over batches of |dL/dxi| at xi = 1
  std::vector<std::vector<double>> normalized_score;  // gradient_score / its layer's l2 norm
  std::vector<std::vector<int64_t>> ranking;          // each layer's heads, most important first
  std::vector<PruningPoint> pruning;                  // 0%, 10%, ... 90% masked, by normalized score
  // The most heads the pruning curve masks before the val loss rises by more than kPruningTolerance.
  int64_t heads_masked_within_tolerance = 0;
};
constexpr double kPruningTolerance = 0.05;

// Measures every head of `run` (loaded with its data; a LanguageModel: ConfigError naming run.dir and
// its objective otherwise) over `batches` validation batches drawn from the run's evaluation seed, in
// the run's train.precision and train.gemm_backend. The model is left in eval mode, ungated.
HeadImportance head_importance(LoadedRun& run, int64_t batches);

// The report tfm heads writes (DIR/heads/heads.json): {"run", "checkpoint", "batches", "n_layers",
// "n_heads", "val_loss", "layers": [{"layer", "loss_change_when_masked", "gradient_score",
// "normalized_score", "ranking"}], "pruning": [{"percent", "masked", "val_loss", "mask_heads"}],
// "heads_masked_within_0.05"}.
nlohmann::json head_importance_json(const HeadImportance& importance, const std::string& run_dir,
                                    const std::string& checkpoint);

}  // namespace tfm
