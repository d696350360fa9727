// Beam search (greedy at width 1) over B independent sources, driven by what it needs of a model and
// nothing more: the next-token log-probabilities of every live hypothesis. The encoder-decoder's
// translate() drives it with its cached decoder; any next-token model could.
// Legend: B sources, N beam width, R = B * N rows (row b * N + i = hypothesis i of source b), V vocabulary.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace tfm {

enum class LengthPenalty {
  Gnmt,   // score / ((5 + len) / 6)^alpha (Wu et al. 2016, GNMT)
  Power,  // score / len^alpha
};

struct BeamSearchOptions {
  int64_t beam = 1;     // N; 1 = greedy
  int64_t max_len = 1;  // generated tokens per source, <eos> included
  float alpha = 0.0f;   // length penalty exponent (0 = none: plain sum of log-probabilities)
  LengthPenalty penalty = LengthPenalty::Gnmt;
  int32_t bos = 0, eos = 1;
};

// The model side of a search.
struct NextTokenModel {
  // Log-probabilities (R, V) of the token after each row's prefix (<bos> + generated so far, all of
  // length t + 1 at step t).
  std::function<std::vector<float>(int64_t t, const std::vector<std::vector<int32_t>>& prefixes)> log_probs;
  // Rows moved: row r continues the hypothesis of parents[r] (a model with a cache reorders it).
  std::function<void(const std::vector<int64_t>& parents)> reorder;
  int64_t vocab_size = 0;  // V
};

// Each source's best hypothesis, without <bos> and <eos>. A hypothesis ends at <eos> or after max_len
// tokens; the search keeps N live hypotheses per source (extending each by its 2N best tokens, so N that
// do not end survive), counts an ending one only when it ranks among the N best (as GNMT and fairseq),
// stops a source once N have ended, and returns the one with the best sum of log-probabilities /
// penalty(len), len = generated tokens with <eos>. Ties go to the lower row, then the lower token.
std::vector<std::vector<int32_t>> beam_search(int64_t B, const NextTokenModel& model,
                                              const BeamSearchOptions& options);

}  // namespace tfm
