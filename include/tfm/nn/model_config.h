// The options of a Transformer model: one struct, each default written once, here. The config table
// (config/config.h) binds every model.* key to its member, so a key's default, type and allowed values
// come from this file, and every layer reads its options from this struct.
// Legend: B batch, T time, C = d_model, H heads, Hkv key/value heads, Dk = C / H, F = d_ff, V vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/engine/enum_names.h"
#include "tfm/engine/ops.h"

namespace tfm {

// Each variant is an enum; enum_names<E>() (engine/enum_names.h) spells its values as configs do.
// Activation, the feed-forward's, is the engine's own (engine/ops.h: the fused op takes it as it is).
enum class NormKind { LayerNorm, RMSNorm };  // what every norm of the model is
enum class NormPosition { Pre, Post };       // a norm before each sub-layer, or after its add
enum class PositionalEncoding { Sinusoidal, Learned, Rope };
enum class AttentionScore { Dot, Additive };             // scaled dot-product or Bahdanau's additive scores
enum class HeadGating { None, TopK };                    // top-k gated heads (MultiHeadAttention)
enum class HeadMixing { None, TalkingHeads, GroupMlp };  // cross-head interaction (MultiHeadAttention)

template <>
const std::vector<std::string>& enum_names<NormKind>();
template <>
const std::vector<std::string>& enum_names<NormPosition>();
template <>
const std::vector<std::string>& enum_names<PositionalEncoding>();
template <>
const std::vector<std::string>& enum_names<AttentionScore>();
template <>
const std::vector<std::string>& enum_names<HeadGating>();
template <>
const std::vector<std::string>& enum_names<HeadMixing>();

struct ModelConfig {
  int64_t vocab_size = 0;  // V: from the data's tokenizer, not a key
  int64_t d_model = 128;   // C
  int64_t n_layers = 4;
  int64_t n_heads = 4;     // H
  int64_t n_kv_heads = 0;  // Hkv, 0 = n_heads; grouped-query when 1 < Hkv < H, multi-query when 1
  int64_t d_ff = 0;        // F, 0 = 4 * d_model
  int64_t max_seq_len = 64;
  float dropout = 0.0f;                      // on the embeddings and every residual branch
  float attention_dropout = 0.0f;            // on the attention probabilities
  Activation activation = Activation::Gelu;  // SwiGLU: d_ff is the width of the gate and of the up projection
  NormKind norm = NormKind::LayerNorm;
  float norm_eps = 1e-5f;  // every norm's, QK-norm's too
  NormPosition norm_position = NormPosition::Pre;
  PositionalEncoding positional_encoding = PositionalEncoding::Sinusoidal;
  double rope_theta = 10000.0;  // RoPE's base: pair i of a head turns by p * theta^(-2i/Dk)
  bool qk_norm = false;         // RMSNorm of each head's queries and keys before RoPE
  AttentionScore attention_score = AttentionScore::Dot;
  HeadGating head_gating = HeadGating::None;
  int64_t head_topk = 2;            // top-k gating: heads per token
  float head_balance_loss = 0.01f;  // top-k gating: weight of the load-balancing term
  HeadMixing head_mixing = HeadMixing::None;
  int64_t head_groups = 2;     // group_mlp: groups of heads
  bool causal = true;          // language models: mask future positions
  bool tie_embeddings = true;  // the output head is the token embedding
  bool bias = true;            // biases in the attention and feed-forward projections
  // The encoder-decoder (models/encoder_decoder.h) only: vocab_size is the target side's.
  int64_t source_vocab_size = 0;
  int64_t n_encoder_layers = -1;  // -1 = n_layers
  int64_t n_decoder_layers = -1;  // -1 = n_layers
  // The speedrun tricks (docs/speedrun.md, "Tricks"), language models only, each off by default:
  bool zero_init = false;       // wo, fc2 and the (untied) head start at zero
  float logit_softcap = 0.0f;   // c > 0: logits = c tanh(logits / c)
  bool x0_skip = false;         // block l's input a_l x + b_l x0, x0 the embedding output
  bool value_residual = false;  // V_l = lambda_l V_l + (1 - lambda_l) V_1 for l > 0
  int64_t bigram_buckets = 0;   // > 0: a table of bigram embeddings indexed by the hashed token pair
  int64_t mtp_heads = 0;        // K > 0: extra training-only heads predicting tokens t+2 .. t+1+K

  int64_t head_dim() const { return d_model / n_heads; }  // Dk
  // The groups head mixing mixes within: group_mlp's head_groups; talking_heads mixes all heads as one
  // group (and without mixing there is one trivial group).
  int64_t mixing_groups() const { return head_mixing == HeadMixing::GroupMlp ? head_groups : 1; }
};

// The options' derived defaults filled in: n_kv_heads 0 -> n_heads, d_ff 0 -> 4 * d_model, encoder
// and decoder layers -1 -> n_layers. Every layer and model builds from a resolved config; the config
// table derives these keys through it too.
ModelConfig resolved(ModelConfig c);

// What makes a resolved config unbuildable (heads that do not divide d_model, top-k above H, ...):
// one message per problem, each starting with the config key it is about; empty when it can be built.
// The config table reports them all at once; check_model_config throws them.
std::vector<std::string> model_config_errors(const ModelConfig& c);
// Throws ConfigError "where: ..." with model_config_errors(c), one per line, when there are any.
void check_model_config(const ModelConfig& c, const char* where);

}  // namespace tfm
