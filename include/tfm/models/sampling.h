// Text generation from a trained language model: the KV cache, temperature and top-k.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "tfm/data/tokenizer.h"
#include "tfm/models/language_model.h"

namespace tfm {

struct SampleOptions {
  std::string prompt;  // empty: start from a newline (or token 0 when there is none)
  int64_t max_new_tokens = 500;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: all tokens
  uint64_t seed = 1337;
};
// Generates with the model's KV cache; calls on_text with each new piece of text as it is made.
// Returns the generated text (without the prompt) when there is no on_text (streamed text is not also
// kept: memory stays constant however many tokens are asked for).
std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& options,
                     const std::function<void(const std::string&)>& on_text = {});

}  // namespace tfm
