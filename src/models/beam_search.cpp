// Beam search over next-token log-probabilities (beam_search.h).
// Legend: B sources, N beam width, R = B * N rows, V vocabulary.
#include "tfm/models/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tfm/engine/error.h"

namespace tfm {
namespace {

// A live or finished hypothesis of beam search.
struct Hypothesis {
  std::vector<int32_t> tokens;  // generated, <bos> excluded
  double score = 0;             // sum of log-probabilities
};

double length_penalty(const BeamSearchOptions& o, int64_t len) {
  if (o.alpha == 0.0f) return 1.0;
  const double l = static_cast<double>(len);
  return o.penalty == LengthPenalty::Gnmt ? std::pow((5.0 + l) / 6.0, o.alpha) : std::pow(l, o.alpha);
}

}  // namespace

std::vector<std::vector<int32_t>> beam_search(int64_t B, const NextTokenModel& model,
                                              const BeamSearchOptions& o) {
  const int64_t N = o.beam, V = model.vocab_size, max_len = o.max_len;
  TFM_CHECK(N >= 1, "beam_search", "beam must be >= 1, got ", N);
  const int64_t R = B * N;  // row b * N + i = hypothesis i of source b; every row starts as <bos>
  std::vector<std::vector<int32_t>> prefix(R, std::vector<int32_t>{o.bos});  // <bos> + generated
  const double kNone = -std::numeric_limits<double>::infinity();
  std::vector<double> score(R, kNone);  // sum of log-probabilities; -inf = no hypothesis in this row
  for (int64_t b = 0; b < B; ++b) score[b * N] = 0.0;  // one hypothesis per source to start
  std::vector<std::vector<Hypothesis>> finished(B);
  std::vector<bool> done(B, false);

  for (int64_t t = 0; t < max_len && std::count(done.begin(), done.end(), false) > 0; ++t) {
    const std::vector<float> logp = model.log_probs(t, prefix);  // (R, V)
    std::vector<int64_t> parent(R);
    std::vector<std::vector<int32_t>> next_prefix(R);
    std::vector<double> next_score(R, kNone);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < N; ++i) parent[b * N + i] = b * N + i;  // done sources keep their rows
      if (done[b]) {
        for (int64_t i = 0; i < N; ++i) next_prefix[b * N + i] = prefix[b * N + i];
        for (int64_t i = 0; i < N; ++i) next_prefix[b * N + i].push_back(o.eos);
        continue;
      }
      // The 2N best extensions (score desc, then row and token asc): enough for N that do not end.
      struct Candidate {
        double score;
        int64_t row;
        int32_t token;
      };
      std::vector<Candidate> cand;
      for (int64_t i = 0; i < N; ++i) {
        const int64_t r = b * N + i;
        if (score[r] == kNone) continue;
        for (int64_t v = 0; v < V; ++v)
          cand.push_back({score[r] + static_cast<double>(logp[r * V + v]), r, static_cast<int32_t>(v)});
      }
      const size_t keep = std::min(cand.size(), static_cast<size_t>(2 * N));
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                        [](const Candidate& x, const Candidate& y) {
                          if (x.score != y.score) return x.score > y.score;
                          return x.row != y.row ? x.row < y.row : x.token < y.token;
                        });
      int64_t n_live = 0;
      for (size_t k = 0; k < keep && n_live < N; ++k) {
        const Candidate& cd = cand[k];
        std::vector<int32_t> tokens(prefix[cd.row].begin() + 1, prefix[cd.row].end());
        tokens.push_back(cd.token);
        if (cd.token == o.eos) {
          // An ending hypothesis counts only when it ranks among the N best (as GNMT / fairseq).
          if (static_cast<int64_t>(k) < N) finished[b].push_back({tokens, cd.score});
          continue;
        }
        const int64_t r = b * N + n_live++;
        parent[r] = cd.row;
        next_prefix[r] = prefix[cd.row];
        next_prefix[r].push_back(cd.token);
        next_score[r] = cd.score;
        if (t + 1 == max_len) finished[b].push_back({tokens, cd.score});  // out of room: ends here
      }
      for (int64_t i = n_live; i < N; ++i) {  // rows without a hypothesis (score -inf) copy the first
        const int64_t r = b * N + i;
        if (n_live > 0) {
          parent[r] = parent[b * N];
          next_prefix[r] = next_prefix[b * N];
        } else {
          next_prefix[r] = prefix[r];
          next_prefix[r].push_back(o.eos);
        }
      }
      if (static_cast<int64_t>(finished[b].size()) >= N || n_live == 0 || t + 1 == max_len) done[b] = true;
    }
    prefix = std::move(next_prefix);
    score = std::move(next_score);
    bool moved = false;
    for (int64_t r = 0; r < R; ++r) moved = moved || parent[r] != r;
    if (moved && model.reorder) model.reorder(parent);
  }

  std::vector<std::vector<int32_t>> out(B);
  for (int64_t b = 0; b < B; ++b) {
    double best = kNone;
    for (const Hypothesis& h : finished[b]) {
      const int64_t len = static_cast<int64_t>(h.tokens.size());  // <eos> included when it ended there
      const double s = h.score / length_penalty(o, len);
      if (s > best) {
        best = s;
        out[b] = h.tokens;
      }
    }
    if (!out[b].empty() && out[b].back() == o.eos) out[b].pop_back();
  }
  return out;
}

}  // namespace tfm
