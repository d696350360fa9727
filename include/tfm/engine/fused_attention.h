// Fused scaled-dot-product attention: scores, masks, softmax, dropout and the weighted sum for every
// (batch, head) through the GEMM wrapper, with its own backward. The probabilities are not kept: the
// backward recomputes them block by block from Q, K and each row's softmax statistics.
//
// Legend: B batch, Tq query length, Tk key length, H query heads, Hkv key/value heads (H % Hkv == 0,
// query head h reads kv head h / (H / Hkv)), Dk query/key width per head, Dv value width per head.
//
// Inputs keep the projections' natural layout (B, T, heads * D): a head is a strided column block, so
// per (batch, head) GEMMs read it in place with lda = heads * D, with no transposes or copies.
#pragma once
#include <cstdint>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

struct AttentionOptions {
  int64_t n_heads = 1;
  int64_t n_kv_heads = 0;  // 0 = n_heads
  // Causal: query i sits at absolute position i + Tk - Tq (the last Tq of Tk positions, as when
  // decoding with a KV cache) and sees keys j <= that position.
  bool causal = false;
  // Key-padding mask: keys j >= key_lengths[b] are ignored for sequence b. Empty = no padding.
  std::vector<int64_t> key_lengths;
  float dropout = 0.0f;  // on the probabilities, only when training
  bool training = false;
  Rng* rng = nullptr;  // needed when dropout is active
  // Head gating: (B, Tq, H) flags, row-major; query row i of head h is computed only when
  // active_rows[(b * Tq + i) * H + h] is set, other rows' outputs are zero and get no gradient (their
  // cost is skipped, not masked). Empty = every row.
  std::vector<uint8_t> active_rows;
};

// q (B, Tq, H*Dk), k (B, Tk, Hkv*Dk), v (B, Tk, Hkv*Dv) -> (B, Tq, H*Dv). Inputs whose rows are
// packed within a batch are read in place, whatever their batch stride (e.g. a narrowed KV cache);
// other layouts are copied first. When `probabilities` is given it receives the softmax
// probabilities before dropout, (B, H, Tq, Tk) (for inspection: the backward does not read it).
// Rows with no visible key are all zero, and so is their output.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options, Tensor* probabilities = nullptr);

namespace kernels {

// Threads the kernels may use (OpenMP, over (batch, head) pairs); each needs its own scratch.
int attention_scratch_threads();

// Sizes and the batch strides of q, k, v (rows within a batch are packed: heads * D floats apart).
struct AttentionDims {
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, Dk = 0, Dv = 0;
  int64_t q_batch_stride = 0, k_batch_stride = 0, v_batch_stride = 0;
  // Head gating: the query rows of (b, h) to compute are row_list[row_offsets[b*H + h] ..
  // row_offsets[b*H + h + 1]) (increasing); the others output zero. Null = every row.
  const int64_t* row_offsets = nullptr;
  const int64_t* row_list = nullptr;
};

// Scratch floats one thread needs for the forward (backward = false) or the backward.
int64_t attention_scratch_floats(const AttentionDims& d, bool backward);

// Rows of queries processed together (a block's P lives in per-thread scratch).
constexpr int64_t kAttentionRowBlock = 64;

// out (B, Tq, H*Dv); stats (B, H, Tq, 2) receives each row's softmax max and 1/sum, which the
// backward needs; probs (B, H, Tq, Tk), or null, receives the softmax before dropout. keep (B, H, Tq,
// Tk) is the dropout multiplier (0 or 1/(1-p)), or null without dropout. scratch holds threads *
// attention_scratch_floats(d, false) floats (threads = attention_scratch_threads()). key_lengths (B)
// or null.
void attention_forward(float* out, float* stats, float* probs, const float* q, const float* k, const float* v,
                       const float* keep, float* scratch, const int64_t* key_lengths, bool causal,
                       const AttentionDims& d);
// Adds into dq (B, Tq, H*Dk), dk (B, Tk, Hkv*Dk), dv (B, Tk, Hkv*Dv) (contiguous; any may be null).
// stats, keep, key_lengths and causal as given to the forward; P is recomputed from q, k and stats.
// scratch holds threads * attention_scratch_floats(d, true) floats. With M = keep, Pd = P o M:
//   dV += Pd^T dO,  dP = (dO V^T) o M,  dS = P o (dP - rowsum(dP o P)),
//   dQ += dS K / sqrt(Dk),  dK += dS^T Q / sqrt(Dk).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* stats, const float* keep, float* scratch,
                        const int64_t* key_lengths, bool causal, const AttentionDims& d);

}  // namespace kernels
}  // namespace tfm
