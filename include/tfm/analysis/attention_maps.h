// What each attention head does: per layer and head, the attention probabilities on a text, and how
// alike the heads of a layer are (the question multi-head attention is about).
//
// Head similarity rho_ij is the cosine similarity of two heads' contributions to the layer's output:
// head i contributes c_i = o_i Wo[:, i*Dk:(i+1)*Dk]^T (T, C), its attention output pushed through its
// slice of the output projection, so all heads are compared in the same d_model space (their raw
// Dk-wide outputs live in unrelated coordinates). rho near 1: redundant heads; near 0: complementary.
// The similarity of the attention patterns themselves (cosine of the flattened (T, T) maps) is
// reported beside it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/models/language_model.h"
#include "tfm/objectives/inference.h"

namespace tfm {

struct LayerAttention {
  Tensor probabilities;                 // (H, T, T)
  Tensor output_similarity;             // (H, H): rho_ij of the heads' contributions (NaN for a masked head)
  Tensor pattern_similarity;            // (H, H): cosine of the attention maps
  double mean_output_similarity = 0.0;  // mean off-diagonal rho over the heads not masked (0 with a single
                                        // head, NaN with fewer than two unmasked)
  double mean_pattern_similarity = 0.0;
};

// Runs the model in eval mode on one sequence of tokens (T <= max_seq_len) and analyses every layer.
std::vector<LayerAttention> analyze_attention(LanguageModel& model, const std::vector<int32_t>& tokens);

// `text` as analyze_attention reads it: its ids and each token's text (the maps' labels). With a
// masked_lm run's mask_id (objectives/inference.h's mask_token_id), each "[MASK]" is that token, as
// fill-mask reads it. ConfigError naming `flag` (tfm attention's --text, the board's text) when it is
// empty or longer than the model's context.
struct AttentionText {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
};
AttentionText attention_text(const Tokenizer& tok, const std::string& text, const LanguageModel& model,
                             const std::string& flag, int32_t mask_id = -1);

// {"tokens": [...], "layers": [{"layer": l, "probabilities": [H][T][T], "output_similarity": [H][H],
//   "pattern_similarity": [H][H], "mean_output_similarity": x, "mean_pattern_similarity": y}]}; a value
// that is not defined (a masked head's similarity) is null. tfm attention adds "mask_heads" when it
// masked some.
nlohmann::json attention_report_json(const std::vector<LayerAttention>& layers,
                                     const std::vector<std::string>& token_text);

// The report of an encoder-decoder's attention on one sentence pair (objectives/inference.h):
// {"kind": "seq2seq", "source_tokens": [...], "target_tokens": [...], "encoder" | "decoder_self" |
//  "cross": [{"layer": l, "probabilities": [H][rows][cols], "pattern_similarity": [H][H],
//  "mean_pattern_similarity": x}], "notes": [a line for each side cut to what the model reads, or with words
//  outside its vocabulary, when one was]}
nlohmann::json pair_attention_report_json(const PairAttention& attention);

}  // namespace tfm
