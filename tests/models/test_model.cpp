// The language model: whole-model gradient check through the flat buffers, KV-cache decoding equal
// to the full forward, initialisation statistics, parameter counts against the PyTorch reference,
// FLOP counts and attention recording.
// Legend: B batch, T time, C = d_model, H heads, Hkv kv heads, V vocabulary.
#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.h"
#include "model_config.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/attention.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

// The modern options together (docs/architecture.md, "Modern options"): RoPE, RMSNorm, SwiGLU, QK-norm,
// no biases, an untied head.
ModelConfig modern_config(int64_t heads, int64_t kv_heads, const std::string& norm_position = "pre") {
  return model_config_from(
      {"model.d_model=8", "model.n_layers=2", "model.n_heads=" + std::to_string(heads),
       "model.n_kv_heads=" + std::to_string(kv_heads), "model.d_ff=12", "model.max_seq_len=8",
       "model.norm_position=" + norm_position, "model.positional_encoding=rope", "model.rope_theta=500",
       "model.norm=rmsnorm", "model.activation=swiglu", "model.qk_norm=true", "model.bias=false",
       "model.tie_embeddings=false"},
      7);
}

ModelConfig tiny_model(const std::string& norm, const std::string& positions, bool tied, int64_t heads,
                       int64_t kv_heads) {
  return model_config_from(
      {"model.d_model=8", "model.n_layers=2", "model.n_heads=" + std::to_string(heads),
       "model.n_kv_heads=" + std::to_string(kv_heads), "model.d_ff=12", "model.max_seq_len=8",
       "model.norm_position=" + norm, "model.positional_encoding=" + positions,
       std::string("model.tie_embeddings=") + (tied ? "true" : "false")},
      7);
}

std::vector<int32_t> random_tokens(int64_t n, int64_t V, Rng& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  return t;
}

struct Variant {
  const char* name;
  ModelConfig config;
};

// Larger random weights than the 0.02 init, so every path carries a visible gradient.
void randomize_model(LanguageModel& model, Rng& rng) {
  Tensor values = model.flat_values();
  values.copy_from(Tensor::randn(values.shape(), rng, 0.0f, 0.4f));
}

}  // namespace

TEST_CASE("model: whole language model gradient check through the flat buffers", "[slow][model][gradcheck]") {
  ModelConfig dropout_cfg = tiny_model("pre", "sinusoidal", true, 2, 1);
  dropout_cfg.dropout = 0.2f;
  dropout_cfg.attention_dropout = 0.3f;
  ModelConfig additive_cfg = tiny_model("pre", "learned", true, 4, 2);
  additive_cfg.attention_score = AttentionScore::Additive;
  additive_cfg.n_layers = 1;  // the composed additive path is the slow one under sanitizers
  const Variant variants[] = {
      {"pre-norm, sinusoidal, tied, MHA", tiny_model("pre", "sinusoidal", true, 2, 2)},
      {"post-norm, learned, untied, GQA", tiny_model("post", "learned", false, 4, 2)},
      {"pre-norm, MQA, dropout (fixed seed)", dropout_cfg},
      {"additive scoring, GQA", additive_cfg},
      {"RoPE, RMSNorm, SwiGLU, QK-norm, no bias, GQA", modern_config(4, 2)},
      {"RoPE, RMSNorm, SwiGLU, QK-norm, post-norm, MQA", modern_config(4, 1, "post")},
  };
  for (const Variant& variant : variants) {
    SECTION(variant.name) {
      LanguageModel model(variant.config, 3);
      Rng rng(4);
      randomize_model(model, rng);
      const int64_t B = 2, T = 4;
      const auto tokens = random_tokens(B * T, variant.config.vocab_size, rng);
      const auto targets = random_tokens(B * T, variant.config.vocab_size, rng);
      const bool dropout = variant.config.dropout > 0.0f;
      model.set_training(dropout);
      const Rng::State start = model.dropout_rng().state();
      auto loss_at = [&]() {
        model.dropout_rng().set_state(start);  // the same dropout masks every evaluation
        return LanguageModel::loss(model.forward(tokens, B, T), targets);
      };
      tfm::testing::check_every_parameter(model, loss_at);
    }
  }
}

