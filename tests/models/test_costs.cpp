// Each layer's cost() (nn/module.h) held to the layer it describes: parameters against the built
// model's parameter_count(), FLOPs against the matrix products a forward actually issues through the
// GEMM wrapper (gemm_flops() counts 2 M N K per product), for every model option and both models.
// Legend: B batch, S source length, T time, C = d_model, H heads.
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "model_config.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

// The FLOPs gemm() issued while `run` ran.
double counted_flops(const std::function<void()>& run) {
  const uint64_t before = gemm_flops();
  run();
  return static_cast<double>(gemm_flops() - before);
}

ModelConfig small(bool causal) {
  // A bidirectional model is a masked_lm run's.
  return model_config_from({"model.d_model=16", "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=12",
                            causal ? "model.causal=true" : "model.causal=false",
                            causal ? "train.objective=causal_lm" : "train.objective=masked_lm"},
                           13);
}

// Every model option, one changed at a time from the small default.
std::vector<std::pair<std::string, ModelConfig>> variants(bool causal) {
  std::vector<std::pair<std::string, ModelConfig>> out;
  auto add = [&](const std::string& name, const std::function<void(ModelConfig&)>& change) {
    ModelConfig c = small(causal);
    change(c);
    out.emplace_back(name, c);
  };
  add("default", [](ModelConfig&) {});
  add("gqa", [](ModelConfig& c) { c.n_kv_heads = 2; });
  add("mqa", [](ModelConfig& c) { c.n_kv_heads = 1; });
  add("no bias, untied", [](ModelConfig& c) { c.bias = false, c.tie_embeddings = false; });
  add("learned positions, post-norm, relu", [](ModelConfig& c) {
    c.positional_encoding = PositionalEncoding::Learned, c.norm_position = NormPosition::Post;
    c.activation = Activation::Relu;
  });
  add("d_ff 24", [](ModelConfig& c) { c.d_ff = 24; });
  add("additive", [](ModelConfig& c) { c.attention_score = AttentionScore::Additive; });
  add("top-2 gating", [](ModelConfig& c) { c.head_gating = HeadGating::TopK; });
  add("talking heads", [](ModelConfig& c) { c.head_mixing = HeadMixing::TalkingHeads; });
  add("group_mlp", [](ModelConfig& c) { c.head_mixing = HeadMixing::GroupMlp; });
  add("group_mlp, additive, gqa", [](ModelConfig& c) {
    c.head_mixing = HeadMixing::GroupMlp, c.attention_score = AttentionScore::Additive, c.n_kv_heads = 2;
  });
  add("rmsnorm", [](ModelConfig& c) { c.norm = NormKind::RMSNorm; });
  add("swiglu", [](ModelConfig& c) { c.activation = Activation::SwiGLU, c.d_ff = 40; });
  add("rope", [](ModelConfig& c) { c.positional_encoding = PositionalEncoding::Rope; });
  add("qk_norm", [](ModelConfig& c) { c.qk_norm = true; });
  add("the modern recipe: rope, rmsnorm, swiglu, qk_norm, no bias, untied, gqa", [](ModelConfig& c) {
    c.positional_encoding = PositionalEncoding::Rope, c.norm = NormKind::RMSNorm,
    c.activation = Activation::SwiGLU;
    c.qk_norm = true, c.bias = false, c.tie_embeddings = false, c.n_kv_heads = 2;
  });
  return out;
}

std::vector<int32_t> tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
  return t;
}

}  // namespace

TEST_CASE("costs: a bidirectional model's forward issues exactly the FLOPs its cost() states",
          "[costs][model]") {
  const int64_t B = 3, T = 10;
  for (const auto& [name, c] : variants(false)) {
    DYNAMIC_SECTION(name) {
      LanguageModel model(c, 1);
      const Cost cost = LanguageModel::cost(c, B, T);
      CHECK(cost.parameters == static_cast<double>(model.parameter_count()));
      NoGradGuard no_grad;
      const double flops = counted_flops([&] { model.forward(tokens(B * T, c.vocab_size), B, T); });
      CHECK(flops == Approx(cost.flops).epsilon(1e-12));
      CHECK(LanguageModel::flops_per_token(c, T).forward_per_token == Approx(cost.flops / (B * T)));
    }
  }
}

