// Multi-head attention: dot-product or additive scores, causal and padding masks, self- and
// cross-attention, grouped-/multi-query heads, the KV cache, per-head inspection, top-k gated heads
// and cross-head mixing.
// Legend: B batch, T time (Tq queries, Tk keys), C = d_model, H heads, Hkv key/value heads,
// Dk = Dv = C / H per-head widths, F = d_ff, V vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/nn/layers.h"

namespace tfm {

struct AttentionConfig {
  int64_t d_model = 0;
  int64_t n_heads = 1;
  int64_t n_kv_heads = 0;  // 0 = n_heads; grouped-query when 1 < n_kv_heads < n_heads, multi-query when 1
  int64_t kdim = 0;        // width of the key input, 0 = d_model (as nn.MultiheadAttention)
  int64_t vdim = 0;        // width of the value input, 0 = d_model
  bool bias = true;
  bool causal = false;
  float dropout = 0.0f;               // on the attention probabilities
  std::string score = "dot";          // "dot": q.k / sqrt(Dk); "additive": w_v^T tanh(q + k) per head
  // Head variants (the seeds' sparse and grouped heads; see MultiHeadAttention).
  std::string gating = "none";  // "none" | "topk": each query uses its top_k heads by a learned gate
  int64_t top_k = 2;
  float balance_loss = 0.01f;   // weight of the gate's load-balancing term (auxiliary_loss)
  std::string mixing = "none";  // "none" | "talking_heads" | "group_mlp"
  int64_t groups = 2;           // group_mlp: head groups
};

// The groups head mixing mixes within: group_mlp's `groups`; talking_heads mixes all heads as one
// group (and without mixing there is one trivial group). The layer, its FLOPs and its parameter count
// all ask here.
inline int64_t head_mixing_groups(const std::string& mixing, int64_t groups) {
  return mixing == "group_mlp" ? groups : 1;
}

// Multi-head attention in the general form: queries from one sequence, keys and values from the same
// or another one (cross-attention, other length and widths). Q = query Wq^T (B, Tq, H*Dk),
// K = key Wk^T (B, Tk, Hkv*Dk), V = value Wv^T (B, Tk, Hkv*Dv), out = concat_h(head_h) Wo^T.
// Additive scoring uses the per-head projections as the W_q q and W_k k of Bahdanau's
// w_v^T tanh(W_q q + W_k k), with one w_v of Dk weights per head (`score_v`, (H, Dk)).
//
// Head mixing (config.mixing, legend g = groups, n = H / g heads per group): the heads are split into
// g groups of n consecutive heads. Within each group the logits S (B, H, Tq, Tk) of either scoring are
// mixed across heads, S'_o = sum_i mix_logits[group, o, i] S_i, before the masks and the softmax, and
// the probabilities after it, P'_o = sum_i mix_weights[group, o, i] P_i; out_h = P'_h V_{kv(h)}.
// talking_heads is one group of all H heads (Shazeer et al. 2020, "Talking-Heads Attention");
// group_mlp (the seeds' eq. 5.3.13) mixes inside g groups and replaces Wo by out_mlp, a C -> C -> C
// GELU MLP over the concatenated heads, which carries information between the groups.
class MultiHeadAttention : public Module {
  // Declared first: the projections are sized from the resolved config.
  AttentionConfig config_;
  int64_t head_dim_;