TEST_CASE("model: KV-cache decoding equals the full forward", "[model]") {
  ModelConfig additive = tiny_model("pre", "sinusoidal", true, 4, 2);
  additive.attention_score = AttentionScore::Additive;
  ModelConfig topk = tiny_model("pre", "sinusoidal", true, 4, 2);
  topk.head_gating = HeadGating::TopK, topk.head_topk = 2;
  ModelConfig modern_additive = modern_config(4, 2);
  modern_additive.attention_score = AttentionScore::Additive;
  const Variant variants[] = {
      {"RoPE, RMSNorm, SwiGLU, QK-norm, GQA (positions absolute in the cache)", modern_config(4, 2)},
      {"RoPE, MQA, additive scoring", modern_additive},
      {"GQA, top-k head gating", topk},
      {"MHA, pre-norm", tiny_model("pre", "sinusoidal", true, 4, 4)},
      {"GQA, post-norm, learned positions", tiny_model("post", "learned", false, 4, 2)},
      {"MQA", tiny_model("pre", "learned", true, 4, 1)},
      {"GQA, additive scoring", additive},
  };
  for (const Variant& variant : variants) {
    SECTION(variant.name) {
      LanguageModel model(variant.config, 5);
      Rng rng(6);
      randomize_model(model, rng);
      const int64_t B = 2, T = 7;
      const auto tokens = random_tokens(B * T, variant.config.vocab_size, rng);
      NoGradGuard no_grad;
      const Tensor full = model.forward(tokens, B, T);  // (B, T, V)
      const int64_t V = variant.config.vocab_size;
      // Token by token, then a chunk of two, then the rest one at a time.
      KVCache cache = model.make_cache(B);
      int64_t t = 0;
      float worst = 0.0f;
      for (int64_t step : {1, 1, 2, 1, 1, 1}) {
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < step; ++i) chunk.push_back(tokens[b * T + t + i]);
        const Tensor logits = model.forward_cached(cache, chunk, B, step);  // (B, step, V)
        REQUIRE(logits.shape() == Shape{B, step, V});
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < step; ++i)
            for (int64_t v = 0; v < V; ++v)
              worst = std::max(worst, std::fabs(logits.at({b, i, v}) - full.at({b, t + i, v})));
        t += step;
      }
      REQUIRE(t == T);
      CHECK(cache.length == T);
      CAPTURE(worst);
      CHECK(worst <= 1e-5f);
      CHECK_THROWS_WITH(model.forward_cached(cache, {0, 0, 0, 0}, B, 2), Catch::Contains("max_seq_len"));
    }
  }
}

TEST_CASE("model: initialisation follows docs/architecture.md", "[model]") {
  ModelConfig c = tiny_model("pre", "learned", false, 4, 4);
  c.d_model = 64;
  c.d_ff = 128;
  c.vocab_size = 50;
  c.max_seq_len = 32;
  LanguageModel model(c, 42);
  const float residual_std = 0.02f / std::sqrt(2.0f * c.n_layers);
  for (const NamedParameter& p : model.parameters()) {
    INFO(p.name);
    const std::vector<float> v = p.value.to_vector();
    double mean = 0.0, sq = 0.0;
    for (float x : v) mean += x;
    mean /= v.size();
    for (float x : v) sq += (x - mean) * (x - mean);
    const double std = std::sqrt(sq / v.size());
    CHECK(p.decay == (p.value.dim() >= 2));
    if (p.value.dim() == 2) {
      const bool residual = p.name.find("attn.wo.weight") != std::string::npos ||
                            p.name.find("fc2.weight") != std::string::npos;
      const double want = residual ? residual_std : 0.02;
      CHECK(std == Approx(want).epsilon(0.08));
      CHECK(std::fabs(mean) < 4 * want / std::sqrt(static_cast<double>(v.size())) + 1e-6);
    } else {
      const bool gain = p.name.find("ln") != std::string::npos && p.name.rfind("weight") == p.name.size() - 6;
      for (float x : v) CHECK(x == (gain ? 1.0f : 0.0f));
    }
  }
  // The same seed gives the same weights; another seed different ones.
  LanguageModel again(c, 42), other(c, 43);
  CHECK(again.flat_values().to_vector() == model.flat_values().to_vector());
  CHECK(other.flat_values().to_vector() != model.flat_values().to_vector());
}

