// How the text objectives (causal_lm, masked_lm) read and score a text: the token cache they map,
// causal_lm's evaluation over a token span and masked_lm's masking rule.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/random.h"
#include "tfm/models/language_model.h"

namespace tfm {

// How a text objective reaches its token cache: data.cache_dir, and (log) a line on stderr for every
// cache built and why. tfm data prepare and eval --dump-logits read the data this way too.
TokenCacheOptions token_cache_options(const Config& config, bool log);
// The text a new run of `config` trains on (data.path, data.val_fraction, data.tokenizer), read through
// the token cache with `cache` into windows of T tokens: a char or byte vocabulary from the corpus, a bpe
// or gpt2 one from its files, gaining the end-of-text id when documents are joined. tfm data prepare
// builds the cache this way.
Dataset load_new_run_text(const Config& config, int64_t T, const TokenCacheOptions& cache,
                          ShortSplit short_split = ShortSplit::Refuse);
// The tokenizer a new run reads from files (data.tokenizer "bpe" or "gpt2", data.tokenizer_path; gpt2
// without a path is GPT-2's own); ConfigError for the kinds whose vocabulary comes from the data.
Tokenizer tokenizer_from_file(const Config& config);
// The vocabulary a new run of `config` takes from data.path: a char or byte vocabulary as the token cache
// derives it from the corpus in any of its forms (a folder, a glob, JSON Lines, compressed; with the
// document separator when there is one), built or read through the cache as a run would.
// tokenizer_from_file for bpe and gpt2; ConfigError for word (the pairs').
Tokenizer data_vocabulary(const Config& config);

// causal_lm's evaluation: the mean loss over `batches` random (B, T) windows of `tokens`, drawn from
// a generator seeded with `seed`, in eval mode without a graph; nullopt when abandoned on `stop`.
std::optional<double> evaluate(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T,
                               int64_t batches, uint64_t seed, const std::atomic<bool>* stop);
// causal_lm's evaluation of the whole of `tokens` (train.eval_steps 0): every token after the first is
// a target exactly once. Non-overlapping windows: input t[kT, kT + T), target t[kT + 1, kT + T + 1),
// k = 0 .. W - 1 with W = floor((n - 1) / T), B windows per forward; the tail, the last (n - 1) mod T
// targets, is one shorter window of its own (input t[WT, n - 1), target t[WT + 1, n)), so its tokens see
// only the context inside it as the first tokens of every window do. The mean over all n - 1 targets
// (each window weighted by its tokens); no randomness, so the same value at every call. nullopt when
// abandoned on `stop`; n >= 2.
std::optional<double> evaluate_whole(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T,
                                     const std::atomic<bool>* stop);
// The same, never abandoned: the mean loss.
inline double evaluate(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T, int64_t batches,
                       uint64_t seed) {
  return *evaluate(model, tokens, B, T, batches, seed, nullptr);
}

// masked_lm's rule (BERT's, docs/architecture.md): each position of x is chosen with probability
// mask_prob; a chosen one becomes mask_id (80%), a uniformly random ordinary token in [0, ordinary)
// (10%) or stays (10%). y gets the original token at chosen positions and kNotMasked elsewhere. When
// no position was chosen one is, so the loss is defined. Returns the number chosen.
constexpr int32_t kNotMasked = -100;  // cross_entropy's ignore_index
int64_t mask_tokens(std::vector<int32_t>& x, std::vector<int32_t>& y, Rng& rng, double mask_prob,
                    int32_t mask_id, int64_t ordinary);

}  // namespace tfm
