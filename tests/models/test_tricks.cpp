// The speedrun tricks of the language model (language_model.h): zero-init, the logit softcap, the x0
// skip, the value residual and the bigram embedding. Gradient checks (the layers' through
// tests/gradcheck.h, the whole model through the flat buffers), KV-cache decoding equal to the full
// forward, what each starts as, the bigram table's rows, costs against the built model. Their PyTorch
// cross-check is tests/models/test_reference.cpp (fixtures lm_tricks, lm_tricks_sinusoidal).
// Legend: B batch, T time, C = d_model, Hkv kv heads, Dk head width, V vocabulary.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "model_config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"

using namespace tfm;
using tfm::testing::check_gradients;
using tfm_test::model_config_from;

namespace {

constexpr int64_t kTricksVocab = 7;

// The modern recipe (RoPE, RMSNorm, SwiGLU, QK-norm, GQA, untied) or the 2017 one (sinusoidal, LayerNorm,
// GELU, tied), small, with `tricks` on top.
ModelConfig tricks_config(bool modern, std::vector<std::string> tricks) {
  std::vector<std::string> sets = {"model.d_model=8", "model.n_layers=3", "model.n_heads=2", "model.d_ff=12",
                                   "model.max_seq_len=8"};
  if (modern)
    sets.insert(sets.end(), {"model.n_kv_heads=1", "model.positional_encoding=rope", "model.norm=rmsnorm",
                             "model.activation=swiglu", "model.qk_norm=true", "model.bias=false",
                             "model.tie_embeddings=false"});
  sets.insert(sets.end(), tricks.begin(), tricks.end());
  return model_config_from(sets, kTricksVocab);
}

const std::vector<std::string> kAllTricks = {"model.logit_softcap=2", "model.x0_skip=true",
                                             "model.value_residual=true", "model.bigram_buckets=20"};

std::vector<int32_t> tricks_tokens(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.below(kTricksVocab));
  return t;
}

// Weights far from the init (every path carries a gradient), the tricks' scalars off their start.
void tricks_randomize(LanguageModel& model, uint64_t seed) {
  Rng rng(seed);
  Tensor values = model.flat_values();
  values.copy_from(Tensor::randn(values.shape(), rng, 0.0f, 0.4f));
}

}  // namespace

TEST_CASE("tricks: the value residual's gradients (x, V_1, lambda) by central differences",
          "[tricks][gradcheck]") {
  for (const bool rope : {true, false}) {
    SECTION(rope ? "RoPE" : "no positions in attention") {
      const ModelConfig c = tricks_config(rope, {"model.value_residual=true"});
      MultiHeadAttention attn(c, true);
      Tensor slot;
      attn.use_value_residual(&slot, false);
      Rng rng(3);
      for (auto& [name, p] : attn.named_parameters())
        p->copy_from(Tensor::randn(p->shape(), rng, 0.0f, 0.5f));
      const int64_t B = 2, T = 4, kv = c.n_kv_heads * c.head_dim();
      check_gradients(
          [&](const std::vector<Tensor>& in) {
            slot = in[1];
            attn.value_lambda = in[2];
            return attn.self_attention(in[0]);  // (B, T, C)
          },
          {Tensor::randn({B, T, c.d_model}, rng), Tensor::randn({B, T, kv}, rng),
           Tensor::from_vector({0.3f}, {1})});
    }
  }
}

TEST_CASE("tricks: the x0 skip's gradients (x, x0, its two scalars) by central differences",
          "[tricks][gradcheck]") {
  const ModelConfig c = tricks_config(true, {"model.x0_skip=true"});
  EncoderBlock block(c, true);
  block.use_x0_mix();
  Rng rng(5);
  for (auto& [name, p] : block.named_parameters()) p->copy_from(Tensor::randn(p->shape(), rng, 0.0f, 0.5f));
  check_gradients(
      [&](const std::vector<Tensor>& in) {
        block.x0_mix = in[2];
        return block.forward(block.mix_x0(in[0], in[1]));  // (B, T, C)
      },
      {Tensor::randn({2, 3, c.d_model}, rng), Tensor::randn({2, 3, c.d_model}, rng),
       Tensor::from_vector({0.8f, 0.4f}, {2})});
}

