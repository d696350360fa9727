// The reference language model of shared/ARCHITECTURE.md, built from the layers in nn.h.
// Legend: B batch, T time, C = d_model, H heads, Hkv key/value heads, Dk = C / H, V vocabulary.
//
// This header is the contract between the layers (src/models/) and the trainer/CLI: the trainer
// sees parameters as two flat buffers (values, gradients) plus a table of named views into them, so
// zero-grad, clipping and the optimizers are flat loops (llm.c style).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 4;  // grouped-query when 1 < n_kv_heads < n_heads, multi-query when 1
  int64_t d_ff = 512;
  int64_t max_seq_len = 64;
  float dropout = 0.0f;
  float attention_dropout = 0.0f;
  std::string activation = "gelu";              // "gelu" (exact erf form) | "relu"
  std::string norm_position = "pre";            // "pre" | "post"
  std::string positional_encoding = "sinusoidal";  // "sinusoidal" | "learned"
  std::string attention_score = "dot";          // "dot" (scaled dot-product) | "additive"
  std::string head_gating = "none";             // "none" | "topk" (AttentionConfig)
  int64_t head_topk = 2;
  float head_balance_loss = 0.01f;
  std::string head_mixing = "none";             // "none" | "talking_heads" | "group_mlp"
  int64_t head_groups = 2;
  bool causal = true;
  bool tie_embeddings = true;
  bool bias = true;
  // Encoder-decoder (seq2seq.h) only: vocab_size is the target side's.
  int64_t source_vocab_size = 0;
  int64_t n_encoder_layers = 0;
  int64_t n_decoder_layers = 0;
};

// A parameter: its export name (ARCHITECTURE.md), and a view into the flat value buffer whose
// gradient is the matching view into the flat gradient buffer.
struct NamedParameter {
  std::string name;
  Tensor value;
  int64_t offset = 0;  // into the flat buffers
  bool decay = false;  // AdamW weight decay applies (rank >= 2, head mixing matrices excepted)
};

// Per-layer key/value cache for incremental decoding.
struct KVCache {
  std::vector<Tensor> keys, values;  // per layer: (B, max_seq_len, Hkv * Dk), filled up to `length`
  int64_t batch = 0;
  int64_t length = 0;  // positions cached so far
};

// FLOPs per token, counted as 2 per multiply-add of the matrix products (the seeds' formulas).
struct FlopCount {
  double forward_per_token = 0;  // at sequence length T (attention is O(T^2 C) per sequence)
  double train_per_token = 0;    // forward + backward (backward = 2x forward)
};

// FLOPs per token of one Transformer block of `c` (self-attention over `keys` keys and feed-forward):
// 2 per multiply-add of Wq, Wk, Wv, Wo, W1, W2, plus attention's scores and weighted sum, 2 * 2 *
// keys * C (causal counted in full), and head mixing's 2 * 2 * H * (H / g) * keys (two mixes over the
// heads of a group per query head and key); group_mlp's output MLP counts 2 C x C weights for Wo's one.
double block_flops_per_token(const ModelConfig& c, int64_t keys);
// Top-k head gating: the share of (query, head) pairs whose attention is computed, k / H (1 without
// gating: the scores and weighted sum scale by it), and the gate's weights per attention layer (H C).
double computed_head_share(const ModelConfig& c);
double gate_weight_count(const ModelConfig& c);
// Weights of an attention layer's output projection: Wo (C x C), or with head_mixing = group_mlp its
// replacement, a C -> C -> C MLP (2 C x C).
double attention_output_weights(const ModelConfig& c);
// FLOPs per query token of an attention layer's head mixing over `keys` keys (0 without mixing).
double head_mixing_flops_per_token(const ModelConfig& c, int64_t keys);

struct BlockConfig;
// The block config (nn.h) of a model config: d_model, heads, kv heads, d_ff, activation, norm
// position, dropouts, bias and scoring, with the given causality.
BlockConfig block_config(const ModelConfig& c, bool causal);
// What every architecture checks: d_ff and max_seq_len positive, the positional encoding's name,
// dropouts in [0, 1); resolves n_kv_heads = 0 to n_heads. Errors start with `where`.
ModelConfig checked_common(ModelConfig c, const char* where);

class Module;
class MultiHeadAttention;

