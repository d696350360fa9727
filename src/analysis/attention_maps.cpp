#include "tfm/analysis/attention_maps.h"

#include <cmath>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"

namespace tfm {
namespace {

// Cosine similarity of every pair of rows of x (n, m), accumulated in double: (n, n). A row of zeros (a
// masked head's contribution) has no direction: its cosines are NaN, not 0 ("complementary").
Tensor row_cosines(const float* x, int64_t n, int64_t m) {
  Tensor out = Tensor::empty({n, n});
  std::vector<double> norm(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < m; ++k) norm[i] += static_cast<double>(x[i * m + k]) * x[i * m + k];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int64_t k = 0; k < m; ++k) dot += static_cast<double>(x[i * m + k]) * x[j * m + k];
      const double denom = std::sqrt(norm[i] * norm[j]);
      out.data()[i * n + j] = denom > 0 ? static_cast<float>(dot / denom) : std::nanf("");
    }
  return out;
}

// The mean over the pairs i != j whose similarity is defined; NaN when none is (every head but one
// masked), 0 with a single head.
double mean_off_diagonal(const Tensor& s) {
  const int64_t n = s.size(0);
  if (n < 2) return 0.0;
  double sum = 0.0;
  int64_t pairs = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (i != j && std::isfinite(s.data()[i * n + j])) sum += s.data()[i * n + j], ++pairs;
  return pairs > 0 ? sum / static_cast<double>(pairs) : std::nan("");
}

nlohmann::json to_json(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  if (t.dim() == 1) return v;
  nlohmann::json out = nlohmann::json::array();
  const int64_t inner = t.numel() / t.size(0);
  for (int64_t i = 0; i < t.size(0); ++i) {
    Shape rest(t.shape().begin() + 1, t.shape().end());
    out.push_back(to_json(
        Tensor::from_vector(std::vector<float>(v.begin() + i * inner, v.begin() + (i + 1) * inner), rest)));
  }
  return out;
}

}  // namespace

AttentionText attention_text(const Tokenizer& tok, const std::string& text, const LanguageModel& model,
                             const std::string& flag, int32_t mask_id) {
  AttentionText t;
  t.ids = encode_with_masks(tok, text, mask_id, flag);
  const int64_t max_len = model.config().max_seq_len;
  if (t.ids.empty()) throw ConfigError(flag + ": empty");
  if (static_cast<int64_t>(t.ids.size()) > max_len)
    throw ConfigError(flag + ": " + std::to_string(t.ids.size()) +
                      " tokens, the model's context (model.max_seq_len) is " + std::to_string(max_len));
  for (int32_t id : t.ids) t.tokens.push_back(id == mask_id ? kMaskToken : tok.decode(id));
  return t;
}

std::vector<LayerAttention> analyze_attention(LanguageModel& model, const std::vector<int32_t>& tokens) {
  const ModelConfig& cfg = model.config();
  const int64_t T = static_cast<int64_t>(tokens.size());
  TFM_CHECK(T >= 1 && T <= cfg.max_seq_len, "analyze_attention", "text of ", T,
            " tokens; the model takes 1 to ", cfg.max_seq_len);
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.set_training(false);
  model.set_record_attention(true);
  model.forward(tokens, 1, T);
  model.set_record_attention(false);
  model.set_training(was_training);

  const int64_t H = cfg.n_heads, C = cfg.d_model, Dk = C / H;
  std::vector<LayerAttention> layers;
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    LayerAttention la;
    la.probabilities = reshape(model.attention_probabilities()[l], {H, T, T}).clone();  // (1, H, T, T)
    la.pattern_similarity = row_cosines(la.probabilities.data(), H, T * T);
    // Head contributions c_i = o_i Wo_i^T: (H, T, C) from o (T, H, Dk) and Wo (C, H*Dk).
    const Tensor o = contiguous_values(model.head_outputs()[l]);
    const NamedParameter* wo = model.find_parameter("blocks." + std::to_string(l) + ".attn.wo.weight");
    TFM_CHECK(wo != nullptr, "analyze_attention", "model has no blocks.", l, ".attn.wo.weight",
              cfg.head_mixing == HeadMixing::GroupMlp
                  ? " (model.head_mixing = group_mlp replaces Wo by an MLP, through "
                    "which the heads' contributions do not separate)"
                  : "");
    const Tensor w = contiguous_values(wo->value);
    Tensor contrib = Tensor::empty({H, T, C});
    for (int64_t h = 0; h < H; ++h)
      gemm(false, true, T, C, Dk, 1.0f, o.data() + h * Dk, H * Dk, w.data() + h * Dk, H * Dk, 0.0f,
           contrib.data() + h * T * C, C);
    la.output_similarity = row_cosines(contrib.data(), H, T * C);
    la.mean_output_similarity = mean_off_diagonal(la.output_similarity);
    la.mean_pattern_similarity = mean_off_diagonal(la.pattern_similarity);
    layers.push_back(std::move(la));
  }
  return layers;
}

nlohmann::json pair_attention_report_json(const PairAttention& a) {
  nlohmann::json report = {
      {"kind", "seq2seq"}, {"source_tokens", a.source_tokens}, {"target_tokens", a.target_tokens}};
  report["similarity"] = "pattern_similarity: cosine of the heads' attention maps (1 = the same pattern)";
  if (!a.notes.empty()) report["notes"] = a.notes;
  const auto kind = [](const std::vector<Tensor>& layers) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t l = 0; l < layers.size(); ++l) {
      const Tensor p = contiguous_values(layers[l]);  // (H, rows, cols)
      const Tensor sim = row_cosines(p.data(), p.size(0), p.size(1) * p.size(2));
      out.push_back({{"layer", l},
                     {"probabilities", to_json(p)},
                     {"pattern_similarity", to_json(sim)},
                     {"mean_pattern_similarity", mean_off_diagonal(sim)}});
    }
    return out;
  };
  report["encoder"] = kind(a.encoder);
  report["decoder_self"] = kind(a.decoder_self);
  report["cross"] = kind(a.cross);
  return report;
}

nlohmann::json attention_report_json(const std::vector<LayerAttention>& layers,
                                     const std::vector<std::string>& token_text) {
  nlohmann::json report;
  report["tokens"] = token_text;
  report["similarity"] =
      "output_similarity: cosine of the heads' contributions after Wo (1 = redundant, 0 = complementary); "
      "pattern_similarity: cosine of the attention maps";
  report["layers"] = nlohmann::json::array();
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerAttention& la = layers[l];
    report["layers"].push_back({{"layer", l},
                                {"probabilities", to_json(la.probabilities)},
                                {"output_similarity", to_json(la.output_similarity)},
                                {"pattern_similarity", to_json(la.pattern_similarity)},
                                {"mean_output_similarity", la.mean_output_similarity},
                                {"mean_pattern_similarity", la.mean_pattern_similarity}});
  }
  return report;
}

}  // namespace tfm
