// Head mixing (docs/heads.md): talking-heads attention and group_mlp's grouped mixing with an MLP output.
// Identity mixing gives the standard layer; gradient checks of every variant with random mixing;
// the PyTorch fixtures of scripts/dev/make_fixtures.py (head_mixing_fixture); KV-cached decoding equal to
// the full forward (language model and encoder-decoder); initialisation, weight decay, parameter and
// FLOP counts; and through the CLI: tfm info's count, export + reload, tfm gradcheck.
// Legend: B batch, T time (Tq, Tk), C = d_model, H heads, Hkv kv heads, g groups, n = H / g.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "fixture_compare.h"
#include "gradcheck.h"
#include "model_config.h"
#include "tfm/config/config.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/safetensors.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"
#include "tfm/training/preflight.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

// (g, n, n) <- g identity blocks: what Model::adopt_parameters gives a mixing matrix.
void set_identity(Tensor& mix) {
  const int64_t n = mix.size(1);
  mix.fill_(0.0f);
  for (int64_t i = 0; i < mix.size(0) * n; ++i) mix.data()[i * n + i % n] = 1.0f;
}

ModelConfig attention_config(const std::string& mixing, const std::string& score, int64_t heads, int64_t kv) {
  return model_config_from(
      {"model.d_model=8", "model.n_heads=" + std::to_string(heads), "model.n_kv_heads=" + std::to_string(kv),
       "model.attention_score=" + score, "model.head_mixing=" + mixing, "model.head_groups=2"},
      0);
}

using testing::max_abs_diff;

ModelConfig tiny_lm(const std::string& mixing, int64_t kv_heads, const std::string& score = "dot") {
  return model_config_from(
      {"model.d_model=8", "model.n_layers=2", "model.n_heads=4",
       "model.n_kv_heads=" + std::to_string(kv_heads), "model.d_ff=12", "model.max_seq_len=8",
       "model.attention_score=" + score, "model.head_mixing=" + mixing, "model.head_groups=2"},
      7);
}

}  // namespace

TEST_CASE("head mixing: identity mixing gives the standard layer", "[head_mixing]") {
  // talking_heads with identity matrices is the standard layer, to float roundoff (the standard dot path
  // is the fused kernel, the mixed one composed GEMMs); group_mlp is out_mlp over the standard heads.
  struct Heads {
    int64_t h, kv;
  };
  for (const char* score : {"dot", "additive"})
    for (Heads heads : {Heads{4, 4}, Heads{4, 2}, Heads{4, 1}})
      for (int mask = 0; mask < 2; ++mask) {  // causal, key padding
        DYNAMIC_SECTION(score << " H=" << heads.h << " Hkv=" << heads.kv
                              << (mask == 0 ? " causal" : " padding")) {
          MultiHeadAttention standard(attention_config("none", score, heads.h, heads.kv), mask == 0);
          MultiHeadAttention talking(attention_config("talking_heads", score, heads.h, heads.kv), mask == 0);
          MultiHeadAttention grouped(attention_config("group_mlp", score, heads.h, heads.kv), mask == 0);
          Rng rng(3);
          for (auto& [name, t] : standard.named_parameters())
            t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
          for (MultiHeadAttention* m : {&talking, &grouped}) {
            for (auto& [name, t] : m->named_parameters()) {
              if (name.rfind("mix_", 0) == 0) {
                set_identity(*t);
              } else if (name.rfind("out_mlp", 0) == 0) {
                t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
              } else {
                bool found = false;
                for (auto& [sname, s] : standard.named_parameters())
                  if (sname == name) t->copy_from(*s), found = true;
                REQUIRE(found);
              }
            }
          }
          const std::vector<int64_t> lengths =
              mask == 1 ? std::vector<int64_t>{5, 2} : std::vector<int64_t>{};
          const Tensor x = Tensor::randn({2, 5, 8}, rng);
          NoGradGuard no_grad;
          standard.record = talking.record = grouped.record = true;
          const Tensor expected = standard.forward(x, x, x, lengths);
          const Tensor got = talking.forward(x, x, x, lengths);
          CAPTURE(max_abs_diff(got, expected));
          CHECK(max_abs_diff(got, expected) <= 1e-6);
          CHECK(max_abs_diff(talking.last_probabilities, standard.last_probabilities) <= 1e-6);
          // group_mlp: out_mlp (C -> C -> C, GELU) over the same concatenated heads.
          const Tensor via_mlp = grouped.forward(x, x, x, lengths);
          const Tensor heads_out = reshape(standard.last_head_outputs, {2, 5, 8});
          CHECK(max_abs_diff(via_mlp, grouped.out_mlp->forward(heads_out)) <= 1e-6);
        }
      }
}

