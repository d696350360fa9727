// The language model of docs/architecture.md (decoder-only with a causal mask, or a bidirectional
// encoder for masked LM), built from the layers of nn/: token embedding and positions, n_layers
// encoder blocks, the final norm (pre-norm) and the output head (tied to the embedding or its own).
// The speedrun tricks (ModelConfig, docs/speedrun.md), each off by default:
// - zero_init: wo, fc2 and the untied head start at zero (each block starts as the identity);
// - logit_softcap c: logits = c tanh(logits / c) (Gemma 2 report, sec. 2);
// - x0_skip: block l's input is a_l x + b_l x0, x0 the embedding output, (a_l, b_l) = blocks.l.x0_mix
//   starting at (1, 0);
// - value_residual: layers after the first attend to lambda_l V_l + (1 - lambda_l) V_1 (Zhou et al.
//   2024), lambda_l = blocks.l.attn.value_lambda starting at 0.5;
// - bigram_buckets N: bigram.weight (N, C), zero at first, adds row (prev * V + cur) mod N for each
//   token after the first of a sequence (or of a generation) to the embedding output; no two token
//   pairs share a row when N >= V^2.
// Multi-token prediction (model.mtp_heads K > 0; Gloeckle et al. 2024), training only: mtp.k (k = 1..K)
// is a residual branch x + W_k norm_k(x) on the last block's output x, read by the shared final norm and
// output head, whose logits at position t predict token t+1+k; mtp_loss is their auxiliary loss.
// forward(), the KV cache, sampling and evaluation use the next-token head alone.
// Legend: B batch, T time, C = d_model, H heads, Hkv key/value heads, Dk = C / H, V vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tfm/models/model.h"

namespace tfm {

// Per-layer key/value cache for incremental decoding.
struct KVCache {
  std::vector<Tensor> keys, values;  // per layer: (B, P, Hkv * Dk), P make_cache's positions (by default
                                     // max_seq_len), filled up to `length`
  int64_t batch = 0;
  int64_t length = 0;                // positions cached so far
  std::vector<int32_t> last_tokens;  // per sequence, the last token fed (the bigram embedding's context)
};

// A forward's logits: the next-token head's, and with model.mtp_heads K the extra heads'.
struct MultiTokenLogits {
  Tensor logits;              // (B, T, V): token t+1 at position t
  std::vector<Tensor> extra;  // K of (B, T, V): [k - 1] predicts token t+1+k at position t (k = 1..K)
};

class LanguageModel : public Model {
 public:
  LanguageModel(const ModelConfig& config, uint64_t init_seed);
  ~LanguageModel() override;

  const ModelConfig& config() const;
  // What the model costs for B sequences of T tokens (nn/module.h): every layer's cost, the embedding
  // and head, and what a step holds besides the layers (the backward's largest temporaries, ~5 C per
  // token, and the logits with their gradient); with model.mtp_heads, a training step's forward
  // (forward_multi_token, the extra heads included).
  static Cost cost(const ModelConfig& config, int64_t B, int64_t T);
  static FlopCount flops_per_token(const ModelConfig& config, int64_t seq_len);

  // tokens: B*T ids, row-major (B, T) -> logits (B, T, V).
  Tensor forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T);
  // Mean cross-entropy of logits (B, T, V) against targets (B*T).
  static Tensor loss(const Tensor& logits, const std::vector<int32_t>& targets);
  // forward() and, when extra_heads (and model.mtp_heads > 0), the extra heads' logits too.
  MultiTokenLogits forward_multi_token(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                       bool extra_heads = true);
  // Multi-token prediction's loss: the mean over the heads k = 1..K of head k's mean cross-entropy
  // over the positions t < T - k that have its target, targets[t + k] of the next-token targets (B*T);
  // the last k positions of each row have none and are left out.
  static Tensor mtp_loss(const std::vector<Tensor>& extra, const std::vector<int32_t>& targets, int64_t B,
                         int64_t T);

  // Incremental decoding: feeds T_new tokens per sequence after the cached ones and returns their
  // logits (B, T_new, V); equal (to 1e-5) to the full forward's logits at those positions. The cache
  // holds `positions` per sequence (0: model.max_seq_len; at most that): what a generation reaches, so
  // that a long max_seq_len costs only the positions used.
  KVCache make_cache(int64_t B, int64_t positions = 0) const;
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