TEST_CASE("tricks: whole-model gradient check with every trick on, through the flat buffers",
          "[slow][tricks][gradcheck]") {
  for (const bool modern : {true, false}) {
    SECTION(modern ? "modern recipe, zero-init" : "2017 recipe, tied head") {
      std::vector<std::string> tricks = kAllTricks;
      if (modern) tricks.push_back("model.zero_init=true");
      const ModelConfig c = tricks_config(modern, tricks);
      LanguageModel model(c, 3);
      tricks_randomize(model, 4);
      const int64_t B = 2, T = 4;
      const auto tokens = tricks_tokens(B * T, 8), targets = tricks_tokens(B * T, 9);
      auto loss_at = [&]() { return LanguageModel::loss(model.forward(tokens, B, T), targets); };
      tfm::testing::check_every_parameter(model, loss_at);
    }
  }
}

TEST_CASE("tricks: KV-cache decoding equals the full forward with every trick on", "[tricks]") {
  for (const bool modern : {true, false}) {
    SECTION(modern ? "modern recipe" : "2017 recipe") {
      const ModelConfig c = tricks_config(modern, kAllTricks);
      LanguageModel model(c, 5);
      tricks_randomize(model, 6);
      const int64_t B = 2, T = 7, V = kTricksVocab;
      const auto tokens = tricks_tokens(B * T, 7);
      NoGradGuard no_grad;
      const Tensor full = model.forward(tokens, B, T);  // (B, T, V)
      KVCache cache = model.make_cache(B);
      int64_t t = 0;
      float worst = 0.0f;
      for (int64_t step : {1, 2, 1, 3}) {  // the bigram of a chunk's first token reads the cache's last
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < step; ++i) chunk.push_back(tokens[b * T + t + i]);
        const Tensor logits = model.forward_cached(cache, chunk, B, step);  // (B, step, V)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < step; ++i)
            for (int64_t v = 0; v < V; ++v)
              worst = std::max(worst, std::fabs(logits.at({b, i, v}) - full.at({b, t + i, v})));
        t += step;
      }
      REQUIRE(t == T);
      CAPTURE(worst);
      CHECK(worst <= 1e-5f);
    }
  }
}

TEST_CASE("tricks: what each starts as, the other weights drawn as without it", "[tricks]") {
  const int64_t B = 2, T = 6;
  const auto tokens = tricks_tokens(B * T, 10);
  LanguageModel off(tricks_config(true, {}), 21);
  const Tensor off_logits = off.forward(tokens, B, T);
  auto value_of = [](const LanguageModel& m, const std::string& name) {
    const NamedParameter* p = m.find_parameter(name);
    REQUIRE(p);
    return p->value.to_vector();
  };
  // Every parameter the model without tricks has keeps its initial value, but the zeroed ones.
  auto same_draws = [&](const LanguageModel& on, const std::set<std::string>& zeroed) {
    for (const NamedParameter& p : off.parameters()) {
      INFO(p.name);
      const std::vector<float> v = value_of(on, p.name);
      if (zeroed.count(p.name))
        CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
      else
        CHECK(v == p.value.to_vector());
    }
  };

  SECTION("zero_init: wo, fc2 and the head start at zero; refused with a tied head") {
    LanguageModel on(tricks_config(true, {"model.zero_init=true"}), 21);
    std::set<std::string> zeroed = {"head.weight"};
    for (int l = 0; l < 3; ++l)
      for (const char* w : {".attn.wo.weight", ".fc2.weight"})
        zeroed.insert("blocks." + std::to_string(l) + w);
    same_draws(on, zeroed);
    const std::vector<float> logits = on.forward(tokens, B, T).to_vector();
    CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return x == 0.0f; }));
    CHECK_THROWS_WITH(tricks_config(false, {"model.zero_init=true"}), Catch::Contains("model.zero_init"));
  }
  SECTION("x0_skip and bigram_buckets start as the identity: the same logits, bit for bit") {
    for (const char* trick : {"model.x0_skip=true", "model.bigram_buckets=49"}) {
      INFO(trick);
      LanguageModel on(tricks_config(true, {trick}), 21);
      same_draws(on, {"bigram.weight"});
      CHECK(on.forward(tokens, B, T).to_vector() == off_logits.to_vector());
    }
    LanguageModel x0(tricks_config(true, {"model.x0_skip=true"}), 21);
    CHECK(value_of(x0, "blocks.2.x0_mix") == std::vector<float>{1.0f, 0.0f});
  }
  SECTION("value_residual: lambda 0.5 in the layers after the first") {
    LanguageModel on(tricks_config(true, {"model.value_residual=true"}), 21);
    same_draws(on, {});
    CHECK(on.find_parameter("blocks.0.attn.value_lambda") == nullptr);
    CHECK(value_of(on, "blocks.1.attn.value_lambda") == std::vector<float>{0.5f});
    CHECK(value_of(on, "blocks.2.attn.value_lambda") == std::vector<float>{0.5f});
  }
  SECTION("logit_softcap c: c tanh(logits / c), inside (-c, c)") {
    LanguageModel on(tricks_config(true, {"model.logit_softcap=0.01"}), 21);
    same_draws(on, {});
    const std::vector<float> capped = on.forward(tokens, B, T).to_vector(), raw = off_logits.to_vector();
    for (size_t i = 0; i < raw.size(); ++i) {
      CHECK(std::fabs(capped[i]) <= 0.01f);
      CHECK(capped[i] == Approx(0.01 * std::tanh(raw[i] / 0.01)).margin(1e-7));
    }
  }
}

