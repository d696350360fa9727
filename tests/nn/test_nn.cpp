// Layers: gradient checks of MultiHeadAttention (every mask, head layout and scoring function, self-
// and cross-attention with kdim/vdim != d_model) and EncoderBlock (pre and post norm), parameter
// counts, causality, padding, and the Module API.
// Legend: B batch, T time (Tq, Tk), C = d_model, H heads, Hkv kv heads.
#include <cmath>

#include "gradcheck.h"
#include "model_config.h"
#include "tfm/nn/blocks.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

// The module's parameters as the gradient check's inputs (the same tensors, so perturbing an input
// perturbs the module), with a larger random init so every path carries a visible gradient.
std::vector<Tensor> parameters_of(Module& m, Rng& rng) {
  std::vector<Tensor> out;
  for (auto& [name, t] : m.named_parameters()) {
    t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
    out.push_back(*t);
  }
  return out;
}

// Gradient check of f(inputs...) with respect to the inputs and every parameter of m.
void check_module(Module& m, std::vector<Tensor> inputs,
                  const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  Rng rng(21);
  const size_t n_inputs = inputs.size();
  for (Tensor& p : parameters_of(m, rng)) inputs.push_back(p);
  testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        return f({in.begin(), in.begin() + n_inputs});
      },
      inputs);
}

}  // namespace

TEST_CASE("nn: MultiHeadAttention gradient check for each mask, head layout and scoring", "[nn][gradcheck]") {
  struct Heads {
    int64_t h, kv;
  };
  for (const char* score : {"dot", "additive"})
    for (Heads heads : {Heads{2, 2}, Heads{4, 2}, Heads{4, 1}})
      for (int mask = 0; mask < 3; ++mask) {  // none, causal, key padding
        DYNAMIC_SECTION(score << " H=" << heads.h << " Hkv=" << heads.kv << " mask=" << mask) {
          const ModelConfig cfg = model_config_from(
              {"model.d_model=8", "model.n_heads=" + std::to_string(heads.h),
               "model.n_kv_heads=" + std::to_string(heads.kv), std::string("model.attention_score=") + score},
              0);
          MultiHeadAttention mha(cfg, mask == 1);
          const std::vector<int64_t> lengths =
              mask == 2 ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{};
          Rng rng(5);
          check_module(mha, {Tensor::randn({2, 3, 8}, rng)}, [&](const std::vector<Tensor>& in) {
            return mha.forward(in[0], in[0], in[0], lengths);
          });
        }
      }
}

TEST_CASE("nn: cross-attention with kdim/vdim != d_model, gradient check", "[nn][gradcheck]") {
  for (const char* score : {"dot", "additive"})
    for (bool bias : {true, false}) {
      DYNAMIC_SECTION(score << (bias ? " with bias" : " without bias")) {
        const ModelConfig cfg = model_config_from(
            {"model.d_model=8", "model.n_heads=4", "model.n_kv_heads=2",
             bias ? "model.bias=true" : "model.bias=false", std::string("model.attention_score=") + score},
            0);
        MultiHeadAttention mha(cfg, false, 5, 3);
        Rng rng(6);
        // query (B, Tq=2, C), key (B, Tk=4, kdim), value (B, Tk=4, vdim)
        check_module(
            mha,
            {Tensor::randn({2, 2, 8}, rng), Tensor::randn({2, 4, 5}, rng), Tensor::randn({2, 4, 3}, rng)},
            [&](const std::vector<Tensor>& in) {
              return mha.forward(in[0], in[1], in[2], {4, 3});
            });
      }
    }
}

TEST_CASE("nn: EncoderBlock gradient check, pre and post norm", "[nn][gradcheck]") {
  for (const char* norm : {"pre", "post"})
    for (const char* act : {"gelu", "relu"}) {
      DYNAMIC_SECTION(norm << "-norm " << act) {
        const ModelConfig cfg = model_config_from(
            {"model.d_model=8", "model.n_heads=2", "model.d_ff=12", std::string("model.activation=") + act,
             std::string("model.norm_position=") + norm},
            0);
        EncoderBlock block(cfg, true);
        Rng rng(7);
        check_module(block, {Tensor::randn({2, 3, 8}, rng)},
                     [&](const std::vector<Tensor>& in) { return block.forward(in[0]); });
      }
    }
}

