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
#include "tfm/nn/model_config.h"

namespace tfm {

// Multi-head attention in the general form: queries from one sequence, keys and values from the same
// or another one (cross-attention, other length and widths). Q = query Wq^T (B, Tq, H*Dk),
// K = key Wk^T (B, Tk, Hkv*Dk), V = value Wv^T (B, Tk, Hkv*Dv), out = concat_h(head_h) Wo^T.
// Additive scoring uses the per-head projections as the W_q q and W_k k of Bahdanau's
// w_v^T tanh(W_q q + W_k k), with one w_v of Dk weights per head (`score_v`, (H, Dk)).
//
// The options it reads (ModelConfig): d_model, n_heads, n_kv_heads, bias, attention_dropout,
// attention_score, head_gating (+ head_topk, head_balance_loss), head_mixing (+ head_groups), qk_norm
// (+ norm_eps), positional_encoding "rope" (+ rope_theta).
//
// QK-norm (Henry et al. 2020; Dehghani et al. 2023): each head's Dk entries of Q and of K pass an
// RMSNorm (one gain of Dk for Q and one for K, shared by the heads) before RoPE. RoPE (Su et al. 2021,
// RoFormer) turns the queries and keys of self-attention by their positions (rope() in ops.h); cross-
// attention's keys come from another sequence and get none.
//
// Head mixing (head_mixing, legend g = ModelConfig::mixing_groups(), n = H / g heads per group): the
// heads are split into g groups of n consecutive heads. Within each group the logits S (B, H, Tq, Tk) of
// either scoring are mixed across heads, S'_o = sum_i mix_logits[group, o, i] S_i, before the masks and the
// softmax, and the probabilities after it, P'_o = sum_i mix_weights[group, o, i] P_i; out_h = P'_h V_{kv(h)}.
// talking_heads is one group of all H heads (Shazeer et al. 2020, "Talking-Heads Attention");
// group_mlp (grouped heads with an MLP across them) mixes inside g groups and replaces Wo by out_mlp,
// a C -> C -> C GELU MLP over the concatenated heads, which carries information between the groups.
class MultiHeadAttention : public Module {
  // Declared first: the projections are sized from the resolved config.
  ModelConfig config_;
  bool causal_;
  int64_t kdim_, vdim_, head_dim_;

 public:
  // Keys j > i are hidden from query i when causal (self-attention); the key and value inputs are
  // kdim and vdim wide (0 = d_model, as nn.MultiheadAttention's kdim/vdim).
  MultiHeadAttention(const ModelConfig& config, bool causal, int64_t kdim = 0, int64_t vdim = 0);
  // What the layer costs for B sequences of Tq queries over Tk keys (module.h): its weights, the
  // forward's products (Wq, Wk, Wv over Tk keys, Wo, the gate, scores and weighted sums over every key
  // (a causal mask counted in full, as MFU figures do), head mixing), what it keeps for the backward
  // (K and V, the attention output, the softmax statistics; the variants' extras).
  static Cost cost(const ModelConfig& config, int64_t B, int64_t Tq, int64_t Tk, int64_t kdim = 0,
                   int64_t vdim = 0);
  // The share of (query, head) pairs whose attention is computed: k / H with top-k gating, else 1.
  static double computed_head_share(const ModelConfig& config);
  // Self-attention of x (B, T, C) -> (B, T, C), with RoPE's positions when the model has them.
  // key_lengths: keys j >= key_lengths[b] are padding (empty = none).
  Tensor self_attention(const Tensor& x, const std::vector<int64_t>& key_lengths = {});
  // The general form, without positions: query (B, Tq, C), key (B, Tk, kdim), value (B, Tk, vdim) ->
  // (B, Tq, C) (cross-attention; self-attention when the three are one sequence and the model has no
  // RoPE).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const std::vector<int64_t>& key_lengths = {});
  // The two halves of forward, for keys and values that serve many queries (cross-attention while
  // decoding: the encoder's output is projected once per sentence). project_key_value returns
  // K = key Wk^T (B, Tk, Hkv*Dk) (QK-normed) and V = value Wv^T (B, Tk, Hkv*Dv); forward_projected
  // attends query (B, Tq, C) to them -> (B, Tq, C).
  std::pair<Tensor, Tensor> project_key_value(const Tensor& key, const Tensor& value) const;
  Tensor forward_projected(const Tensor& query, const Tensor& k, const Tensor& v,
                           const std::vector<int64_t>& key_lengths = {});
  // Self-attention decoding step: x (B, T, C) holds the positions [past, past + T); their keys (turned
  // by their absolute positions with RoPE) and values are written into the caches (B, P, Hkv*Dk), P >=
  // past + T, and the queries attend to [0, past + T). Shapes are checked before anything is written.
  Tensor forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past);