TEST_CASE("head mixing: gradient checks of each variant with random mixing",
          "[slow][head_mixing][gradcheck]") {
  // Every parameter (mixing matrices included) is drawn N(0, 0.5^2): far from the identity, so the
  // mixing really mixes. Float32 forward, double accumulation, gradcheck.h's tolerances.
  struct Heads {
    int64_t h, kv;
  };
  for (const char* mixing : {"talking_heads", "group_mlp"})
    for (const char* score : {"dot", "additive"})
      for (Heads heads : {Heads{4, 4}, Heads{4, 2}, Heads{4, 1}})
        for (int mask = 0; mask < 2; ++mask) {  // causal, key padding (one row fully visible, one short)
          DYNAMIC_SECTION(mixing << " " << score << " H=" << heads.h << " Hkv=" << heads.kv
                                 << (mask == 0 ? " causal" : " padding")) {
            MultiHeadAttention mha(attention_config(mixing, score, heads.h, heads.kv), mask == 0);
            const std::vector<int64_t> lengths =
                mask == 1 ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{};
            Rng rng(21);
            std::vector<Tensor> inputs = {Tensor::randn({2, 3, 8}, rng)};
            for (auto& [name, t] : mha.named_parameters()) {
              t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
              inputs.push_back(*t);
            }
            testing::check_gradients(
                [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], lengths); },
                inputs);
          }
        }
  SECTION("cross-attention, kdim/vdim != d_model, Tk != Tq, key padding") {
    for (const char* mixing : {"talking_heads", "group_mlp"}) {
      MultiHeadAttention mha(attention_config(mixing, "dot", 4, 2), false, 6, 5);
      Rng rng(22);
      std::vector<Tensor> inputs = {Tensor::randn({2, 3, 8}, rng), Tensor::randn({2, 4, 6}, rng),
                                    Tensor::randn({2, 4, 5}, rng)};
      for (auto& [name, t] : mha.named_parameters()) {
        t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
        inputs.push_back(*t);
      }
      testing::check_gradients(
          [&](const std::vector<Tensor>& in) {
            return mha.forward(in[0], in[1], in[2], {4, 2});
          },
          inputs);
    }
  }
}

TEST_CASE("reference: head mixing layers match PyTorch", "[reference][head_mixing]") {
  // scripts/dev/make_fixtures.py's head_mixing_fixture: the layer written out in PyTorch (einsum mixing
  // over heads), causal mask and key padding, random non-identity mixing; self-attention x = q = k = v.
  for (const char* name : {"head_mixing_talking_heads_gqa", "head_mixing_group_mlp_additive"}) {
    SECTION(name) {
      const nlohmann::json fx = testing::load_fixture(name);
      ModelConfig c;
      c.d_model = fx.at("d_model");
      c.n_heads = fx.at("n_heads");
      c.n_kv_heads = fx.at("n_kv_heads");
      c.attention_score = *enum_from<AttentionScore>(fx.at("score").get<std::string>());
      c.head_mixing = *enum_from<HeadMixing>(fx.at("mixing").get<std::string>());
      c.head_groups = fx.at("groups");
      MultiHeadAttention mha(c, true);
      mha.record = true;
      auto params = testing::load_parameters(mha, fx);
      Tensor x = testing::to_tensor(fx.at("x"));
      x.set_requires_grad(true);
      const Tensor out = mha.forward(x, x, x, fx.at("key_lengths").get<std::vector<int64_t>>());
      const double out_diff = testing::max_diff(out, fx.at("out"));
      const double prob_diff = testing::max_diff(mha.last_probabilities, fx.at("probabilities"));
      testing::report(std::string(name) + " output", out_diff);
      testing::report(std::string(name) + " probabilities", prob_diff);
      CHECK(out_diff <= 1e-5);
      CHECK(prob_diff <= 1e-5);
      sum(out * testing::to_tensor(fx.at("r"))).backward();
      for (auto& [pname, t] : params) testing::check_gradient(pname, t->grad(), fx.at("grads").at(pname));
      testing::check_gradient("x", x.grad(), fx.at("grads").at("x"));
    }
  }
}