TEST_CASE("nn: parameter counts", "[nn]") {
  const int64_t d = 16;
  for (int64_t h : {1, 2, 4, 8}) {
    ModelConfig cfg;
    cfg.d_model = d;
    cfg.n_heads = h;
    CHECK(MultiHeadAttention(cfg, false).parameter_count() == 4 * d * d + 4 * d);
    cfg.bias = false;
    CHECK(MultiHeadAttention(cfg, false).parameter_count() == 4 * d * d);
  }
  ModelConfig gqa;
  gqa.d_model = d;
  gqa.n_heads = 4;
  gqa.n_kv_heads = 2;  // K and V project to 2 heads of 4: (8, 16) each
  CHECK(MultiHeadAttention(gqa, false).parameter_count() == 2 * d * d + 2 * 8 * d + (d + 8 + 8 + d));
  gqa.n_kv_heads = 1;  // multi-query: one head of 4
  CHECK(MultiHeadAttention(gqa, false).parameter_count() == 2 * d * d + 2 * 4 * d + (d + 4 + 4 + d));
  gqa.bias = false;  // keys 5 wide, values 3
  CHECK(MultiHeadAttention(gqa, false, 5, 3).parameter_count() == 2 * d * d + 4 * 5 + 4 * 3);
  gqa.attention_score = AttentionScore::Additive;  // one w_v of Dk = 4 weights per head
  CHECK(MultiHeadAttention(gqa, false, 5, 3).parameter_count() == 2 * d * d + 4 * 5 + 4 * 3 + 4 * 4);
  ModelConfig block;
  block.d_model = d;
  block.n_heads = 2;  // d_ff defaults to 4 d
  CHECK(EncoderBlock(block, false).parameter_count() ==
        (4 * d * d + 4 * d) + (2 * 4 * d * d + 4 * d + d) + 4 * d);
}

TEST_CASE("nn: names follow the reference, flat buffers hold every parameter", "[nn]") {
  const ModelConfig cfg = model_config_from({"model.d_model=4", "model.n_heads=2"}, 0);
  EncoderBlock block(cfg, false);
  std::vector<std::string> names;
  for (auto& [name, t] : block.named_parameters()) names.push_back(name);
  const std::vector<std::string> expected = {
      "ln1.weight",     "ln1.bias",     "ln2.weight",     "ln2.bias",     "attn.wq.weight", "attn.wq.bias",
      "attn.wk.weight", "attn.wk.bias", "attn.wv.weight", "attn.wv.bias", "attn.wo.weight", "attn.wo.bias",
      "fc1.weight",     "fc1.bias",     "fc2.weight",     "fc2.bias"};
  CHECK(names == expected);
  const ParameterBuffers buf = flatten_parameters(block);
  CHECK(buf.size == block.parameter_count());
  const auto params = block.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = *params[i].second;
    CHECK(t.data() == buf.values->data() + buf.offsets[i]);
    CHECK(t.grad().data() == buf.grads->data() + buf.offsets[i]);
  }
  CHECK(block.ln1.weight.at({0}) == 1.0f);  // values survive the move into the flat buffer
  // A backward pass accumulates straight into the flat gradient buffer.
  Rng rng(1);
  sum(block.forward(Tensor::randn({1, 3, 4}, rng))).backward();
  double total = 0.0;
  for (int64_t i = 0; i < buf.size; ++i) total += std::fabs(buf.grads->data()[i]);
  CHECK(total > 0.0);
}

TEST_CASE("nn: causality - changing position j never changes outputs before j", "[nn]") {
  for (const char* score : {"dot", "additive"}) {
    const ModelConfig cfg = model_config_from(
        {"model.d_model=8", "model.n_heads=2", std::string("model.attention_score=") + score}, 0);
    EncoderBlock block(cfg, true);
    Rng rng(8);
    parameters_of(block, rng);
    const int64_t T = 5;
    const Tensor x = Tensor::randn({1, T, 8}, rng);
    const Tensor y = block.forward(x);
    for (int64_t j = 0; j < T; ++j) {
      Tensor x2 = x.clone();
      // Not a constant shift: LayerNorm would remove that.
      for (int64_t c = 0; c < 8; ++c) x2.data()[j * 8 + c] += static_cast<float>(c) - 3.5f;
      const Tensor y2 = block.forward(x2);
      for (int64_t t = 0; t < T; ++t) {
        float diff = 0.0f;
        for (int64_t c = 0; c < 8; ++c) diff = std::max(diff, std::fabs(y.at({0, t, c}) - y2.at({0, t, c})));
        INFO(score << ": changed " << j << ", output " << t);
        if (t < j)
          CHECK(diff == 0.0f);
        else
          CHECK(diff > 0.0f);
      }
    }
  }
}

