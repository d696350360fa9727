// Beam search on its own (models/beam_search.h), driven by a toy next-token model: a table of
// log-probabilities of the next token given the last one, where the greedy choice is not the best
// sequence. (The encoder-decoder's translate() is tested with it in test_encoder_decoder.cpp.)
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "tfm/models/beam_search.h"

using namespace tfm;

namespace {

constexpr int32_t kBos = 0, kEos = 1, kA = 2, kB = 3;

// P(next | last): from <bos> "a" is likelier than "b", but "a" is often followed by more text while
// "b" nearly always ends: greedy takes "a" (0.6 * 0.5 = 0.30 to end), the best sequence is "b"
// (0.4 * 0.9 = 0.36).
std::vector<float> next_given(int32_t last) {
  std::vector<double> p(4, 1e-9);
  if (last == kBos) p[kA] = 0.6, p[kB] = 0.4;
  if (last == kA) p[kEos] = 0.5, p[kA] = 0.25, p[kB] = 0.25;
  if (last == kB) p[kEos] = 0.9, p[kA] = 0.05, p[kB] = 0.05;
  if (last == kEos) p[kEos] = 1.0;
  std::vector<float> logp;
  for (double x : p) logp.push_back(static_cast<float>(std::log(x)));
  return logp;
}

struct Toy {
  std::vector<std::vector<int64_t>> reorders;  // every parents vector the search passed
  NextTokenModel model() {
    NextTokenModel m;
    m.vocab_size = 4;
    m.log_probs = [](int64_t t, const std::vector<std::vector<int32_t>>& prefixes) {
      std::vector<float> out;
      for (const auto& p : prefixes) {
        REQUIRE(static_cast<int64_t>(p.size()) == t + 1);  // <bos> + t generated, every row alike
        const std::vector<float> row = next_given(p.back());
        out.insert(out.end(), row.begin(), row.end());
      }
      return out;
    };
    m.reorder = [this](const std::vector<int64_t>& parents) { reorders.push_back(parents); };
    return m;
  }
};

BeamSearchOptions options_beam_search(int64_t beam) {
  BeamSearchOptions o;
  o.beam = beam, o.max_len = 5, o.bos = kBos, o.eos = kEos;
  return o;
}

}  // namespace

TEST_CASE("beam search: a wider beam finds the better sequence greedy misses", "[beam]") {
  Toy toy;
  CHECK(beam_search(1, toy.model(), options_beam_search(1)) == std::vector<std::vector<int32_t>>{{kA}});
  CHECK(beam_search(1, toy.model(), options_beam_search(2)) == std::vector<std::vector<int32_t>>{{kB}});
  // Sources are independent: three at once give each one's own answer.
  CHECK(beam_search(3, toy.model(), options_beam_search(2)) ==
        std::vector<std::vector<int32_t>>{{kB}, {kB}, {kB}});
  // A hypothesis only ever moves within its source's rows (2 rows per source here).
  for (const auto& parents : toy.reorders)
    for (size_t r = 0; r < parents.size(); ++r) CHECK(parents[r] / 2 == static_cast<int64_t>(r) / 2);
}

// Every sequence the toy model can make in at most max_len tokens (ending at <eos>, or cut at max_len),
// scored as the search scores them; the best.
std::vector<int32_t> exhaustive_best(const BeamSearchOptions& o) {
  std::vector<int32_t> best;
  double best_score = -1e300;
  std::function<void(std::vector<int32_t>&, double)> extend = [&](std::vector<int32_t>& seq, double logp) {
    const std::vector<float> next = next_given(seq.empty() ? kBos : seq.back());
    for (int32_t v = 0; v < 4; ++v) {
      if (v == kBos) continue;
      seq.push_back(v);
      const double s = logp + next[v];
      const bool ends = v == kEos || static_cast<int64_t>(seq.size()) == o.max_len;
      if (ends) {
        const double len = static_cast<double>(seq.size());
        const double penalty = o.alpha == 0.0f                    ? 1.0
                               : o.penalty == LengthPenalty::Gnmt ? std::pow((5.0 + len) / 6.0, o.alpha)
                                                                  : std::pow(len, o.alpha);
        if (s / penalty > best_score) {
          best_score = s / penalty;
          best = seq;
          if (best.back() == kEos) best.pop_back();
        }
      } else {
        extend(seq, s);
      }
      seq.pop_back();
    }
  };
  std::vector<int32_t> seq;
  extend(seq, 0.0);
  return best;
}

TEST_CASE("beam search: a beam that holds every hypothesis finds the exhaustive search's best", "[beam]") {
  Toy toy;
  BeamSearchOptions o = options_beam_search(64);
  for (const float alpha : {0.0f, 0.6f, 3.0f})
    for (const LengthPenalty penalty : {LengthPenalty::Gnmt, LengthPenalty::Power}) {
      o.alpha = alpha, o.penalty = penalty;
      INFO("alpha " << alpha << (penalty == LengthPenalty::Gnmt ? " gnmt" : " power"));
      CHECK(beam_search(1, toy.model(), o)[0] == exhaustive_best(o));
    }
  // The strong power penalty changes the answer: longer sequences win once divided by len^3.
  o.alpha = 3.0f, o.penalty = LengthPenalty::Power;
  CHECK(exhaustive_best(o).size() > 1);
}

TEST_CASE("beam search: max_len ends every hypothesis, bad widths are named", "[beam]") {
  Toy toy;
  BeamSearchOptions o = options_beam_search(1);
  o.max_len = 1;  // out of room after one token: it ends there without <eos>
  CHECK(beam_search(1, toy.model(), o) == std::vector<std::vector<int32_t>>{{kA}});
  CHECK_THROWS_WITH(beam_search(1, toy.model(), options_beam_search(0)),
                    Catch::Contains("beam_search: beam must be >= 1"));
}
