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

struct BlockConfig {
  AttentionConfig attention;  // d_model, heads, causal, bias, attention dropout, score
  int64_t d_ff = 0;           // 0 = 4 * d_model
  std::string activation = "gelu";
  std::string norm_position = "pre";  // "pre": x + f(LN(x)); "post": LN(x + f(x))
  float dropout = 0.0f;               // on each residual branch
};

// A Transformer encoder block (self-attention + feed-forward), named as the reference's Block:
// ln1, ln2, attn, fc1, fc2.
class EncoderBlock : public Module {
  BlockConfig config_;  // declared first: the layers are sized from the resolved config

 public:
  explicit EncoderBlock(const BlockConfig& config);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& key_lengths = {});  // (B, T, C)
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past);
  LayerNorm ln1, ln2;
  MultiHeadAttention attn;
  FeedForward ffn;

 private:
  template <class Attend>
  Tensor run(const Tensor& x, Attend&& attend);
};

// A Transformer decoder block (Vaswani et al. 2017; d2l's TransformerDecoderBlock): causal
// self-attention, cross-attention to the encoder's output ("memory", padding masked by
// memory_lengths), feed-forward; each a residual sub-layer, pre-norm x + Drop(f(LN(x))) or post-norm
// LN(x + Drop(f(x))) (d2l's AddNorm). Names: ln1, attn, ln2, cross, ln3, fc1, fc2. The config's
// attention.causal is ignored: self-attention is always causal, cross-attention never.
class DecoderBlock : public Module {
  BlockConfig config_;  // declared first: the layers are sized from the resolved config

 public:
  explicit DecoderBlock(const BlockConfig& config);
  // x (B, T, C), memory (B, S, C) -> (B, T, C).
  Tensor forward(const Tensor& x, const Tensor& memory, const std::vector<int64_t>& memory_lengths = {});
  // Decoding step: x (B, T, C) holds positions [past, past + T); self-attention keys/values go to
  // cache_k/cache_v (B, max_len, Hkv*Dk) as MultiHeadAttention::forward_cached; cross_k/cross_v
  // (B, S, Hkv*Dk) are cross.project_key_value(memory, memory), computed once per sentence.
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past, const Tensor& cross_k,
                        const Tensor& cross_v, const std::vector<int64_t>& memory_lengths = {});
  LayerNorm ln1, ln2, ln3;
  MultiHeadAttention attn, cross;
  FeedForward ffn;

 private:
  template <class SelfAttend, class CrossAttend>
  Tensor run(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend);
};

}  // namespace tfm
