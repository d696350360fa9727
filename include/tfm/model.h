// The reference language model of shared/ARCHITECTURE.md, built from the layers in nn.h.
// Legend: B batch, T time, C = d_model, H heads, Hkv key/value heads, Dk = C / H, V vocabulary.
//
// This header is the contract between the layers (src/model.cpp) and the trainer/CLI: the trainer
// sees parameters as two flat buffers (values, gradients) plus a table of named views into them, so
// zero-grad, clipping and the optimizers are flat loops (llm.c style).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/random.h"
#include "tfm/tensor.h"

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
  bool causal = true;
  bool tie_embeddings = true;
  bool bias = true;
};

// A parameter: its export name (ARCHITECTURE.md), and a view into the flat value buffer whose
// gradient is the matching view into the flat gradient buffer.
struct NamedParameter {
  std::string name;
  Tensor value;
  int64_t offset = 0;  // into the flat buffers
  bool decay = false;  // AdamW weight decay applies (rank >= 2)
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

class LanguageModel {
 public:
  LanguageModel(const ModelConfig& config, uint64_t init_seed);
  ~LanguageModel();
  LanguageModel(const LanguageModel&) = delete;
  LanguageModel& operator=(const LanguageModel&) = delete;

  const ModelConfig& config() const;

  // Parameters in the reference's order (torch_lm.py --print-names).
  const std::vector<NamedParameter>& parameters() const;
  const NamedParameter* find_parameter(const std::string& name) const;
  Tensor flat_values() const;  // (P,)
  Tensor flat_grads() const;   // (P,)
  int64_t parameter_count() const;
  // Component -> count (embedding, positions, attention, feed-forward, norms, head), summing to the total.
  std::vector<std::pair<std::string, int64_t>> parameter_breakdown() const;
  static FlopCount flops_per_token(const ModelConfig& config, int64_t seq_len);

  void set_training(bool on);  // dropout is active only in training mode
  bool training() const;
  Rng& dropout_rng();          // its state goes into checkpoints

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
  const std::vector<Tensor>& attention_probabilities() const;
  // When on, each forward keeps every layer's per-head attention outputs before Wo: (B, T, H, Dk).
  const std::vector<Tensor>& head_outputs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