TEST_CASE("head mixing: KV-cached decoding equals the full forward", "[head_mixing][model]") {
  struct Variant {
    const char* name;
    ModelConfig config;
  };
  const Variant variants[] = {
      {"talking_heads, GQA", tiny_lm("talking_heads", 2)},
      {"talking_heads, additive", tiny_lm("talking_heads", 4, "additive")},
      {"group_mlp, MQA", tiny_lm("group_mlp", 1)},
  };
  for (const Variant& variant : variants) {
    SECTION(variant.name) {
      LanguageModel model(variant.config, 5);
      Rng rng(6);
      Tensor values = model.flat_values();  // away from the init (and the identity mixing)
      values.copy_from(Tensor::randn(values.shape(), rng, 0.0f, 0.4f));
      const int64_t B = 2, T = 7, V = variant.config.vocab_size;
      std::vector<int32_t> tokens(B * T);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
      NoGradGuard no_grad;
      const Tensor full = model.forward(tokens, B, T);  // (B, T, V)
      KVCache cache = model.make_cache(B);
      int64_t t = 0;
      double worst = 0.0;
      for (int64_t step : {1, 1, 2, 1, 1, 1}) {
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < step; ++i) chunk.push_back(tokens[b * T + t + i]);
        const Tensor logits = model.forward_cached(cache, chunk, B, step);  // (B, step, V)
        worst = std::max(worst, max_abs_diff(logits, narrow(full, 1, t, step)));
        t += step;
      }
      CAPTURE(worst);
      CHECK(worst <= 1e-5);
    }
  }
  SECTION("encoder-decoder: cached self-attention and projected cross-attention") {
    for (const char* mixing : {"talking_heads", "group_mlp"}) {
      ModelConfig c = tiny_lm(mixing, 2);
      c.vocab_size = 13;
      c.source_vocab_size = 11;
      c.n_layers = 0;
      c.n_encoder_layers = 2;
      c.n_decoder_layers = 2;
      c.max_seq_len = 12;
      Seq2SeqModel model(c, 4);
      Rng rng(9);
      Tensor values = model.flat_values();
      values.copy_from(Tensor::randn(values.shape(), rng, 0.0f, 0.3f));
      const int64_t B = 3, S = 5, T = 6;
      std::vector<int32_t> src(B * S), tgt(B * T);
      for (int32_t& id : src) id = static_cast<int32_t>(4 + rng.below(7));
      for (int32_t& id : tgt) id = static_cast<int32_t>(1 + rng.below(12));
      const std::vector<int64_t> lengths = {5, 2, 3};
      NoGradGuard no_grad;
      const Tensor full = model.forward(src, lengths, B, S, tgt, T);  // (B, T, V)
      Seq2SeqCache cache = model.make_cache(model.encode(src, lengths, B, S), lengths);
      int64_t start = 0;
      for (int64_t n : {2, 1, 3}) {
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          chunk.insert(chunk.end(), tgt.begin() + b * T + start, tgt.begin() + b * T + start + n);
        INFO(mixing << " positions " << start << " + " << n);
        CHECK(max_abs_diff(model.forward_cached(cache, chunk, n), narrow(full, 1, start, n)) <= 1e-5);
        start += n;
      }
    }
  }
}

