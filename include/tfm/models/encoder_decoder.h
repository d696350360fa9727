// The Transformer encoder-decoder (Vaswani et al. 2017; d2l.ai, chapter "Transformer") for
// sequence-to-sequence training over sentence pairs (pairs.h), on the Model base of model.h.
// Legend: B batch, S source length, T target length, C = d_model, H heads, Hkv key/value heads,
// Dk = C / H, V target vocabulary, Vs source vocabulary, N beam width.
//
// Config (ModelConfig): vocab_size = V, source_vocab_size = Vs, n_encoder_layers, n_decoder_layers
// (n_layers and causal are not read), d_model, n_heads, n_kv_heads, d_ff, max_seq_len (the position
// table of both sides: S and T must not exceed it), dropout, attention_dropout, activation,
// norm_position, positional_encoding, tie_embeddings (the target embedding is the output head),
// bias, attention_score.
//
// Encoder: x = E_src[src] * sqrt(C) + P[:S] (sinusoidal; learned: E_src[src] + W_src_pos[:S], as the
// language model of docs/architecture.md), dropout, EncoderBlocks with bidirectional self-attention that
// ignores the source padding (keys j >= src_lengths[b]), then LayerNorm (pre-norm only). Decoder: y =
// E_tgt[tgt] * sqrt(C) + P[:T] (or learned), dropout, DecoderBlocks (causal self-attention, cross-attention
// to the encoder output with the source padding masked, feed-forward), LayerNorm (pre-norm), logits = y
// E_tgt^T when tied, else head(y) without bias. Init: Model::adopt_parameters with n_encoder_layers +
// n_decoder_layers residual layers (every *wo.weight and *fc2.weight, the cross-attention's wo included, gets
// 0.02 / sqrt(2 * that)).
//
// Parameter names (export and checkpoint names, in this order):
//   src_emb.weight (Vs, C), src_pos.weight (max_seq_len, C) if learned,
//   encoder.blocks.{i}.ln1.{weight,bias}, encoder.blocks.{i}.ln2.{weight,bias},
//   encoder.blocks.{i}.attn.{wq,wk,wv,wo}.{weight,bias}, encoder.blocks.{i}.fc1.{weight,bias},
//   encoder.blocks.{i}.fc2.{weight,bias}, encoder.ln_f.{weight,bias} (pre-norm),
//   tgt_emb.weight (V, C), tgt_pos.weight if learned,
//   decoder.blocks.{i}.ln1.*, decoder.blocks.{i}.attn.{wq,wk,wv,wo}.*, decoder.blocks.{i}.ln2.*,
//   decoder.blocks.{i}.cross.{wq,wk,wv,wo}.*, decoder.blocks.{i}.ln3.*, decoder.blocks.{i}.fc1.*,
//   decoder.blocks.{i}.fc2.*, decoder.ln_f.* (pre-norm), head.weight (V, C) if untied.
//   (biases only with bias = true; attn.score_v (H, Dk) / cross.score_v with additive scoring.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/data/pairs.h"
#include "tfm/engine/tensor.h"
#include "tfm/models/beam_search.h"
#include "tfm/models/model.h"

namespace tfm {

// Incremental-decoding state of a batch of R rows (R = sources, or sources * beam).
struct Seq2SeqCache {
  std::vector<Tensor> self_keys,
      self_values;  // per decoder layer: (R, max_seq_len, Hkv*Dk), filled to `length`
  std::vector<Tensor> cross_keys, cross_values;  // per decoder layer: (R, S, Hkv*Dk), from the encoder output
  std::vector<int64_t> src_lengths;              // (R)
  int64_t rows = 0, source_len = 0;
  int64_t length = 0;  // target positions cached so far
};

struct TranslateOptions {
  int64_t beam = 1;     // 1 = greedy
  int64_t max_len = 0;  // generated tokens per sentence, <eos> included (0 = max_seq_len)
  float alpha = 0.0f;   // length penalty exponent (0 = none: plain sum of log-probabilities)
  LengthPenalty penalty = LengthPenalty::Gnmt;
  bool use_cache = true;  // false: recompute the whole decoder every step (the reference for tests)
  int32_t bos = kBosId, eos = kEosId;
};

class Seq2SeqModel : public Model {
 public:
  Seq2SeqModel(const ModelConfig& config, uint64_t init_seed);
  ~Seq2SeqModel() override;

  const ModelConfig& config() const;
  // What the model costs for B pairs of S source and T target tokens (nn/module.h): both stacks'
  // layers, the embeddings and the head, the backward's largest temporaries and the logits.
  static Cost cost(const ModelConfig& config, int64_t B, int64_t S, int64_t T);
  // Per target token, for a source of src_len and a target of tgt_len tokens: cost()'s FLOPs over the
  // target tokens (the encoder's at src_len / tgt_len source tokens per target token); train = 3 x
  // forward.
  static FlopCount flops_per_token(const ModelConfig& config, int64_t src_len, int64_t tgt_len);

  // Teacher forcing. src (B, S) and tgt_in (B, T) row-major ids, src_lengths (B) real source tokens
  // (keys j >= src_lengths[b] are padding) -> logits (B, T, V), differentiable. The loss is the
  // caller's: cross_entropy(logits, tgt_out, kPadId).
  Tensor forward(const std::vector<int32_t>& src, const std::vector<int64_t>& src_lengths, int64_t B,
                 int64_t S, const std::vector<int32_t>& tgt_in, int64_t T);
  // The encoder alone: (B, S, C) (after encoder.ln_f in pre-norm).
  Tensor encode(const std::vector<int32_t>& src, const std::vector<int64_t>& src_lengths, int64_t B,
                int64_t S);
  // The decoder alone over a full target prefix: memory (B, S, C) from encode -> logits (B, T, V).
  Tensor decode(const Tensor& memory, const std::vector<int64_t>& src_lengths,
                const std::vector<int32_t>& tgt_in, int64_t T);

  // Incremental decoding (no gradients): make_cache projects the memory's cross-attention keys and
  // values once; forward_cached feeds T_new target tokens per row after the cached ones and returns
  // their logits (R, T_new, V), equal (to 1e-5) to decode()'s at those positions.
  // The decoder's self-attention cache holds `positions` per row (0: max_seq_len; at most that).
  Seq2SeqCache make_cache(const Tensor& memory, const std::vector<int64_t>& src_lengths,
                          int64_t positions = 0) const;
  Tensor forward_cached(Seq2SeqCache& cache, const std::vector<int32_t>& tgt, int64_t T_new);
  // Keeps rows `rows` of the cache, in that order (repeats allowed): beam search's reordering.
  static void select_rows(Seq2SeqCache& cache, const std::vector<int64_t>& rows);

  // Greedy (beam = 1) or beam search (beam_search.h), batched over the B sources, driven by the
  // cached decoder. Each result is the target ids without <bos> and <eos>.
  std::vector<std::vector<int32_t>> translate(const std::vector<int32_t>& src,
                                              const std::vector<int64_t>& src_lengths, int64_t B, int64_t S,
                                              const TranslateOptions& options = {});

  // When on, each forward/decode/forward_cached keeps the attention probabilities of its last call,
  // per layer: encoder self (B, H, S, S), decoder self (B, H, T, T) and cross (B, H, T, S)
  // (forward_cached: T = T_new queries over the cached keys).
  void set_record_attention(bool on);
  const std::vector<Tensor>& encoder_attention() const;
  const std::vector<Tensor>& decoder_self_attention() const;
  const std::vector<Tensor>& decoder_cross_attention() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
