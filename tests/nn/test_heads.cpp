// Head gates and masks (MultiHeadAttention::head_gate, tfm heads, --mask-heads; docs/heads.md): a gate of
// ones changes nothing, a gate of 0 equals zeroing the head's columns of Wo (the composed form), the
// gate's gradient matches central differences, and the CLI reports importance and refuses bad masks.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "model_config.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

ModelConfig gated_config() {  // grouped-query: 4 heads over 2 kv heads
  return model_config_from({"model.d_model=16", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
                            "model.d_ff=32", "model.max_seq_len=8"},
                           13);
}

struct Batch {
  std::vector<int32_t> x, y;
  Batch() : x(2 * 7), y(2 * 7) {
    Rng rng(5);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(13)), y[i] = static_cast<int32_t>(rng.below(13));
  }
};

std::vector<Tensor> ones_heads(int64_t L, int64_t H) {
  std::vector<Tensor> g;
  for (int64_t l = 0; l < L; ++l) g.push_back(Tensor::ones({H}));
  return g;
}

}  // namespace

TEST_CASE("heads: a gate of ones is the standard layer, a gate of 0 zeroes the head's slice of Wo",
          "[heads]") {
  LanguageModel m(gated_config(), 3);
  Rng rng(9);
  Tensor v = m.flat_values();
  for (int64_t i = 0; i < v.numel(); ++i) v.data()[i] += 0.2f * rng.normal();
  const Batch b;
  NoGradGuard no_grad;
  const std::vector<float> plain = m.forward(b.x, 2, 7).to_vector();
  m.set_head_gates(ones_heads(2, 4));
  CHECK(m.forward(b.x, 2, 7).to_vector() == plain);

  // Layer 1, head 2 masked by its gate == the same head's columns of Wo set to zero.
  std::vector<Tensor> g = ones_heads(2, 4);
  g[1].data()[2] = 0.0f;
  m.set_head_gates(g);
  const std::vector<float> gated = m.forward(b.x, 2, 7).to_vector();
  m.set_head_gates({});
  Tensor wo = m.find_parameter("blocks.1.attn.wo.weight")->value;  // (C, H*Dk)
  const int64_t C = 16, Dk = 4;
  for (int64_t r = 0; r < C; ++r)
    for (int64_t k = 0; k < Dk; ++k) wo.data()[r * 4 * Dk + 2 * Dk + k] = 0.0f;
  const std::vector<float> zeroed = m.forward(b.x, 2, 7).to_vector();
  REQUIRE(gated.size() == zeroed.size());
  double worst = 0;
  for (size_t i = 0; i < gated.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(gated[i]) - zeroed[i]));
  CHECK(worst < 1e-5);
  CHECK(gated != plain);
}

TEST_CASE("heads: dL/dgate matches central differences", "[heads][gradcheck]") {
  LanguageModel m(gated_config(), 4);
  Rng rng(11);
  Tensor v = m.flat_values();
  for (int64_t i = 0; i < v.numel(); ++i) v.data()[i] += 0.3f * rng.normal();
  const Batch b;
  std::vector<Tensor> g = ones_heads(2, 4);
  for (Tensor& t : g) t.set_requires_grad(true);
  m.set_head_gates(g);
  LanguageModel::loss(m.forward(b.x, 2, 7), b.y).backward();
  const double eps = 1e-2;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 4; ++h) {
      const auto loss_at = [&](float value) {
        NoGradGuard no_grad;
        const float keep = g[l].data()[h];
        g[l].data()[h] = value;
        const double L = LanguageModel::loss(m.forward(b.x, 2, 7), b.y).item();
        g[l].data()[h] = keep;
        return L;
      };
      const double numeric = (loss_at(1.0f + eps) - loss_at(1.0f - eps)) / (2 * eps);
      const double analytic = g[l].grad().data()[h];
      INFO("layer " << l << " head " << h << ": analytic " << analytic << ", numeric " << numeric);
      CHECK(std::fabs(analytic - numeric) <= 2e-3 * std::max(1.0, std::fabs(numeric)) + 1e-4);
    }
}