TEST_CASE("model: parameter counts equal the PyTorch reference's", "[model]") {
  // torch_lm.py --print-names, summed, for a 70-character vocabulary:
  //   defaults (d 128, 4 layers, 4 heads, d_ff 512, T 64, pre, sinusoidal, tied) -> 802304
  //   d 48, 3 layers, 6 heads / 2 kv heads, d_ff 100, T 32, post, learned, untied, no bias -> 56064
  ModelConfig a;
  a.vocab_size = 70;
  LanguageModel ma(a, 1);
  CHECK(ma.parameter_count() == 802304);
  ModelConfig b = a;
  b.d_model = 48;
  b.n_layers = 3;
  b.n_heads = 6;
  b.n_kv_heads = 2;
  b.d_ff = 100;
  b.max_seq_len = 32;
  b.norm_position = NormPosition::Post;
  b.positional_encoding = PositionalEncoding::Learned;
  b.tie_embeddings = false;
  b.bias = false;
  LanguageModel mb(b, 1);
  CHECK(mb.parameter_count() == 56064);
  for (LanguageModel* m : {&ma, &mb}) {
    int64_t total = 0;
    for (const auto& [component, n] : m->parameter_breakdown()) total += n;
    CHECK(total == m->parameter_count());
    // Parameters tile the flat buffer in order.
    int64_t offset = 0;
    for (const NamedParameter& p : m->parameters()) {
      CHECK(p.offset == offset);
      CHECK(p.value.data() == m->flat_values().data() + offset);
      CHECK(p.value.grad().data() == m->flat_grads().data() + offset);
      offset += p.value.numel();
    }
  }
  const auto breakdown = ma.parameter_breakdown();
  CHECK(breakdown[0] == std::make_pair(std::string("embedding"), int64_t{70 * 128}));
  CHECK(breakdown[2].second == 4 * (4 * 128 * 128 + 4 * 128));
  CHECK(breakdown[3].second == 4 * (2 * 128 * 512 + 512 + 128));
  CHECK(ma.find_parameter("blocks.3.attn.wo.bias") != nullptr);
  CHECK(ma.find_parameter("head.weight") == nullptr);
  CHECK(mb.find_parameter("head.weight") != nullptr);
}

TEST_CASE("model: FLOPs per token", "[model]") {
  ModelConfig c;
  c.vocab_size = 65;  // the baby config: d 128, 4 layers, d_ff 512
  const double C = 128, T = 64;
  const double per_layer = 2 * (4 * C * C + 2 * C * 512) + 2 * 2 * T * C;
  const FlopCount f = LanguageModel::flops_per_token(c, 64);
  CHECK(f.forward_per_token == Approx(4 * per_layer + 2 * C * 65));
  CHECK(f.train_per_token == Approx(3 * f.forward_per_token));
  c.n_kv_heads = 1;  // MQA: K and V project to one head of 32
  const double mqa_layer = 2 * (2 * C * C + 2 * C * 32 + 2 * C * 512) + 2 * 2 * T * C;
  CHECK(LanguageModel::flops_per_token(c, 64).forward_per_token == Approx(4 * mqa_layer + 2 * C * 65));
}