TEST_CASE("tricks: with V^2 buckets every token pair has its own bigram row", "[tricks]") {
  const int64_t V = kTricksVocab, B = 3, T = 8;
  LanguageModel model(tricks_config(true, {"model.bigram_buckets=49"}), 2);
  const auto tokens = tricks_tokens(B * T, 12);
  model.flat_grads().fill_(0.0f);
  LanguageModel::loss(model.forward(tokens, B, T), tricks_tokens(B * T, 13)).backward();
  std::set<int64_t> pairs;  // prev * V + token, for every position with a token before it
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t < T; ++t) pairs.insert(tokens[b * T + t - 1] * V + tokens[b * T + t]);
  const std::vector<float> grad = model.find_parameter("bigram.weight")->value.grad().to_vector();
  const int64_t C = 8;
  for (int64_t row = 0; row < V * V; ++row) {
    INFO("row " << row);
    const bool used =
        std::any_of(grad.begin() + row * C, grad.begin() + (row + 1) * C, [](float g) { return g != 0.0f; });
    CHECK(used == (pairs.count(row) > 0));
  }
}

TEST_CASE("tricks: cost() counts each trick's parameters as the built model has them", "[tricks][costs]") {
  for (const bool modern : {true, false}) {
    std::vector<std::string> tricks = kAllTricks;
    if (modern) tricks.push_back("model.zero_init=true");
    for (size_t k = 0; k <= tricks.size(); ++k) {
      // One trick at a time, then all of them.
      const ModelConfig c = tricks_config(
          modern, k < tricks.size() ? std::vector<std::string>{tricks[k]} : std::vector<std::string>(tricks));
      INFO((k < tricks.size() ? tricks[k] : "all") << (modern ? ", modern" : ", 2017"));
      LanguageModel model(c, 1);
      CHECK(LanguageModel::cost(c, 2, 5).parameters == static_cast<double>(model.parameter_count()));
      int64_t listed = 0;
      for (const auto& [what, n] : model.parameter_breakdown()) listed += n;
      CHECK(listed == model.parameter_count());
    }
  }
}

TEST_CASE("tricks: refused for seq2seq and out of range, naming the key", "[tricks][config]") {
  CHECK_THROWS_WITH(model_config_from({"train.objective=seq2seq", "model.x0_skip=true"}, 10),
                    Catch::Contains("model.x0_skip"));
  CHECK_THROWS_WITH(model_config_from({"model.logit_softcap=-1"}, 10),
                    Catch::Contains("model.logit_softcap"));
  CHECK_THROWS_WITH(model_config_from({"model.bigram_buckets=-3"}, 10),
                    Catch::Contains("model.bigram_buckets"));
}