TEST_CASE("head mixing: recording, head masks and padding", "[head_mixing]") {
  MultiHeadAttention mha(attention_config("talking_heads", "dot", 4, 2), false);
  Rng rng(4);
  for (auto& [name, t] : mha.named_parameters()) t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
  const Tensor x = Tensor::randn({2, 5, 8}, rng);
  const std::vector<int64_t> lengths = {5, 3};
  NoGradGuard no_grad;
  mha.record = true;
  const Tensor out = mha.forward(x, x, x, lengths);
  const Tensor p = mha.last_probabilities;  // (B, H, Tq, Tk): the mixed probabilities
  REQUIRE(p.shape() == Shape{2, 4, 5, 5});
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 3; j < 5; ++j) CHECK(p.at({1, h, i, j}) == 0.0f);  // padded keys stay unseen
  // The recorded probabilities are the ones applied: out_h = P'_h V_{kv(h)} before Wo.
  const Tensor v = mha.wv.forward(x);              // (B, Tk, Hkv*Dv)
  const Tensor heads_out = mha.last_head_outputs;  // (B, Tq, H, Dv)
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 2; ++d) {
      double s = 0;
      for (int64_t j = 0; j < 5; ++j) s += p.at({0, h, 2, j}) * v.at({0, j, (h / 2) * 2 + d});
      CHECK(heads_out.at({0, 2, h, d}) == Approx(s).margin(1e-5));
    }
  // A gate of 0 removes a head's output after the mixing.
  mha.head_gate = Tensor::from_vector({1, 0, 1, 1}, {4});
  mha.forward(x, x, x, lengths);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t d = 0; d < 2; ++d) CHECK(mha.last_head_outputs.at({1, i, 1, d}) == 0.0f);
  mha.head_gate = Tensor();
  // Padded keys and values change nothing (the queries stay x).
  Tensor y = x.clone();
  for (int64_t j = 3; j < 5; ++j)
    for (int64_t d = 0; d < 8; ++d) y.data()[(5 + j) * 8 + d] = 9.0f;
  CHECK(max_abs_diff(mha.forward(x, y, y, lengths), out) == 0.0);
}

TEST_CASE("head mixing: initialisation, weight decay, names, parameter and FLOP counts",
          "[head_mixing][model]") {
  for (const char* mixing : {"talking_heads", "group_mlp"}) {
    DYNAMIC_SECTION(mixing) {
      ModelConfig c = tiny_lm(mixing, 2);
      c.d_model = 64;
      c.head_groups = 4;  // group_mlp: 4 groups of 1 head; talking_heads ignores it (one group of 4)
      const LanguageModel model(c, 1);
      const int64_t g = std::string(mixing) == "group_mlp" ? 4 : 1, n = 4 / g;
      for (const char* which : {"mix_logits", "mix_weights"}) {
        const NamedParameter* p = model.find_parameter(std::string("blocks.1.attn.") + which);
        REQUIRE(p != nullptr);
        CHECK(p->value.shape() == Shape{g, n, n});
        CHECK_FALSE(p->decay);  // decaying an identity mixing towards zero would switch attention off
        for (int64_t i = 0; i < g * n * n; ++i)
          CHECK(p->value.data()[i] == ((i % (n * n)) % (n + 1) == 0 ? 1.0f : 0.0f));
      }
      const bool mlp = std::string(mixing) == "group_mlp";
      CHECK((model.find_parameter("blocks.0.attn.wo.weight") != nullptr) == !mlp);
      CHECK((model.find_parameter("blocks.0.attn.out_mlp.fc2.weight") != nullptr) == mlp);
      if (mlp) {  // fc2 writes into the residual stream: 0.02 / sqrt(2 * 2 layers)
        const Tensor w = model.find_parameter("blocks.0.attn.out_mlp.fc2.weight")->value;
        double ss = 0;
        for (float v : w.to_vector()) ss += static_cast<double>(v) * v;
        CHECK(std::sqrt(ss / static_cast<double>(w.numel())) == Approx(0.01).epsilon(0.1));
        CHECK(model.find_parameter("blocks.0.attn.out_mlp.fc1.weight")->decay);
      }
      // Counts: from the shapes (preflight) = the model's; the breakdown puts mixing and MLP in attention.
      CHECK(parameter_count(c) == static_cast<double>(model.parameter_count()));
      int64_t attention = 0;
      for (const auto& [what, count] : model.parameter_breakdown())
        if (what == "attention") attention = count;
      const int64_t C = 64, kv = 2 * 16;
      const int64_t expected_attention =
          2 * (C * C + C + 2 * (C * kv + kv) + (mlp ? 2 * (C * C + C) : C * C + C) + 2 * g * n * n);
      CHECK(attention == expected_attention);
      // FLOPs: Wo (2 C^2) becomes the MLP (4 C^2); each of the two mixes costs 2 n multiply-adds ... per
      // (query head, key): 2 * 2 * H * n * T per token.
      ModelConfig plain = c;
      plain.head_mixing = HeadMixing::None;
      const double T = 8, extra = (mlp ? 2.0 * C * C : 0.0) + 2.0 * 2.0 * 4 * static_cast<double>(n) * T;
      CHECK(LanguageModel::flops_per_token(c, 8).forward_per_token ==
            Approx(LanguageModel::flops_per_token(plain, 8).forward_per_token + 2 * extra));
    }
  }
}
