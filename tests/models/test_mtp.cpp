// Multi-token prediction (model.mtp_heads, language_model.h): the whole model's gradient with the extra
// heads' weighted loss, which positions the loss reads, the next-token path left as it was (forward, the
// KV cache), cost() against the built model and the counted FLOPs, the loss weight's schedule, the
// config's refusals, and the GGUF export leaving the heads out. The PyTorch cross-check is
// tests/models/test_reference.cpp (fixtures lm_mtp, lm_mtp_post_tied); training, logging and resume are
// tests/training/test_train_mtp.cpp.
// Legend: B batch, T time, C = d_model, V vocabulary, K extra heads.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "model_config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/language_model.h"
#include "tfm/training/optim.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

constexpr int64_t kMtpVocab = 7;

// A small model with `heads` extra heads: the modern recipe (RoPE, RMSNorm, SwiGLU, untied, soft-capped),
// or the 2017 one post-norm (no final norm) with a tied head.
ModelConfig mtp_config(bool modern, int64_t heads) {
  std::vector<std::string> sets = {"model.d_model=8",     "model.n_layers=2",
                                   "model.n_heads=2",     "model.d_ff=12",
                                   "model.max_seq_len=8", "model.mtp_heads=" + std::to_string(heads)};
  if (modern)
    sets.insert(sets.end(),
                {"model.positional_encoding=rope", "model.norm=rmsnorm", "model.activation=swiglu",
                 "model.bias=false", "model.tie_embeddings=false", "model.logit_softcap=3"});
  else
    sets.insert(sets.end(), {"model.norm_position=post", "model.positional_encoding=learned"});
  return model_config_from(sets, kMtpVocab);
}

std::vector<int32_t> mtp_tokens(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.below(kMtpVocab));
  return t;
}

}  // namespace

TEST_CASE("mtp: whole-model gradient check of next-token loss + weight * the extra heads' loss",
          "[slow][mtp][gradcheck]") {
  for (const bool modern : {true, false}) {
    SECTION(modern ? "modern recipe, two heads" : "post-norm, tied head, one head") {
      LanguageModel model(mtp_config(modern, modern ? 2 : 1), 3);
      Rng rng(4);
      model.flat_values().copy_from(Tensor::randn(model.flat_values().shape(), rng, 0.0f, 0.4f));
      const int64_t B = 2, T = 4;
      const auto tokens = mtp_tokens(B * T, 8), targets = mtp_tokens(B * T, 9);
      const float weight = 0.7f;  // the loss weight enters every extra head's gradient
      auto loss_at = [&]() {
        const MultiTokenLogits heads = model.forward_multi_token(tokens, B, T);
        return LanguageModel::loss(heads.logits, targets) +
               LanguageModel::mtp_loss(heads.extra, targets, B, T) * weight;
      };
      tfm::testing::check_every_parameter(model, loss_at);
    }
  }
}

TEST_CASE("mtp: head k's loss reads token t+1+k at the positions that have one, the last k of a row none",
          "[mtp]") {
  const int64_t B = 2, T = 5, V = 3, K = 2;
  Rng rng(6);
  std::vector<Tensor> extra;
  for (int64_t k = 0; k < K; ++k) extra.push_back(Tensor::randn({B, T, V}, rng).set_requires_grad(true));
  const std::vector<int32_t> targets = {0, 1, 2, 0, 1, 2, 2, 1, 0, 0};  // (B, T): token t+1 at t
  const Tensor loss = LanguageModel::mtp_loss(extra, targets, B, T);
  // By hand: head k at position t against targets[t + k], t < T - k, each head's mean, then the mean.
  double expected = 0.0;
  for (int64_t k = 1; k <= K; ++k) {
    const float* z = extra[k - 1].data();
    double sum = 0.0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t + k < T; ++t) {
        const float* row = z + (b * T + t) * V;
        double norm = 0.0;
        for (int64_t v = 0; v < V; ++v) norm += std::exp(static_cast<double>(row[v]));
        sum += std::log(norm) - row[targets[b * T + t + k]];
      }
    expected += sum / static_cast<double>(B * (T - k)) / static_cast<double>(K);
  }
  CHECK(loss.item() == Approx(expected).epsilon(1e-6));
  loss.backward();
  for (int64_t k = 1; k <= K; ++k) {
    const float* g = extra[k - 1].grad().data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        double row = 0.0;
        for (int64_t v = 0; v < V; ++v) row += std::fabs(g[(b * T + t) * V + v]);
        INFO("head " << k << ", row " << b << ", position " << t);
        if (t + k < T)
          CHECK(row > 0.0);
        else
          CHECK(row == 0.0);  // no target: left out, not padded
      }
  }
  CHECK_THROWS_AS(LanguageModel::mtp_loss(extra, targets, B, 2), Error);  // K = 2 heads need T >= 3
}