TEST_CASE("nn: padded keys get zero attention and do not affect the output", "[nn]") {
  for (const char* score : {"dot", "additive"}) {
    const ModelConfig cfg = model_config_from(
        {"model.d_model=8", "model.n_heads=2", std::string("model.attention_score=") + score}, 0);
    MultiHeadAttention mha(cfg, false);
    mha.record = true;
    Rng rng(9);
    parameters_of(mha, rng);
    const Tensor x = Tensor::randn({2, 4, 8}, rng);
    const std::vector<int64_t> lengths = {4, 2};
    const Tensor y = mha.forward(x, x, x, lengths);
    const Tensor p = mha.last_probabilities;  // (B, H, Tq, Tk)
    REQUIRE(p.shape() == Shape{2, 2, 4, 4});
    REQUIRE(mha.last_head_outputs.shape() == Shape{2, 4, 2, 4});
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i) {
        CHECK(p.at({1, h, i, 2}) == 0.0f);
        CHECK(p.at({1, h, i, 3}) == 0.0f);
        CHECK(p.at({1, h, i, 0}) + p.at({1, h, i, 1}) == Approx(1.0f));
      }
    // Changing the padded keys/values of sequence 1 leaves its output alone.
    Tensor kv = x.clone();
    for (int64_t c = 0; c < 8; ++c) kv.data()[(1 * 4 + 3) * 8 + c] = 100.0f;
    const Tensor y2 = mha.forward(x, kv, kv, lengths);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t c = 0; c < 8; ++c) CHECK(y2.at({1, i, c}) == y.at({1, i, c}));
  }
}

TEST_CASE("nn: attention dropout is active only in training mode", "[nn]") {
  const ModelConfig cfg =
      model_config_from({"model.d_model=8", "model.n_heads=2", "model.attention_dropout=0.5"}, 0);
  MultiHeadAttention mha(cfg, false);
  Rng rng(10), drop_rng(3);
  parameters_of(mha, rng);
  mha.set_rng(&drop_rng);
  const Tensor x = Tensor::randn({1, 4, 8}, rng);
  const std::vector<float> eval1 = mha.forward(x, x, x).to_vector();
  CHECK(eval1 == mha.forward(x, x, x).to_vector());
  mha.set_training(true);
  CHECK(mha.training());
  CHECK(mha.wq.training());
  CHECK(mha.forward(x, x, x).to_vector() != eval1);
  mha.set_rng(nullptr);
  CHECK_THROWS_WITH(mha.forward(x, x, x), Catch::Contains("set_rng"));
}

TEST_CASE("nn: sinusoidal table follows the formula", "[nn]") {
  const Tensor table = sinusoidal_table(10, 6);
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const double angle = i / std::pow(10000.0, 2.0 * j / 6);
      CHECK(table.at({i, 2 * j}) == static_cast<float>(std::sin(angle)));
      CHECK(table.at({i, 2 * j + 1}) == static_cast<float>(std::cos(angle)));
    }
  SinusoidalPositionalEncoding pe(10, 6);
  CHECK(pe.parameter_count() == 0);
  CHECK(pe.forward(3, 2).at({0, 1}) == table.at({3, 1}));
}

