// head_importance (analysis/head_importance.h) on a tiny trained run, against the composed forms: a
// head masked by its gate equals the same head's columns of Wo zeroed, and the gradient score equals
// central differences of the loss in the gate.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/analysis/head_importance.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"
#include "tiny_runs.h"
#include "train_options.h"

using namespace tfm;

namespace {

// The mean val loss over the batches head_importance draws (seeds eval_seed + i), without a graph.
double mean_val_loss(LoadedRun& run, int64_t batches) {
  NoGradGuard no_grad;
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i)
    sum += run.objective->split_batch_loss("val", eval_seed(run.config) + static_cast<uint64_t>(i)).item();
  return sum / static_cast<double>(batches);
}

}  // namespace

TEST_CASE("head_importance: masking a head is zeroing its slice of Wo, scores are |dL/dxi|",
          "[analysis][heads]") {
  const std::string dir = tfm_test::scratch_path("head_importance", "run");
  const Config config =
      load_config(std::string(TFM_SOURCE_DIR) + "/configs/tiny.json",
                  {"model.d_model=16", "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=16",
                   "train.seq_len=16", "train.max_steps=20", "output.dir=\"" + dir + "\""});
  REQUIRE(train(config, tfm_test::quiet()).status == TrainResult::Status::Finished);
  const int64_t batches = 2;
  LoadedRun run = load_run(dir, "last", true);
  const HeadImportance r = head_importance(run, batches);
  const int64_t L = 2, H = 4, C = 16, Dk = C / H;
  REQUIRE(r.layers == L);
  REQUIRE(r.heads == H);
  CHECK(r.val_loss == Approx(mean_val_loss(run, batches)).epsilon(1e-6));

  LanguageModel& model = *run.model;
  REQUIRE_FALSE(model.training());
  const std::vector<float> values = model.flat_values().to_vector();
  for (int64_t l = 0; l < L; ++l) {
    REQUIRE(r.loss_change[l].size() == static_cast<size_t>(H));
    const NamedParameter* wo =
        model.find_parameter("blocks." + std::to_string(l) + ".attn.wo.weight");  // (C, C)
    REQUIRE(wo != nullptr);
    for (int64_t h = 0; h < H; ++h) {
      float* w = model.flat_values().data() + wo->offset;
      for (int64_t row = 0; row < C; ++row) std::fill(w + row * C + h * Dk, w + row * C + (h + 1) * Dk, 0.0f);
      INFO("layer " << l << " head " << h);
      CHECK(r.loss_change[l][h] == Approx(mean_val_loss(run, batches) - r.val_loss).margin(1e-5));
      std::copy(values.begin(), values.end(), model.flat_values().data());
    }
    // Normalized per layer (l2 = 1), ranked by it.
    double norm = 0;
    for (double s : r.normalized_score[l]) norm += s * s;
    CHECK(norm == Approx(1.0).epsilon(1e-9));
    for (size_t i = 1; i < r.ranking[l].size(); ++i)
      CHECK(r.normalized_score[l][r.ranking[l][i - 1]] >= r.normalized_score[l][r.ranking[l][i]]);
  }

  // |dL/dxi| of layer 1, head 2 by central differences of each batch's loss in its gate (the loss is
  // smooth in a gate: it scales the head's output).
  const double eps = 1e-2;
  double score = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const auto loss_at = [&](float xi) {
      std::vector<Tensor> gates;
      for (int64_t l = 0; l < L; ++l) gates.push_back(Tensor::ones({H}));
      gates[1].data()[2] = xi;
      model.set_head_gates(gates);
      NoGradGuard no_grad;
      const double loss =
          run.objective->split_batch_loss("val", eval_seed(run.config) + static_cast<uint64_t>(i)).item();
      model.set_head_gates({});
      return loss;
    };
    score += std::fabs(loss_at(static_cast<float>(1 + eps)) - loss_at(static_cast<float>(1 - eps))) /
             (2 * eps) / static_cast<double>(batches);
  }
  CHECK(r.gradient_score[1][2] == Approx(score).epsilon(0.05).margin(1e-4));

  // The pruning curve starts at every head and masks round(p% of L*H) heads, each count once.
  REQUIRE(r.pruning.size() >= 2);
  CHECK(r.pruning[0].val_loss == r.val_loss);
  CHECK(r.pruning[0].masked == 0);
  CHECK(r.pruning.back().masked == std::lround(0.9 * L * H));
  CHECK(r.pruning.back().percent == 90);
  for (size_t i = 1; i < r.pruning.size(); ++i) CHECK(r.pruning[i].masked > r.pruning[i - 1].masked);
  if (L * H >= 10) CHECK(r.pruning.size() == 10);
  CHECK(r.heads_masked_within_tolerance >= 0);
  const nlohmann::json j = head_importance_json(r, dir, "last");
  CHECK(j.at("heads_masked_within_0.05") == r.heads_masked_within_tolerance);
  CHECK(j.at("layers").size() == static_cast<size_t>(L));
  CHECK(j.at("n_layers") == L);
}

TEST_CASE("head_importance: an encoder-decoder run is refused, naming the run and its objective",
          "[analysis][heads]") {
  LoadedRun run = load_run(tfm_test::seq2seq_run(), "last", true);
  CHECK_THROWS_WITH(head_importance(run, 1),
                    Catch::Contains(tfm_test::seq2seq_run()) && Catch::Contains("seq2seq"));
}
