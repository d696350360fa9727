// Text generation from a trained language model: the KV cache, a seeded draw, and the filters people
// expect (repetition penalty, temperature, top-k, top-p, min-p) and stop strings.
//
// The next token's distribution is made from the model's logits in this order, as Hugging Face's
// generate() applies its logits processors:
//   1. repetition penalty (CTRL, Keskar et al. 2019, sec. 4.1, as common tools implement it): the logit of
//      every token that occurs anywhere in the context (the whole prompt and every token generated so far,
//      not only the model's window; each distinct token once) is divided by the penalty when positive and
//      multiplied by it when negative;
//   2. temperature: logits / T; T = 0 is greedy: all the probability on the largest (penalised) logit, the
//      first one on a tie, so the filters below never change a greedy choice;
//   3. top-k: tokens whose logit is below the k-th largest are dropped (ties with the k-th kept); a k of 0,
//      or at or above the vocabulary, keeps every token, as Hugging Face's and llama.cpp's top-k do;
//   4. top-p (nucleus, Holtzman et al. 2020): of the tokens left, in descending probability, the smallest
//      set whose cumulative probability reaches p is kept, and every token tied with its least likely one;
//   5. min-p: tokens with probability below min_p * (the largest probability) are dropped.
// The kept tokens' probabilities are renormalised. All of it is computed in double, serially, in token
// order, so the same logits and seed give the same token whatever the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tfm/data/tokenizer.h"
#include "tfm/engine/enum_names.h"
#include "tfm/engine/random.h"
#include "tfm/models/language_model.h"

namespace tfm {

// The options that take a range of values, and each one's range: one home for generate() (through
// SampleOptions::check) and the front ends that spell an option their own way (tfm sample's --top-p,
// the board's "temperature"), so that all refuse the same values. enum_names spells each as its member
// ("top_p").
enum class SampleOption { MaxNewTokens, Temperature, TopK, TopP, MinP, RepetitionPenalty };
template <>
const std::vector<std::string>& enum_names<SampleOption>();
struct SampleRange {
  bool integer = false;  // a whole number
  double lo = 0.0, hi = 0.0;
  bool lo_open = false;             // (lo, hi] rather than [lo, hi]; hi infinite: no upper bound
  bool allows(double value) const;  // never NaN or an infinity
  std::string bounds() const;       // "(0, 1]", "[0, 100]", ">= 0"
  std::string expected() const;     // "a number in (0, 1]", "a number in [0, 100]", "an integer >= 0"
};
SampleRange sample_option_range(SampleOption option);

struct SampleOptions {
  std::string prompt;               // empty: start from empty_prompt_token
  int64_t max_new_tokens = 500;     // >= 0
  double temperature = 1.0;         // in [0, 100]; 0: greedy
  int64_t top_k = 0;                // >= 0; 0, or at least the vocabulary: all tokens
  double top_p = 1.0;               // in (0, 1]; 1: all tokens
  double min_p = 0.0;               // in [0, 1]; 0: all tokens
  double repetition_penalty = 1.0;  // in (0, 100]; 1: none
  // Generation ends at the first occurrence of any of these in the generated text (the prompt is not
  // searched); the stop string and what follows are not part of the text.
  std::vector<std::string> stop;
  // Generation ends when the model draws the end-of-text token (end_of_text_token), where a document of
  // its corpus ended; false draws on past it into a next document (llama.cpp's --ignore-eos).
  bool stop_at_end_of_text = true;
  uint64_t seed = 1337;

  // Throws ConfigError naming the first option outside its range (sample_option_range), as in
  // "SampleOptions: top_p: expected a number in (0, 1], got 0".
  void check() const;
};

// The distribution the next token is drawn from (the order above): (V,) probabilities summing to 1, 0 for
// a dropped token. `seen` (V,) marks the tokens the repetition penalty applies to (empty: none; another
// size throws). Throws for options out of range (SampleOptions::check) and for a NaN or +infinite logit,
// or none above -infinity (a diverged model: there is no distribution to draw from).
std::vector<double> next_token_distribution(const float* logits, int64_t V, const std::vector<bool>& seen,
                                            const SampleOptions& options);

// A token drawn from `probs` (as next_token_distribution makes them) with one draw of `rng`. Throws when
// there is nothing to draw: no probabilities, one NaN or negative, or none positive.
int32_t draw_token(const std::vector<double>& probs, Rng& rng);

// The vocabulary's end-of-text token: the document separator of a multi-document corpus, or a gpt2
// vocabulary's "<|endoftext|>"; -1 when it has none (one document: nothing marks an end).
int32_t end_of_text_token(const Tokenizer& tokenizer);

// A prompt's ids: its text's, except that each "<|endoftext|>" (kEndOfText) in it is the end-of-text
// token when the vocabulary has one (end_of_text_token), as Hugging Face's GPT-2 tokenizer and llama.cpp
// read a prompt: a sample's printed text, given back as a prompt, reads as the model saw it. Without that
// token the characters are text. Tokenizer::encode_marked says how errors count; a corpus is never read
// this way, so data cannot forge a document end.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& source);

// The token generation starts from when the prompt is empty: the document separator when the vocabulary
// has one (a gpt2 vocabulary always: "<|endoftext|>", GPT-2's convention), else a newline (a BPE
// vocabulary's encoding of "\n", a char vocabulary's newline when it has one), else id 0.
int32_t empty_prompt_token(const Tokenizer& tokenizer);

// One generated continuation.
struct Generation {
  std::vector<int32_t> prompt_tokens;  // the tokens the model read first: the prompt's (its last
                                       // max_seq_len), or empty_prompt_token's one for an empty prompt
  std::string text;                    // the generated text (without the prompt), cut before a stop string
  std::vector<int32_t> tokens;         // every token drawn (the last one completed the stop string, if any)
  std::vector<double> logprobs;        // each token's natural log-probability under the distribution it was
                                       // drawn from (after penalty, temperature and filters: 0 when greedy)
  std::string stopped_at;              // the stop string that ended it, kEndOfText when the end-of-text token
                                       // did; "" when max_new_tokens ran out
};

// Generates with the model's KV cache, drawing from `rng` (a caller that wants several samples of one
// prompt keeps drawing from the same generator). The tokenizer must be the model's: as many tokens as
// model.vocab_size (tfm::Error otherwise, before anything is read); options out of range throw
// ConfigError (SampleOptions::check). on_text receives the text as it is made, holding back a
// piece that may be the start of a stop string until it is known not to be one. With `record`, the
// result keeps the text, tokens and log-probabilities; without, only stopped_at (a long streamed
// generation then stays in constant memory).
Generation generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& options, Rng& rng,
                    const std::function<void(const std::string&)>& on_text, bool record);

// One continuation drawn with Rng(options.seed). Returns the generated text when there is no on_text
// (streamed text is not also kept).
std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& options,
                     const std::function<void(const std::string&)>& on_text = {});

}  // namespace tfm