TEST_CASE("nn: position tables are built as far as positions are used, bit for bit the whole table's",
          "[nn]") {
  // model.max_seq_len 10^8 (a 12 GB sinusoidal table at C = 32): nothing is built up front.
  SinusoidalPositionalEncoding huge(100000000, 32);
  CHECK(huge.rows_built() == 0);
  CHECK(huge.forward(0, 32).shape() == Shape{32, 32});
  CHECK(huge.rows_built() == 32);
  // Further positions grow it (at least doubling); every row is the full table's.
  SinusoidalPositionalEncoding pe(100, 6);
  const Tensor full = sinusoidal_table(100, 6);
  CHECK(pe.forward(0, 5).to_vector() == narrow(full, 0, 0, 5).to_vector());
  CHECK(pe.rows_built() == 5);
  const Tensor early = pe.forward(2, 3);
  CHECK(pe.forward(20, 1).to_vector() == narrow(full, 0, 20, 1).to_vector());
  CHECK(pe.rows_built() == 21);
  CHECK(pe.forward(21, 1).to_vector() == narrow(full, 0, 21, 1).to_vector());
  CHECK(pe.rows_built() == 42);
  CHECK(pe.forward(60, 40).to_vector() == narrow(full, 0, 60, 40).to_vector());
  CHECK(pe.rows_built() == 100);
  CHECK(early.to_vector() == narrow(full, 0, 2, 3).to_vector());  // a view from before
  CHECK_THROWS_WITH(pe.forward(99, 2), Catch::Contains("exceed max_seq_len 100"));
  // RoPE's tables alike: a RoPE attention layer of a 10^8 context runs on 8 positions at once.
  ModelConfig c;
  c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 16, c.max_seq_len = 100000000;
  c.positional_encoding = PositionalEncoding::Rope;
  MultiHeadAttention rope_layer(c, true);
  Rng rng(3);
  const Tensor x = Tensor::randn({1, 8, 8}, rng);
  ModelConfig short_context = c;
  short_context.max_seq_len = 8;
  MultiHeadAttention same(short_context, true);
  for (const auto& [name, p] : same.named_parameters()) {
    p->copy_from(Tensor::randn(p->shape(), rng));
    for (const auto& [other, q] : rope_layer.named_parameters())
      if (name == other) q->copy_from(*p);
  }
  CHECK(rope_layer.self_attention(x, {}).to_vector() == same.self_attention(x, {}).to_vector());
}

TEST_CASE("nn: bad configurations name the layer and the key", "[nn]") {
  ModelConfig cfg;
  cfg.d_model = 8;
  cfg.n_heads = 3;
  CHECK_THROWS_WITH(
      MultiHeadAttention(cfg, false),
      Catch::Contains("MultiHeadAttention: model.d_model: expected a multiple of model.n_heads = 3"));
  cfg.n_heads = 4;
  cfg.n_kv_heads = 3;
  CHECK_THROWS_WITH(MultiHeadAttention(cfg, false), Catch::Contains("model.n_kv_heads: expected a divisor"));
  cfg.n_kv_heads = 2;
  cfg.head_gating = HeadGating::TopK;
  cfg.head_topk = 5;
  CHECK_THROWS_WITH(EncoderBlock(cfg, false),
                    Catch::Contains("model.head_topk: expected at most model.n_heads = 4"));
  // A variant's name outside its enum is no value at all (the config table rejects it by key).
  CHECK_FALSE(enum_from<AttentionScore>("bilinear").has_value());
  CHECK(enum_from<AttentionScore>("additive") == AttentionScore::Additive);
  CHECK(name_of(HeadMixing::TalkingHeads) == "talking_heads");
}