// What every model shares, whatever its architecture: its parameters in one flat value buffer and
// one flat gradient buffer (named views into them, in export order), training mode and the dropout
// generator. The trainer, the optimizers, checkpoints and export see only this.
class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::vector<NamedParameter>& parameters() const { return parameters_; }
  const NamedParameter* find_parameter(const std::string& name) const;
  Tensor flat_values() const;  // (P,)
  Tensor flat_grads() const;   // (P,)
  int64_t parameter_count() const { return size_; }
  // Component -> count (embedding, positions, attention, feed-forward, norms, head), summing to the
  // total; classified by parameter name.
  std::vector<std::pair<std::string, int64_t>> parameter_breakdown() const;

  // The sum of the layers' auxiliary losses from the last forward (top-k head gating's
  // load balancing), cleared by reading; undefined when there is none. The training step adds it to
  // the objective's loss.
  Tensor take_auxiliary_loss();
  // loss + take_auxiliary_loss() (loss itself when there is none): the loss a training step
  // differentiates, and the one tfm gradcheck checks.
  Tensor with_auxiliary_loss(const Tensor& loss);
  // Top-k head gating: per attention layer (in module order, named as its parameters' prefix), the
  // fraction of the tokens each head served since the last call; the counts restart. Empty without
  // gating.
  std::vector<std::pair<std::string, std::vector<double>>> take_head_usage();
  // Points every parameter's value at `source`'s value buffer (same architecture): a data-parallel
  // replica reads the master's weights with no copy; its gradients stay its own.
  void share_values_of(const Model& source);

  void set_training(bool on);  // dropout is active only in training mode
  bool training() const;
  Rng& dropout_rng() { return dropout_rng_; }  // its state goes into checkpoints

 protected:
  Model() = default;
  // Moves every parameter of `root` into the flat buffers and initialises it as ARCHITECTURE.md
  // does: matrices and embeddings N(0, 0.02), residual output projections (*wo.weight, *fc2.weight)
  // N(0, 0.02 / sqrt(2 * residual_layers)), biases 0, LayerNorm gains 1, head mixing matrices
  // (*mix_logits, *mix_weights) identities and not decayed; dropout draws from init_seed + 1. Derived
  // constructors call it once, after building their module tree.
  void adopt_parameters(Module& root, uint64_t init_seed, int64_t residual_layers);

 private:
  Module* root_ = nullptr;
  // The attention layers with top-k gating, found once in adopt_parameters: the training step asks
  // them for the balance term without walking the module tree (and asks nobody without gating).
  std::vector<MultiHeadAttention*> gated_;
  std::shared_ptr<Storage> values_, grads_;
  int64_t size_ = 0;
  std::vector<NamedParameter> parameters_;
  Rng dropout_rng_{0};
};

class LanguageModel : public Model {
 public:
  LanguageModel(const ModelConfig& config, uint64_t init_seed);
  ~LanguageModel() override;

  const ModelConfig& config() const;
  static FlopCount flops_per_token(const ModelConfig& config, int64_t seq_len);

  // tokens: B*T ids, row-major (B, T) -> logits (B, T, V).
  Tensor forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T);
  // Mean cross-entropy of logits (B, T, V) against targets (B*T).
  static Tensor loss(const Tensor& logits, const std::vector<int32_t>& targets);

  // Incremental decoding: feeds T_new tokens per sequence after the cached ones and returns their
  // logits (B, T_new, V); equal (to 1e-5) to the full forward's logits at those positions.
  KVCache make_cache(int64_t B) const;
  Tensor forward_cached(KVCache& cache, const std::vector<int32_t>& tokens, int64_t B, int64_t T_new);

  // When on, each forward keeps every layer's attention probabilities: per layer (B, H, T_q, T_k).
  void set_record_attention(bool on);
  // Per layer, an (H) gate on the heads' outputs (MultiHeadAttention::head_gate); an empty vector
  // removes them. Masks heads (gate 0) and measures their importance (dL/dgate).
  void set_head_gates(const std::vector<Tensor>& gates);
  const std::vector<Tensor>& attention_probabilities() const;
  // When on, each forward keeps every layer's per-head attention outputs before Wo: (B, T, H, Dk).
  const std::vector<Tensor>& head_outputs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