 public:
  explicit MultiHeadAttention(const AttentionConfig& config);
  // query (B, Tq, C), key (B, Tk, kdim), value (B, Tk, vdim) -> (B, Tq, C). key_lengths: keys j >=
  // key_lengths[b] are padding (empty = none).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const std::vector<int64_t>& key_lengths = {});
  // The two halves of forward, for keys and values that serve many queries (cross-attention while
  // decoding: the encoder's output is projected once per sentence). project_key_value returns
  // K = key Wk^T (B, Tk, Hkv*Dk) and V = value Wv^T (B, Tk, Hkv*Dv); forward_projected attends
  // query (B, Tq, C) to them -> (B, Tq, C).
  std::pair<Tensor, Tensor> project_key_value(const Tensor& key, const Tensor& value) const;
  Tensor forward_projected(const Tensor& query, const Tensor& k, const Tensor& v,
                           const std::vector<int64_t>& key_lengths = {});
  // Self-attention decoding step: x (B, T, C) holds the positions [past, past + T); their keys and
  // values are written into the caches (B, max_len, Hkv*Dk) and the queries attend to [0, past + T).
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past);

  // When on, forward keeps the probabilities (B, H, Tq, Tk, before dropout) and the per-head outputs
  // (B, Tq, H, Dv) of the last call.
  bool record = false;
  Tensor last_probabilities, last_head_outputs;
  // When defined, (H): each head's output is multiplied by its gate before Wo. A gate of 0 masks the
  // head (tfm eval --mask-heads); with requires_grad, backward gives dL/dgate, Michel et al.'s head
  // importance at gate 1 (tfm heads). Undefined (the default) costs nothing.
  Tensor head_gate;

  const AttentionConfig& config() const { return config_; }
  int64_t head_dim() const { return head_dim_; }
  Linear wq, wk, wv, wo;  // wo is empty (0 x 0) and unregistered with group_mlp: out_mlp replaces it
  Tensor score_v;         // (H, Dk), additive scoring only
  // Head mixing only: (g, n, n) each, [group, output head, input head]; identity at initialisation.
  Tensor mix_logits, mix_weights;
  std::unique_ptr<FeedForward> out_mlp;  // group_mlp only: fc1 (C, C), fc2 (C, C), GELU

  // Top-k head gating (gating "topk"; the seeds' eq. 5.3.12, Mixture of Attention heads, Zhang et
  // al. 2022): the gate gives H logits per query token, G = x Wg^T (B, Tq, H); each token uses its
  // top_k heads, weighted by the softmax of their logits (the other heads' weights are 0):
  //   out = Wo concat_h(w_h * head_h),  w = softmax over TopK(G) of G.
  // A (token, head) pair outside the top k is not computed (the fused kernel skips its query row).
  std::unique_ptr<Linear> gate;  // (H, C), no bias; null without gating
  // The load-balancing term of the last forward (Switch Transformer's, over
  // heads): balance_loss * H * sum_h f_h P_h, f_h the fraction of the top-k slots head h took, P_h
  // its mean gate probability. Minimal (= balance_loss) when heads are used evenly. Read and
  // cleared by take_auxiliary_loss(); undefined when there is none.
  Tensor take_auxiliary_loss();
  // Tokens each head served since the last reset (gating only), and the tokens seen: usage
  // fractions for the eval log.
  std::vector<double> head_tokens;
  double tokens_seen = 0;

 private:
  // x: the queries' input (B, Tq, C), read by the gate.
  Tensor attend(const Tensor& x, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                const std::vector<int64_t>& key_lengths);
  // Top-k gating: the selected rows for the fused kernel and the heads' weights (B, Tq, H).
  Tensor gate_weights(const Tensor& x, std::vector<uint8_t>& active_rows);
  Tensor auxiliary_loss_;
  // attend by composed ops, for additive scores and head mixing (the fused kernel does dot scores
  // without mixing): q (B, Tq, H*Dk), k, v (B, Tk, Hkv*Dk) -> (B, Tq, H*Dv); `probabilities`, when
  // given, receives the (mixed) probabilities (B, H, Tq, Tk) before dropout.
  Tensor attend_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         const std::vector<int64_t>& key_lengths, Tensor* probabilities);
  // Concatenated heads (B, Tq, H*Dv) -> (B, Tq, C): wo, or out_mlp with group_mlp.
  Tensor project_output(const Tensor& o) const;
};

}  // namespace tfm