TEST_CASE("nn: forward_cached checks x and the caches up front, naming itself and the shapes", "[nn]") {
  // d_model 16, 4 heads of 4, 2 key/value heads: the caches are 8 wide.
  const ModelConfig c = model_config_from({"model.d_model=16", "model.n_heads=4", "model.n_kv_heads=2"}, 0);
  MultiHeadAttention mha(c, true);
  Rng rng(36);
  parameters_of(mha, rng);
  NoGradGuard no_grad;
  const auto call = [&](const Tensor& x, Tensor k, Tensor v, int64_t past) -> std::string {
    try {
      mha.forward_cached(x, k, v, past);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string expected =
      "MultiHeadAttention::forward_cached: expected x (B, T, 16) and caches k and v (B, P, 8) of one length "
      "P, "
      "on a self-attention layer (kdim = vdim = d_model), got x ";
  const Tensor x = Tensor::randn({1, 1, 16}, rng), k = Tensor::zeros({1, 8, 8}), v = Tensor::zeros({1, 8, 8});
  CHECK(call(Tensor::randn({16}, rng), k, v, 0) ==
        expected + "[16], k [1, 8, 8], v [1, 8, 8], kdim 16, vdim 16");
  CHECK(call(Tensor::randn({1, 1, 12}, rng), k, v, 0) ==
        expected + "[1, 1, 12], k [1, 8, 8], v [1, 8, 8], kdim 16, vdim 16");
  CHECK(call(x, Tensor::zeros({1, 8, 16}), Tensor::zeros({1, 8, 16}), 0) ==
        expected + "[1, 1, 16], k [1, 8, 16], v [1, 8, 16], kdim 16, vdim 16");
  CHECK(call(Tensor::randn({2, 1, 16}, rng), k, v, 0) ==
        expected + "[2, 1, 16], k [1, 8, 8], v [1, 8, 8], kdim 16, vdim 16");
  CHECK(call(x, k, Tensor::zeros({1, 2, 8}), 0) ==
        expected + "[1, 1, 16], k [1, 8, 8], v [1, 2, 8], kdim 16, vdim 16");
  CHECK(call(x, Tensor(), Tensor(), 0) ==
        expected + "[1, 1, 16], k undefined, v undefined, kdim 16, vdim 16");
  CHECK(call(Tensor(), k, v, 0) == expected + "undefined, k [1, 8, 8], v [1, 8, 8], kdim 16, vdim 16");
  CHECK(call(x, k, v, 8) ==
        "MultiHeadAttention::forward_cached: 8 cached + 1 new positions exceed the cache [1, 8, 8]");
  CHECK(call(x, k, v, 7).empty());
  // Nothing was written by a refused call: a cache too short for its values was left as it was.
  Tensor short_v = Tensor::zeros({1, 2, 8}), full_k = Tensor::zeros({1, 8, 8});
  call(x, full_k, short_v, 0);
  CHECK(full_k.to_vector() == std::vector<float>(64, 0.0f));
}

TEST_CASE("nn: additive scoring equals w_v^T tanh(W_q q + W_k k) written out with loops", "[nn]") {
  const ModelConfig cfg = model_config_from(
      {"model.d_model=8", "model.n_heads=4", "model.n_kv_heads=2", "model.attention_score=additive"}, 0);
  MultiHeadAttention mha(cfg, true, 5, 3);
  mha.record = true;
  Rng rng(12);
  parameters_of(mha, rng);
  const int64_t B = 2, Tq = 3, Tk = 4, H = 4, Dk = 2;
  const Tensor query = Tensor::randn({B, Tq, 8}, rng), key = Tensor::randn({B, Tk, 5}, rng);
  const Tensor value = Tensor::randn({B, Tk, 3}, rng);
  const std::vector<int64_t> lengths = {4, 3};
  const Tensor out = mha.forward(query, key, value, lengths);
  NoGradGuard no_grad;
  const Tensor q = mha.wq.forward(query), k = mha.wk.forward(key), v = mha.wv.forward(value);
  std::vector<float> o(static_cast<size_t>(B * Tq * H * Dk), 0.0f);  // (B, Tq, H*Dv) before Wo
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / 2;
      for (int64_t i = 0; i < Tq; ++i) {
        // Query i sits at absolute position i + Tk - Tq.
        const int64_t visible = std::min(i + Tk - Tq + 1, lengths[b]);
        std::vector<double> s(static_cast<size_t>(visible));
        double mx = -1e300, total = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          for (int64_t e = 0; e < Dk; ++e)
            s[j] += mha.score_v.at({h, e}) * std::tanh(q.at({b, i, h * Dk + e}) + k.at({b, j, g * Dk + e}));
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) total += (x = std::exp(x - mx));
        for (int64_t j = 0; j < Tk; ++j) {
          const double p = j < visible ? s[j] / total : 0.0;
          CHECK(mha.last_probabilities.at({b, h, i, j}) == Approx(p).margin(1e-6));
          for (int64_t e = 0; e < Dk; ++e)
            o[(b * Tq + i) * H * Dk + h * Dk + e] += p * v.at({b, j, g * Dk + e});
        }
      }
    }
  const Tensor expected = mha.wo.forward(Tensor::from_vector(o, {B, Tq, H * Dk}));
  const std::vector<float> got = out.to_vector(), want = expected.to_vector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
}