TEST_CASE("mtp: forward, the KV cache and the next-token loss do not read the extra heads", "[mtp]") {
  const ModelConfig c = mtp_config(true, 2);
  LanguageModel model(c, 5);
  Rng rng(7);
  model.flat_values().copy_from(Tensor::randn(model.flat_values().shape(), rng, 0.0f, 0.4f));
  const int64_t B = 2, T = 6;
  const auto tokens = mtp_tokens(B * T, 3), targets = mtp_tokens(B * T, 4);
  const MultiTokenLogits heads = model.forward_multi_token(tokens, B, T);
  REQUIRE(heads.extra.size() == 2);
  for (const Tensor& z : heads.extra) CHECK(z.shape() == Shape{B, T, kMtpVocab});
  const Tensor logits = model.forward(tokens, B, T);
  CHECK(logits.to_vector() == heads.logits.to_vector());
  CHECK(model.forward_multi_token(tokens, B, T, false).extra.empty());
  // The next-token loss's gradient never reaches mtp.*.
  model.flat_grads().fill_(0.0f);
  LanguageModel::loss(logits, targets).backward();
  for (const NamedParameter& p : model.parameters()) {
    if (p.name.rfind("mtp.", 0) != 0) continue;
    INFO(p.name);
    const std::vector<float> g = p.value.grad().to_vector();
    CHECK(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }));
  }
  // Decoding one token at a time gives the full forward's logits.
  NoGradGuard no_grad;
  KVCache cache = model.make_cache(B);
  const std::vector<float> full = logits.to_vector();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> step(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) step[b] = tokens[b * T + t];
    const std::vector<float> got = model.forward_cached(cache, step, B, 1).to_vector();  // (B, 1, V)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < kMtpVocab; ++v)
        CHECK(got[b * kMtpVocab + v] == Approx(full[(b * T + t) * kMtpVocab + v]).margin(1e-5));
  }
}

