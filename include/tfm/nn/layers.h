// Layers: modules that own parameters and submodules, with the export names of ARCHITECTURE.md.
// Legend: B batch, T time (Tq queries, Tk keys), C = d_model, H heads, Hkv key/value heads,
// Dk = Dv = C / H per-head widths, F = d_ff, V vocabulary.
//
// A module registers pointers to its own Tensor members and submodules (which never move: modules are
// neither copyable nor movable), so `named_parameters()` can hand out stable pointers and
// `flatten_parameters()` can re-seat every parameter as a view into one flat value buffer whose
// gradients are views into one flat gradient buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules in registration order, with dotted names.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  int64_t parameter_count();
  // This module and all its submodules, depth first in registration order.
  std::vector<Module*> modules();

  // Training mode (dropout active) and the generator dropout draws from; both reach all submodules.
  void set_training(bool on);
  bool training() const { return training_; }
  void set_rng(Rng* rng);
  Rng* rng() const { return rng_; }

 protected:
  // Registers a zero-filled parameter of `shape` held in `*slot` (a member of the module).
  void register_parameter(const std::string& name, Tensor* slot, const Shape& shape);
  // Registers a submodule; with an empty name its parameters appear without an extra prefix.
  void register_module(const std::string& name, Module* module);

 private:
  struct Entry {
    std::string name;
    Tensor* parameter = nullptr;
    Module* module = nullptr;
  };
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  std::vector<Entry> entries_;
  bool training_ = false;
  Rng* rng_ = nullptr;
};

// The flat buffers behind a module's parameters: values and gradients, each one allocation.
struct ParameterBuffers {
  std::shared_ptr<Storage> values, grads;
  int64_t size = 0;
  std::vector<int64_t> offsets;  // per parameter, in named_parameters() order
};
// Moves every parameter of `root` (keeping its current values) into one value buffer and sets its
// gradient to the matching view of one zeroed gradient buffer.
ParameterBuffers flatten_parameters(Module& root);
// A parameter of `shape` at `offset` of the flat buffers: its value view into `values`, needing a
// gradient, which is the same view into `grads` (flatten_parameters, and replicas sharing weights).
Tensor flat_parameter(const std::shared_ptr<Storage>& values, const std::shared_ptr<Storage>& grads,
                      const Shape& shape, int64_t offset);

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor weight;                          // (out, in), as nn.Linear
  Tensor bias;                            // (out), undefined without bias
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  // ids of shape ids_shape -> (ids_shape..., dim)
  Tensor forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const;
  Tensor weight;  // (num, dim)
};

// P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(...), computed in double; not a parameter.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // rows [start, start + T): (T, C), a view
  Tensor table;                                    // (max_len, C)
};

// Learned absolute positions: a (max_len, C) table whose rows are added to the embeddings.
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // (T, C), differentiable
  Tensor weight;                                   // (max_len, C)
};

// The input of a Transformer stack (ARCHITECTURE.md step 1) for positions [start, start + T):
// E[ids] * sqrt(C) + P[start:start+T] with the sinusoidal table, or E[ids] + W_pos[start:start+T]
// with learned positions (exactly one of `sinusoidal`, `learned` is given), then dropout p when
// `owner` is training (drawing from its rng). ids (B*T) -> (B, T, C). `where` names the caller in errors.
Tensor embed_with_positions(const Module& owner, const Embedding& emb, const SinusoidalPositionalEncoding* sinusoidal,
                            const LearnedPositionalEmbedding* learned, const std::vector<int32_t>& ids, int64_t B,
                            int64_t T, int64_t start, float p, const char* where);

// Every LayerNorm of the models (PyTorch's default); exports state it (GGUF's layer_norm_epsilon).
constexpr float kLayerNormEps = 1e-5f;

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = kLayerNormEps);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // (C), (C)
  float eps;
};

// A stack's output (ARCHITECTURE.md step 5): h = ln_f(x) when ln_f is given, else x; logits = h E^T
// with the embedding E (V, C) when head is null (tied), else head(h). x (B, T, C) -> (B, T, V).
Tensor output_logits(const Tensor& x, const LayerNorm* ln_f, const Linear* head, const Tensor& embedding);

// FFN(x) = fc2(act(fc1(x))), act = exact GELU or ReLU.
class FeedForward : public Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, const std::string& activation, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., C) -> (..., C)
  Linear fc1, fc2;
  bool gelu;
};

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
  // Head variants (sparse and grouped heads; see MultiHeadAttention).
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
// group_mlp mixes inside g groups and replaces Wo by out_mlp, a C -> C -> C
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

  // Top-k head gating (gating "topk"; Mixture of Attention heads, Zhang et
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