  // When on, forward keeps the probabilities (B, H, Tq, Tk, before dropout) and the per-head outputs
  // (B, Tq, H, Dv) of the last call.
  bool record = false;
  Tensor last_probabilities, last_head_outputs;
  // When defined, (H): each head's output is multiplied by its gate before Wo. A gate of 0 masks the
  // head (tfm eval --mask-heads); with requires_grad, backward gives dL/dgate, Michel et al.'s head
  // importance at gate 1 (tfm heads). Undefined (the default) costs nothing.
  Tensor head_gate;

  // Value residual (Zhou et al. 2024, "Value Residual Learning"): a model's self-attention layers share
  // one slot. The first layer (first_layer) writes its values V_1 (B, T, Hkv*Dv) there; each later one
  // registers value_lambda (1), initialised by the model, and attends to lambda V + (1 - lambda) V_1.
  // The KV cache holds the mixed values. Call before the model adopts its parameters.
  void use_value_residual(Tensor* first_values, bool first_layer);
  Tensor value_lambda;  // (1), a later layer's only

  const ModelConfig& config() const { return config_; }
  bool causal() const { return causal_; }
  int64_t head_dim() const { return head_dim_; }
  std::unique_ptr<Norm> q_norm, k_norm;  // QK-norm only: RMSNorm gains of (Dk)
  Linear wq, wk, wv, wo;  // wo is empty (0 x 0) and unregistered with group_mlp: out_mlp replaces it
  Tensor score_v;         // (H, Dk), additive scoring only
  // Head mixing only: (g, n, n) each, [group, output head, input head]; identity at initialisation.
  Tensor mix_logits, mix_weights;
  std::unique_ptr<FeedForward> out_mlp;  // group_mlp only: fc1 (C, C), fc2 (C, C), GELU

  // Top-k head gating (head_gating "topk"; Mixture of Attention heads, Zhang et al. 2022): the gate
  // gives H logits per query token, G = x Wg^T (B, Tq, H); each token uses its head_topk heads,
  // weighted by the softmax of their logits (the other heads' weights are 0):
  //   out = Wo concat_h(w_h * head_h),  w = softmax over TopK(G) of G.
  // A (token, head) pair outside the top k is not computed (the fused kernel skips its query row).
  std::unique_ptr<Linear> gate;  // (H, C), no bias; null without gating
  // The load-balancing term of the last forward (Switch Transformer's, over heads):
  // head_balance_loss * H * sum_h f_h P_h, f_h the fraction of the top-k slots head h took, P_h its
  // mean gate probability. Minimal (= head_balance_loss) when heads are used evenly. Read and
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
  // Q (B, T, H*Dk) or K (B, T, Hkv*Dk) of x: the projection, QK-norm, and RoPE at positions
  // [start, start + T) when start >= 0 and the model has RoPE. Returns the steps, the last one the result:
  // the intermediates a caller may release once the result is used (each is recomputable).
  std::vector<Tensor> project(const Linear& w, const Norm* norm, int64_t heads, const Tensor& x,
                              int64_t start) const;
  // Attends q_steps.back() to k, v and releases the queries' steps (recomputed in the backward).
  Tensor attend_and_project(const Tensor& x, const std::vector<Tensor>& q_steps, const Tensor& k,
                            const Tensor& v, const std::vector<int64_t>& key_lengths);
  // The values of self-attention: wv(x) (B, T, Hkv*Dv), mixed with the first layer's by the value residual.
  Tensor self_values(const Tensor& x);
  Tensor* first_values_ = nullptr;  // the value residual's slot
  // RoPE only: the tables of the angles' cosines and sines (max_seq_len, Dk/2), built as positions use them
  std::unique_ptr<PositionTables> rope_;
};

}  // namespace tfm