TEST_CASE("model: attention probabilities and head outputs are recorded on request", "[model]") {
  LanguageModel model(tiny_model("pre", "sinusoidal", true, 4, 2), 1);
  Rng rng(2);
  const auto tokens = random_tokens(2 * 5, 7, rng);
  model.forward(tokens, 2, 5);
  CHECK(model.attention_probabilities().empty());
  model.set_record_attention(true);
  model.forward(tokens, 2, 5);
  REQUIRE(model.attention_probabilities().size() == 2);
  REQUIRE(model.head_outputs().size() == 2);
  for (const Tensor& p : model.attention_probabilities()) {
    REQUIRE(p.shape() == Shape{2, 4, 5, 5});
    CHECK(p.at({1, 3, 2, 3}) == 0.0f);  // causal
    CHECK(p.at({1, 3, 2, 0}) + p.at({1, 3, 2, 1}) + p.at({1, 3, 2, 2}) == Approx(1.0f));
  }
  for (const Tensor& h : model.head_outputs()) CHECK(h.shape() == Shape{2, 5, 4, 2});
}

TEST_CASE("model: bad input is reported", "[model]") {
  ModelConfig c = tiny_model("pre", "sinusoidal", true, 2, 2);
  LanguageModel model(c, 1);
  CHECK_THROWS_WITH(model.forward({0, 1, 2}, 1, 2), Catch::Contains("LanguageModel::forward"));
  CHECK_THROWS_WITH(model.forward(std::vector<int32_t>(9, 0), 1, 9), Catch::Contains("max_seq_len"));
  // A negative batch or length is named by the call, not by the tensor it would have made.
  CHECK_THROWS_WITH(model.forward({}, -1, 0),
                    "LanguageModel::forward: expected B >= 0, T >= 0 and a first "
                    "position >= 0, got B = -1, T = 0, position 0");
  CHECK_THROWS_WITH(model.forward({1}, -1, -1), Catch::StartsWith("LanguageModel::forward: expected B >= 0"));
  CHECK_THROWS_WITH(model.make_cache(-1), "LanguageModel::make_cache: expected B >= 0 sequences, got -1");
  KVCache cache = model.make_cache(1);
  CHECK_THROWS_WITH(model.forward_cached(cache, {}, 1, -1),
                    Catch::StartsWith("LanguageModel::forward_cached: expected B >= 0, T >= 0"));
  c.n_kv_heads = 3;
  CHECK_THROWS_WITH(LanguageModel(c, 1), Catch::Contains("LanguageModel: model.n_kv_heads"));
}

TEST_CASE("model: init_parameters gives a layer built on its own the models' initialisation", "[model]") {
  // A multi-head attention layer alone, as a library user builds one: zeros that require no gradient
  // until init_parameters; then the models' initialisation, and a backward reaches every parameter.
  const ModelConfig c = tiny_model("pre", "sinusoidal", true, 2, 2);
  MultiHeadAttention layer(c, true);
  for (auto& [name, p] : layer.named_parameters()) CHECK_FALSE(p->requires_grad());
  init_parameters(layer, 3);
  Rng rng(5);
  const Tensor x = Tensor::randn({2, 4, c.d_model}, rng, 0.0f, 1.0f);  // (B, T, C)
  sum(layer.forward(x, x, x)).backward();
  for (auto& [name, p] : layer.named_parameters()) {
    INFO(name);
    REQUIRE(p->requires_grad());
    double sq = 0, grad_sq = 0;
    for (int64_t i = 0; i < p->numel(); ++i) sq += double(p->data()[i]) * p->data()[i];
    for (int64_t i = 0; i < p->numel(); ++i) grad_sq += double(p->grad().data()[i]) * p->grad().data()[i];
    if (p->dim() == 2) {
      // N(0, 0.02) (wo: the residual branch's 0.02 / sqrt(2) for one layer): its RMS near the std.
      const double std = name.find("wo.") != std::string::npos ? 0.02 / std::sqrt(2.0) : 0.02;
      CHECK(std::sqrt(sq / double(p->numel())) == Approx(std).epsilon(0.3));
      CHECK(grad_sq > 0);
    }
  }
}
