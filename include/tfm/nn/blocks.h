// The Transformer's encoder and decoder blocks: residual sub-layers around attention and the
// feed-forward network, pre- or post-norm.
// Legend: B batch, T time (Tq queries, Tk keys), C = d_model, H heads, Hkv key/value heads,
// Dk = Dv = C / H per-head widths, F = d_ff, V vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/nn/attention.h"
#include "tfm/nn/layers.h"

namespace tfm {

// The options a block reads (ModelConfig): d_model, d_ff, activation, norm_position ("pre":
// x + Drop(f(LN(x))); "post": LN(x + Drop(f(x)))), dropout (on each residual branch), bias, and what its
// attention layers read (attention.h).

// A Transformer encoder block (self-attention + feed-forward), named as the reference's Block:
// ln1, ln2, attn, fc1, fc2. Causal or not: a decoder-only language model's blocks are encoder blocks
// with a causal mask.
class EncoderBlock : public Module {
  ModelConfig config_;  // declared first: the layers are sized from the resolved config

 public:
  EncoderBlock(const ModelConfig& config, bool causal);
  // One block over B sequences of T tokens: its layers' costs (module.h) and what the block itself
  // keeps: its input and the residual between the sub-layers (post-norm: also the first norm's output).
  static Cost cost(const ModelConfig& config, int64_t B, int64_t T);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& key_lengths = {});  // (B, T, C)
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past);
  // The x0 skip (a language model's, model.x0_skip): registers x0_mix (2), [a, b], initialised by the
  // model to [1, 0]; mix_x0 gives the block's input a x + b x0, x and x0 (B, T, C).
  void use_x0_mix();
  Tensor mix_x0(const Tensor& x, const Tensor& x0) const;
  Norm ln1, ln2;
  MultiHeadAttention attn;
  FeedForward ffn;
  Tensor x0_mix;  // (2), with use_x0_mix only

 private:
  template <class Attend>
  Tensor run(const Tensor& x, Attend&& attend);
};

// A Transformer decoder block (Vaswani et al. 2017; d2l's TransformerDecoderBlock): causal
// self-attention, cross-attention to the encoder's output ("memory", padding masked by
// memory_lengths), feed-forward; each a residual sub-layer, pre-norm x + Drop(f(LN(x))) or post-norm
// LN(x + Drop(f(x))) (d2l's AddNorm). Names: ln1, attn, ln2, cross, ln3, fc1, fc2. Self-attention is
// always causal, cross-attention never.
class DecoderBlock : public Module {
  ModelConfig config_;  // declared first: the layers are sized from the resolved config

 public:
  explicit DecoderBlock(const ModelConfig& config);
  // B target sequences of T tokens over sources of S: the self-attention block's cost plus the
  // cross-attention sub-layer (its norm, attention over S keys, its residual).
  static Cost cost(const ModelConfig& config, int64_t B, int64_t T, int64_t S);
  // x (B, T, C), memory (B, S, C) -> (B, T, C).
  Tensor forward(const Tensor& x, const Tensor& memory, const std::vector<int64_t>& memory_lengths = {});
  // Decoding step: x (B, T, C) holds positions [past, past + T); self-attention keys/values go to
  // cache_k/cache_v (B, max_len, Hkv*Dk) as MultiHeadAttention::forward_cached; cross_k/cross_v
  // (B, S, Hkv*Dk) are cross.project_key_value(memory, memory), computed once per sentence.
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past,
                        const Tensor& cross_k, const Tensor& cross_v,
                        const std::vector<int64_t>& memory_lengths = {});
  Norm ln1, ln2, ln3;
  MultiHeadAttention attn, cross;
  FeedForward ffn;

 private:
  template <class SelfAttend, class CrossAttend>
  Tensor run(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend);
};

}  // namespace tfm
