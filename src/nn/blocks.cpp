// Encoder and decoder blocks.
// Legend: B batch, T time, C = d_model.
#include "tfm/nn/blocks.h"

#include "tfm/engine/ops.h"

namespace tfm {

namespace {

// One residual sub-layer of a block: pre-norm x + Drop(f(LN(x))), post-norm LN(x + Drop(f(x))).
// A tensor read by the sub-layer's backward is released once the sub-layer has run (its backward
// recomputes it from the norm's saved input, so the step keeps one (B, T, C) per norm): pre-norm's
// LN(x) always; post-norm's x when release_input (the previous sub-layer's norm output, not the
// block's input).
template <class F>
Tensor residual_sublayer(const Module& block, const ModelConfig& c, const Norm& ln, const Tensor& x,
                         bool release_input, F&& f) {
  const bool drop = block.training() && c.dropout > 0.0f;
  TFM_CHECK(!drop || block.rng(), "Block", "dropout needs set_rng()");
  auto residual = [&](const Tensor& t) { return drop ? dropout(t, c.dropout, true, *block.rng()) : t; };
  if (c.norm_position == NormPosition::Pre) {
    const Tensor a = ln.forward(x);       // (B, T, C)
    const Tensor y = x + residual(f(a));  // (B, T, C)
    a.release_values();
    return y;
  }
  const Tensor y = ln.forward(x + residual(f(x)));  // (B, T, C)
  if (release_input) x.release_values();
  return y;
}

// What a block keeps itself, per token: its input and the residual between the sub-layers, and with
// post-norm the first norm's output too.
double block_floats_per_token(const ModelConfig& c) {
  return (c.norm_position == NormPosition::Pre ? 2.0 : 3.0) * static_cast<double>(c.d_model);
}
}  // namespace

EncoderBlock::EncoderBlock(const ModelConfig& config, bool causal)
    : config_(resolved(config)),
      ln1(config_.d_model, config_),
      ln2(config_.d_model, config_),
      attn(config_, causal),
      ffn(config_.d_model, config_.d_ff, config_.activation, config_.bias) {
  register_module("ln1", &ln1);
  register_module("ln2", &ln2);
  register_module("attn", &attn);
  register_module("", &ffn);  // fc1, fc2 directly under the block, as in the reference
}

template <class Attend>
Tensor EncoderBlock::run(const Tensor& x, Attend&& attend) {
  const Tensor h = residual_sublayer(*this, config_, ln1, x, false, attend);  // (B, T, C)
  return residual_sublayer(*this, config_, ln2, h, true, [&](const Tensor& a) { return ffn.forward(a); });
}

Cost EncoderBlock::cost(const ModelConfig& config, int64_t B, int64_t T) {
  const ModelConfig c = resolved(config);
  const double rows = static_cast<double>(B * T);
  Cost cost = Norm::cost(c.d_model, c.norm, rows).times(2);
  cost += MultiHeadAttention::cost(c, B, T, T);
  cost += FeedForward::cost(c.d_model, c.d_ff, c.activation, c.bias, rows);
  cost.activations += rows * block_floats_per_token(c);
  return cost;
}

Tensor EncoderBlock::forward(const Tensor& x, const std::vector<int64_t>& key_lengths) {
  return run(x, [&](const Tensor& a) { return attn.self_attention(a, key_lengths); });
}

Tensor EncoderBlock::forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past) {
  return run(x, [&](const Tensor& a) { return attn.forward_cached(a, cache_k, cache_v, past); });
}

void EncoderBlock::use_x0_mix() {
  register_parameter("x0_mix", &x0_mix, {2});
}

Tensor EncoderBlock::mix_x0(const Tensor& x, const Tensor& x0) const {
  return x * narrow(x0_mix, 0, 0, 1) + x0 * narrow(x0_mix, 0, 1, 1);  // (B, T, C)
}

DecoderBlock::DecoderBlock(const ModelConfig& config)
    : config_(resolved(config)),
      ln1(config_.d_model, config_),
      ln2(config_.d_model, config_),
      ln3(config_.d_model, config_),
      attn(config_, true),
      cross(config_, false),
      ffn(config_.d_model, config_.d_ff, config_.activation, config_.bias) {
  register_module("ln1", &ln1);
  register_module("attn", &attn);
  register_module("ln2", &ln2);
  register_module("cross", &cross);
  register_module("ln3", &ln3);
  register_module("", &ffn);
}

template <class SelfAttend, class CrossAttend>
Tensor DecoderBlock::run(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend) {
  const Tensor h1 = residual_sublayer(*this, config_, ln1, x, false, self_attend);   // (B, T, C)
  const Tensor h2 = residual_sublayer(*this, config_, ln2, h1, true, cross_attend);  // (B, T, C)
  return residual_sublayer(*this, config_, ln3, h2, true, [&](const Tensor& a) { return ffn.forward(a); });
}

Cost DecoderBlock::cost(const ModelConfig& config, int64_t B, int64_t T, int64_t S) {
  const ModelConfig c = resolved(config);
  const double rows = static_cast<double>(B * T);
  Cost cost = EncoderBlock::cost(c, B, T);  // ln1, attn, ln2 (here ln3), the feed-forward, residuals
  cost += Norm::cost(c.d_model, c.norm, rows);
  cost += MultiHeadAttention::cost(c, B, T, S);
  cost.activations += rows * static_cast<double>(c.d_model);  // the cross-attention sub-layer's residual
  return cost;
}

Tensor DecoderBlock::forward(const Tensor& x, const Tensor& memory,
                             const std::vector<int64_t>& memory_lengths) {
  return run(
      x, [&](const Tensor& a) { return attn.self_attention(a); },
      [&](const Tensor& a) { return cross.forward(a, memory, memory, memory_lengths); });
}

Tensor DecoderBlock::forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past,
                                    const Tensor& cross_k, const Tensor& cross_v,
                                    const std::vector<int64_t>& memory_lengths) {
  return run(
      x, [&](const Tensor& a) { return attn.forward_cached(a, cache_k, cache_v, past); },
      [&](const Tensor& a) { return cross.forward_projected(a, cross_k, cross_v, memory_lengths); });
}

}  // namespace tfm