TEST_CASE("costs: a causal model's forward skips masked blocks, never more than its cost()",
          "[costs][model]") {
  // cost() counts the scores and weighted sums of a causal mask in full (the convention of MFU
  // figures); the fused kernel skips the key blocks past each query block. The projections, the
  // feed-forward and the head are exact either way.
  const int64_t B = 2, T = 12;
  for (const auto& [name, c] : variants(true)) {
    DYNAMIC_SECTION(name) {
      LanguageModel model(c, 1);
      const Cost cost = LanguageModel::cost(c, B, T);
      CHECK(cost.parameters == static_cast<double>(model.parameter_count()));
      NoGradGuard no_grad;
      const double flops = counted_flops([&] { model.forward(tokens(B * T, c.vocab_size), B, T); });
      // What the scores and weighted sums are at most (dot scores: both are products).
      const double attention = 2.0 * 2.0 * B * T * T * c.d_model *
                               MultiHeadAttention::computed_head_share(c) * static_cast<double>(c.n_layers);
      CHECK(flops <= cost.flops * (1 + 1e-12));
      CHECK(flops >= cost.flops - attention);
    }
  }
}

TEST_CASE("costs: the encoder-decoder's forward issues exactly the FLOPs its cost() states",
          "[costs][seq2seq]") {
  const int64_t B = 2, S = 7, T = 5;
  for (auto [name, c] : variants(false)) {
    DYNAMIC_SECTION(name) {
      c.source_vocab_size = 11;
      c.n_encoder_layers = 2, c.n_decoder_layers = 1;
      Seq2SeqModel model(c, 1);
      const Cost cost = Seq2SeqModel::cost(c, B, S, T);
      CHECK(cost.parameters == static_cast<double>(model.parameter_count()));
      NoGradGuard no_grad;
      // No padding, so no key block is skipped; the decoder's causal self-attention is counted
      // through a prefix of one token, where causal and full attention are the same.
      const std::vector<int64_t> lengths(B, S);
      const double flops = counted_flops([&] {
        model.forward(tokens(B * S, c.source_vocab_size), lengths, B, S, tokens(B * 1, c.vocab_size), 1);
      });
      CHECK(flops == Approx(Seq2SeqModel::cost(c, B, S, 1).flops).epsilon(1e-12));
      CHECK(Seq2SeqModel::flops_per_token(c, S, T).forward_per_token == Approx(cost.flops / (B * T)));
    }
  }
}

TEST_CASE("costs: each layer's cost() against the layer built alone", "[costs][nn]") {
  ModelConfig c = small(false);
  c.n_kv_heads = 2;
  for (const bool bias : {true, false}) {
    c.bias = bias;
    // Cross-attention with other key and value widths, as nn.MultiheadAttention's kdim/vdim.
    MultiHeadAttention cross(c, false, 5, 3);
    const Cost cost = MultiHeadAttention::cost(c, 2, 4, 6, 5, 3);
    CHECK(cost.parameters == static_cast<double>(cross.parameter_count()));
    Rng rng(1);
    NoGradGuard no_grad;
    const double flops = counted_flops([&] {
      cross.forward(Tensor::randn({2, 4, 16}, rng), Tensor::randn({2, 6, 5}, rng),
                    Tensor::randn({2, 6, 3}, rng));
    });
    CHECK(flops == Approx(cost.flops).epsilon(1e-12));
    EncoderBlock encoder(c, false);
    CHECK(EncoderBlock::cost(c, 1, 1).parameters == static_cast<double>(encoder.parameter_count()));
    DecoderBlock decoder(c);
    CHECK(DecoderBlock::cost(c, 1, 1, 1).parameters == static_cast<double>(decoder.parameter_count()));
  }
}