TEST_CASE("mtp: the other weights start as without the heads, and zero-init zeroes their projections",
          "[mtp]") {
  const ModelConfig with = mtp_config(true, 2);
  ModelConfig without = with;
  without.mtp_heads = 0;
  const LanguageModel a(with, 11), b(without, 11);
  for (const NamedParameter& p : b.parameters()) {
    INFO(p.name);
    REQUIRE(a.find_parameter(p.name) != nullptr);
    CHECK(a.find_parameter(p.name)->value.to_vector() == p.value.to_vector());
  }
  const int64_t C = with.d_model;
  for (const char* name :
       {"mtp.1.norm.weight", "mtp.1.proj.weight", "mtp.2.norm.weight", "mtp.2.proj.weight"})
    CHECK(a.find_parameter(name) != nullptr);
  CHECK(a.find_parameter("mtp.1.proj.weight")->value.shape() == Shape{C, C});
  CHECK(a.parameter_count() - b.parameter_count() == 2 * (C * C + C));  // RMSNorm: a gain only
  ModelConfig zero = with;
  zero.zero_init = true;
  const LanguageModel z(zero, 11);
  const std::vector<float> proj = z.find_parameter("mtp.2.proj.weight")->value.to_vector();
  CHECK(std::all_of(proj.begin(), proj.end(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("mtp: cost() counts the heads' parameters and a training forward's FLOPs", "[mtp][costs]") {
  for (const bool modern : {true, false}) {
    const ModelConfig c = mtp_config(modern, 2);
    INFO((modern ? "modern" : "post-norm"));
    LanguageModel model(c, 1);
    const int64_t B = 2, T = 5;
    const Cost cost = LanguageModel::cost(c, B, T);
    CHECK(cost.parameters == static_cast<double>(model.parameter_count()));
    int64_t listed = 0, heads = 0;
    for (const auto& [what, n] : model.parameter_breakdown()) {
      listed += n;
      if (what.find("mtp") != std::string::npos) heads = n;
    }
    CHECK(listed == model.parameter_count());
    CHECK(heads == 2 * (c.d_model * c.d_model + (modern ? 1 : 2) * c.d_model));  // LayerNorm: gain and bias
    NoGradGuard no_grad;
    const uint64_t before = gemm_flops();
    model.forward_multi_token(mtp_tokens(B * T, 2), B, T);
    CHECK(static_cast<double>(gemm_flops() - before) == Approx(cost.flops).epsilon(1e-12));
  }
}

TEST_CASE("mtp: the loss weight decays linearly from train.mtp_weight at step 0 to 0 at max_steps",
          "[mtp][schedule]") {
  CHECK(mtp_weight_at(0.3, 0, 100) == 0.3);
  CHECK(mtp_weight_at(0.3, 50, 100) == Approx(0.15).epsilon(1e-15));
  CHECK(mtp_weight_at(0.3, 99, 100) == Approx(0.003).epsilon(1e-12));  // the last step's
  CHECK(mtp_weight_at(0.3, 100, 100) == 0.0);
  CHECK(mtp_weight_at(0.3, 150, 100) == 0.0);  // past the end (max_steps lowered on resume)
  CHECK(mtp_weight_at(0.5, 1, 4) == 0.375);
}

TEST_CASE("mtp: refused outside causal_lm, at seq_len or more, and its weight without heads",
          "[mtp][config]") {
  CHECK_THROWS_WITH(
      model_config_from({"train.objective=masked_lm", "model.causal=false", "model.mtp_heads=1"}, 10),
      Catch::Contains("model.mtp_heads: belongs to train.objective \"causal_lm\""));
  CHECK_THROWS_WITH(model_config_from({"train.objective=seq2seq", "model.mtp_heads=1"}, 10),
                    Catch::Contains("model.mtp_heads: belongs to train.objective \"causal_lm\""));
  CHECK_THROWS_WITH(model_config_from({"model.mtp_heads=-1"}, 10), Catch::Contains("model.mtp_heads"));
  CHECK_THROWS_WITH(model_config_from({"model.max_seq_len=8", "model.mtp_heads=8"}, 10),
                    Catch::Contains("model.mtp_heads: expected fewer than train.seq_len = 8"));
  CHECK_THROWS_WITH(model_config_from({"train.mtp_weight=0.5"}, 10),
                    Catch::Contains("train.mtp_weight: only read with model.mtp_heads > 0"));
  CHECK_THROWS_WITH(model_config_from({"train.mtp_weight=-1", "model.mtp_heads=1"}, 10),
                    Catch::Contains("train.mtp_weight"));
  CHECK_NOTHROW(model_config_from({"model.mtp_heads=2", "train.mtp_weight=0.5"}, 10));
}

TEST_CASE("mtp: the GGUF export leaves the training-only heads out", "[mtp][gguf]") {
  for (const bool rope : {true, false}) {
    std::vector<std::string> sets = {"model.d_model=8", "model.n_layers=1", "model.n_heads=2",
                                     "model.d_ff=12", "model.max_seq_len=8"};
    if (rope)
      sets.insert(sets.end(),
                  {"model.positional_encoding=rope", "model.norm=rmsnorm", "model.activation=swiglu"});
    const ModelConfig plain = model_config_from(sets, kMtpVocab);
    sets.push_back("model.mtp_heads=2");
    const ModelConfig with = model_config_from(sets, kMtpVocab);
    CHECK(gguf_architecture(with) == gguf_architecture(plain));
    const LanguageModel a(with, 3), b(plain, 3);
    const Tokenizer tok = Tokenizer::from_text(Tokenizer::Kind::Char, "abcdefg", "mtp test");
    const GgufFile fa = gguf_from_model(a, tok), fb = gguf_from_model(b, tok);
    REQUIRE(fa.tensors.size() == fb.tensors.size());
    for (size_t i = 0; i < fa.tensors.size(); ++i) {
      INFO(fa.tensors[i].name);
      CHECK(fa.tensors[i].name == fb.tensors[i].name);
      CHECK(fa.tensors[i].name.find("mtp") == std::string::npos);
    }
  }
}
