#include "tfm/nn/model_config.h"

#include "tfm/engine/error.h"

namespace tfm {

template <>
const std::vector<std::string>& enum_names<NormKind>() {
  static const std::vector<std::string> names = {"layernorm", "rmsnorm"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<NormPosition>() {
  static const std::vector<std::string> names = {"pre", "post"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<PositionalEncoding>() {
  static const std::vector<std::string> names = {"sinusoidal", "learned", "rope"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<AttentionScore>() {
  static const std::vector<std::string> names = {"dot", "additive"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<HeadGating>() {
  static const std::vector<std::string> names = {"none", "topk"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<HeadMixing>() {
  static const std::vector<std::string> names = {"none", "talking_heads", "group_mlp"};
  return names;
}

ModelConfig resolved(ModelConfig c) {
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.d_ff == 0) c.d_ff = 4 * c.d_model;
  if (c.n_encoder_layers < 0) c.n_encoder_layers = c.n_layers;
  if (c.n_decoder_layers < 0) c.n_decoder_layers = c.n_layers;
  return c;
}

std::vector<std::string> model_config_errors(const ModelConfig& c) {
  std::vector<std::string> errors;
  auto n = [](int64_t v) { return std::to_string(v); };
  // Sizes a layer needs to exist (the config table's ranges are stricter; this guards direct use).
  if (c.d_model < 1 || c.n_heads < 1 || c.n_kv_heads < 1 || c.d_ff < 1 || c.max_seq_len < 1)
    errors.push_back("model: d_model " + n(c.d_model) + ", n_heads " + n(c.n_heads) + ", n_kv_heads " +
                     n(c.n_kv_heads) + ", d_ff " + n(c.d_ff) + " and max_seq_len " + n(c.max_seq_len) +
                     " must be positive (resolved() fills the ones left 0)");
  if (c.n_layers < 0 || c.n_encoder_layers < 0 || c.n_decoder_layers < 0)
    errors.push_back("model: n_layers " + n(c.n_layers) + ", n_encoder_layers " + n(c.n_encoder_layers) +
                     " and n_decoder_layers " + n(c.n_decoder_layers) + " must be >= 0");
  if (!(c.dropout >= 0.0f && c.dropout < 1.0f && c.attention_dropout >= 0.0f && c.attention_dropout < 1.0f))
    errors.push_back("model.dropout: " + std::to_string(c.dropout) + " and model.attention_dropout " +
                     std::to_string(c.attention_dropout) + " must be in [0, 1)");
  if (!errors.empty()) return errors;
  const int64_t H = c.n_heads;
  if (c.d_model % H != 0)
    errors.push_back("model.d_model: expected a multiple of model.n_heads = " + n(H) + ", got " +
                     n(c.d_model));
  if (H % c.n_kv_heads != 0)
    errors.push_back("model.n_kv_heads: expected a divisor of model.n_heads = " + n(H) + ", got " +
                     n(c.n_kv_heads));
  if (c.head_gating == HeadGating::TopK) {
    if (c.head_topk < 1 || c.head_topk > H)
      errors.push_back("model.head_topk: expected at most model.n_heads = " + n(H) + ", got " +
                       n(c.head_topk));
    if (c.attention_score != AttentionScore::Dot)
      errors.push_back(
          "model.head_gating: \"topk\" needs model.attention_score = \"dot\" (the fused kernel skips "
          "the unselected heads' rows)");
    if (c.head_mixing != HeadMixing::None)
      errors.push_back("model.head_gating: \"topk\" cannot be combined with model.head_mixing = \"" +
                       name_of(c.head_mixing) +
                       "\" (mixing reads every head's logits, gating skips most of them)");
  }
  if (c.positional_encoding == PositionalEncoding::Rope && c.d_model % H == 0 && c.head_dim() % 2 != 0)
    errors.push_back(
        "model.positional_encoding: \"rope\" turns pairs of a head's dims, so the head width "
        "model.d_model / model.n_heads must be even, got " +
        n(c.head_dim()));
  if (c.head_mixing == HeadMixing::GroupMlp && (c.head_groups < 1 || H % c.head_groups != 0))
    errors.push_back("model.head_groups: expected a divisor of model.n_heads = " + n(H) + ", got " +
                     n(c.head_groups));
  if (c.zero_init && c.tie_embeddings)
    errors.push_back(
        "model.zero_init: needs model.tie_embeddings = false (a zero head tied to the embedding would "
        "zero the embedding too)");
  if (c.logit_softcap < 0.0f)
    errors.push_back("model.logit_softcap: expected >= 0 (0 = off), got " + std::to_string(c.logit_softcap));
  if (c.bigram_buckets < 0)
    errors.push_back("model.bigram_buckets: expected >= 0 (0 = off), got " + n(c.bigram_buckets));
  if (c.mtp_heads < 0) errors.push_back("model.mtp_heads: expected >= 0 (0 = off), got " + n(c.mtp_heads));
  return errors;
}

void check_model_config(const ModelConfig& c, const char* where) {
  const std::vector<std::string> errors = model_config_errors(c);
  if (errors.empty()) return;
  std::string message = where;
  for (const std::string& e : errors) message += (message == where ? ": " : "\n") + e;
  throw ConfigError(message);
}

}  // namespace tfm