TEST_CASE("nn: the modern options' layers, gradient checks (RMSNorm, SwiGLU, QK-norm, RoPE)",
          "[nn][gradcheck]") {
  const ModelConfig cfg =
      model_config_from({"model.d_model=8", "model.n_heads=2", "model.d_ff=6", "model.max_seq_len=8",
                         "model.norm_eps=1e-4", "model.norm=rmsnorm", "model.activation=swiglu",
                         "model.qk_norm=true", "model.positional_encoding=rope", "model.rope_theta=100"},
                        0);
  SECTION("RMSNorm") {
    Norm norm(8, cfg);
    CHECK(norm.parameter_count() == 8);  // a gain, no bias
    Rng rng(31);
    check_module(norm, {Tensor::randn({2, 3, 8}, rng)},
                 [&](const std::vector<Tensor>& in) { return norm.forward(in[0]); });
  }
  SECTION("SwiGLU feed-forward: fc1 the gate, fc3 the up projection") {
    FeedForward ffn(8, 6, Activation::SwiGLU, true);
    std::vector<std::string> names;
    for (auto& [name, t] : ffn.named_parameters()) names.push_back(name);
    CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                            "fc3.bias"});
    Rng rng(32);
    check_module(ffn, {Tensor::randn({2, 3, 8}, rng)},
                 [&](const std::vector<Tensor>& in) { return ffn.forward(in[0]); });
  }
  for (const bool causal : {true, false})
    for (const int64_t kv : {int64_t{2}, int64_t{1}}) {
      DYNAMIC_SECTION("self-attention with QK-norm and RoPE, causal " << causal << ", Hkv " << kv) {
        ModelConfig c = cfg;
        c.n_kv_heads = kv;
        MultiHeadAttention mha(c, causal);
        CHECK(mha.q_norm->weight.shape() == Shape{4});  // one gain of Dk for Q, one for K
        Rng rng(33);
        const std::vector<int64_t> lengths = causal ? std::vector<int64_t>{} : std::vector<int64_t>{4, 2};
        check_module(mha, {Tensor::randn({2, 4, 8}, rng)},
                     [&](const std::vector<Tensor>& in) { return mha.self_attention(in[0], lengths); });
      }
    }
  SECTION("an encoder block of all of them, post-norm") {
    ModelConfig c = cfg;
    c.norm_position = NormPosition::Post;
    EncoderBlock block(c, true);
    Rng rng(34);
    check_module(block, {Tensor::randn({2, 3, 8}, rng)},
                 [&](const std::vector<Tensor>& in) { return block.forward(in[0]); });
  }
}

TEST_CASE("nn: RoPE makes attention depend on relative positions only", "[nn]") {
  // With RoPE (and no other positions), q_m . k_n depends on m - n alone (Su et al. 2021, eq. 16): the
  // same tokens shifted by two positions give the same attention probabilities.
  const ModelConfig c = model_config_from(
      {"model.d_model=8", "model.n_heads=2", "model.max_seq_len=12", "model.positional_encoding=rope"}, 0);
  MultiHeadAttention mha(c, true);
  mha.record = true;
  Rng rng(35);
  parameters_of(mha, rng);
  const Tensor x = Tensor::randn({1, 4, 8}, rng);
  NoGradGuard no_grad;
  Tensor cache_k = Tensor::zeros({1, 12, 8}), cache_v = Tensor::zeros({1, 12, 8});
  mha.forward_cached(x, cache_k, cache_v, 0);
  const std::vector<float> at0 = mha.last_probabilities.to_vector();  // (1, H, 4, 4)
  Tensor shifted_k = Tensor::zeros({1, 12, 8}), shifted_v = Tensor::zeros({1, 12, 8});
  const Tensor pad = Tensor::zeros({1, 2, 8});
  mha.forward_cached(pad, shifted_k, shifted_v, 0);  // positions 0, 1 hold something else
  // The same 4 tokens at positions 2..5, attending only among themselves: hide the first two keys.
  mha.forward_cached(x, shifted_k, shifted_v, 2);
  const Tensor p = mha.last_probabilities;  // (1, H, 4, 6)
  // Renormalised over the keys 2..5, the probabilities equal the unshifted ones.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 4; ++i) {
      double total = 0.0;
      for (int64_t j = 2; j <= 2 + i; ++j) total += p.at({0, h, i, j});
      for (int64_t j = 0; j <= i; ++j)
        CHECK(p.at({0, h, i, 2 + j}) / total == Approx(at0[(h * 4 + i) * 4 + j]).margin(1e-5));
    }
}
