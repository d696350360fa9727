// What a trained objective's model does for a user, beyond sampling (models/sampling.h): masked_lm
// fills masks, seq2seq translates and shows its attention on a sentence pair. Each function refuses an
// objective whose capabilities().inference is another, naming the run's objective.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/tensor.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/objectives/objective.h"

namespace tfm {

// masked_lm: every "[MASK]" in `text` is one masked position; the top_k candidates per position
// with their probabilities, in order of the positions. `source` names the text in errors (a flag, or a
// request's field).
struct MaskCandidates {
  int64_t position = 0;  // token index in the encoded text
  std::vector<std::pair<std::string, double>> candidates;
};
struct FillMaskResult {
  std::vector<int32_t> tokens;  // the encoded input, [MASK] = mask id
  std::vector<MaskCandidates> masks;
};
constexpr const char* kMaskToken = "[MASK]";
FillMaskResult fill_mask(Objective& objective, const std::string& text, int64_t top_k,
                         const std::string& source = "--text");
// The id a masked_lm run reads [MASK] as (its last); -1 for other objectives.
int32_t mask_token_id(const Objective& objective);
// `text` encoded with each "[MASK]" in it as `mask_id` and each "<|endoftext|>" as the end-of-text token
// when the vocabulary has one, as a prompt is (Tokenizer::encode_marked); mask_id -1: "[MASK]" is text
// like any other. `positions`, when given, gets the token index of each mask.
std::vector<int32_t> encode_with_masks(const Tokenizer& tokenizer, const std::string& text, int32_t mask_id,
                                       const std::string& flag, std::vector<int64_t>* positions = nullptr);

// seq2seq: translations of `texts` (each encoded with the source vocabulary, unknown symbols as <unk>,
// truncated to data.max_source_len), detokenized; greedy or beam search as `options` say
// (options.max_len 0 = data.max_target_len + 1; more than the model's max_seq_len: ConfigError naming
// --max-len). `source` names the texts in errors (a flag, or "stdin line 3"). No texts: only the run and
// the options are checked. `warnings`, when given, gets a line for each text longer than
// data.max_source_len (the model was trained on no longer source, and reads only that much of it) and
// for each text with words (characters) outside the source vocabulary, which it reads as <unk>.
std::vector<std::string> translate_texts(Objective& objective, const std::vector<std::string>& texts,
                                         const TranslateOptions& options,
                                         const std::string& source = "--text",
                                         std::vector<std::string>* warnings = nullptr);

// An encoder-decoder's attention on one sentence pair (pair_attention computes it, analysis/
// attention_maps.h reports it): per layer, the encoder's self-attention (H, S, S), the decoder's causal
// self-attention (H, T, T) and its cross-attention (H, T, S): queries from the target side, keys and
// values from the source.
struct PairAttention {
  std::vector<std::string> source_tokens;  // S: the source's tokens, then <eos>
  std::vector<std::string> target_tokens;  // T: row t is the decoder predicting this token (<eos> last)
  std::vector<Tensor> encoder, decoder_self, cross;
  std::vector<std::string> notes;  // a line for each side longer than the model reads (what was left
                                   // out), and for the words of each outside its vocabulary (<unk>)
};

// The attention maps of a seq2seq run on one pair: `source` read as translate reads it, `target`
// teacher-forced (empty: the run's greedy translation of the source). `source_name` and `target_name`
// name them in errors and notes (flags, or a request's fields).
PairAttention pair_attention(Objective& objective, const std::string& source, const std::string& target,
                             const std::string& source_name = "--text",
                             const std::string& target_name = "--target");

}  // namespace tfm
