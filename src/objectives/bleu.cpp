// BLEU: sacreBLEU's corpus BLEU on tokenized text and d2l's per-sentence BLEU (formulas in bleu.h).
#include "tfm/objectives/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "tfm/engine/error.h"

namespace tfm {
namespace {

// Counts of the n-grams of `tokens` (n-gram = its tokens joined by a separator no token contains).
std::map<std::string, int64_t> ngram_counts(const Tokens& tokens, int n) {
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i + static_cast<size_t>(n) <= tokens.size(); ++i) {
    std::string key = tokens[i];
    for (int k = 1; k < n; ++k) key += '\x1f' + tokens[i + k];
    ++counts[key];
  }
  return counts;
}

// Hypothesis n-grams that appear in a reference, each counted at most as often as in the reference
// that holds it most.
int64_t clipped_matches(const Tokens& hypothesis, const std::vector<const Tokens*>& references, int n) {
  std::map<std::string, int64_t> most;
  for (const Tokens* r : references)
    for (const auto& [gram, count] : ngram_counts(*r, n)) most[gram] = std::max(most[gram], count);
  int64_t matches = 0;
  for (const auto& [gram, count] : ngram_counts(hypothesis, n)) {
    const auto it = most.find(gram);
    if (it != most.end()) matches += std::min(count, it->second);
  }
  return matches;
}

}  // namespace

Tokens split_whitespace(const std::string& text) {
  Tokens out;
  std::string word;
  for (char ch : text) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}

BleuScore bleu_from_counts(const std::vector<int64_t>& matches, const std::vector<int64_t>& totals,
                           int64_t sys_len, int64_t ref_len, BleuSmoothing smoothing, bool effective_order) {
  TFM_CHECK(!matches.empty() && matches.size() == totals.size(), "bleu_from_counts",
            "expected matches and totals ", "of the same size >= 1, got ", matches.size(), " and ",
            totals.size());
  const size_t max_n = matches.size();
  BleuScore s;
  s.matches = matches;
  s.totals = totals;
  s.sys_len = sys_len;
  s.ref_len = ref_len;
  s.precisions.assign(max_n, 0.0);
  s.bp = sys_len >= ref_len ? 1.0
         : sys_len > 0      ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(sys_len))
                            : 0.0;
  double log_sum = 0.0;
  bool zero = matches[0] == 0;  // no unigram in common: 0 whatever the smoothing
  double halvings = 1.0;        // exp smoothing: 2^k at the k-th order without a match
  size_t orders = max_n;        // the orders the mean runs over
  for (size_t n = 0; n < max_n; ++n) {
    if (totals[n] == 0 && effective_order) {
      orders = n;
      break;
    }
    if (totals[n] > 0)
      s.precisions[n] = 100.0 * static_cast<double>(matches[n]) / static_cast<double>(totals[n]);
    if (totals[n] == 0 || (matches[n] == 0 && smoothing == BleuSmoothing::None)) {
      zero = true;  // sacreBLEU's log(0) = -1e10: BLEU is 0
    } else if (matches[n] == 0) {
      halvings *= 2.0;
      log_sum -= std::log(halvings * static_cast<double>(totals[n]));
    } else {
      log_sum += std::log(static_cast<double>(matches[n]) / static_cast<double>(totals[n]));
    }
  }
  // sacreBLEU's exp(mean(log(100 p_n))) with the 100 taken out of the log, so that a perfect match is
  // exactly 100 (exp(log(100)) is 100.00000000000004); other scores agree to the last bits.
  s.score = zero || orders == 0 ? 0.0 : 100.0 * s.bp * std::exp(log_sum / static_cast<double>(orders));
  return s;
}

BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses,
                      const std::vector<std::vector<Tokens>>& references, int max_n,
                      BleuSmoothing smoothing) {
  TFM_CHECK(hypotheses.size() == references.size(), "corpus_bleu", hypotheses.size(), " hypotheses but ",
            references.size(), " reference lists");
  TFM_CHECK(max_n >= 1, "corpus_bleu", "max_n must be >= 1, got ", max_n);
  std::vector<int64_t> matches(max_n, 0), totals(max_n, 0);
  int64_t sys_len = 0, ref_len = 0;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    TFM_CHECK(!references[i].empty(), "corpus_bleu", "sentence ", i, " has no reference");
    const int64_t len = static_cast<int64_t>(hypotheses[i].size());
    std::vector<const Tokens*> refs;
    int64_t closest = -1;
    for (const Tokens& r : references[i]) {
      refs.push_back(&r);
      const int64_t rl = static_cast<int64_t>(r.size());
      const int64_t d = std::abs(rl - len), best = std::abs(closest - len);
      if (closest < 0 || d < best || (d == best && rl < closest)) closest = rl;
    }
    sys_len += len;
    ref_len += closest;
    for (int n = 1; n <= max_n; ++n) {
      matches[n - 1] += clipped_matches(hypotheses[i], refs, n);
      totals[n - 1] += std::max<int64_t>(0, len - n + 1);
    }
  }
  return bleu_from_counts(matches, totals, sys_len, ref_len, smoothing);
}

BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses, const std::vector<Tokens>& references, int max_n,
                      BleuSmoothing smoothing) {
  std::vector<std::vector<Tokens>> lists;
  for (const Tokens& r : references) lists.push_back({r});
  return corpus_bleu(hypotheses, lists, max_n, smoothing);
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      int max_n, BleuSmoothing smoothing) {
  std::vector<Tokens> h, r;
  for (const std::string& s : hypotheses) h.push_back(split_whitespace(s));
  for (const std::string& s : references) r.push_back(split_whitespace(s));
  return corpus_bleu(h, r, max_n, smoothing);
}

BleuScore sentence_bleu(const Tokens& hypothesis, const Tokens& reference, int max_n,
                        BleuSmoothing smoothing) {
  const BleuScore s =
      corpus_bleu(std::vector<Tokens>{hypothesis}, std::vector<Tokens>{reference}, max_n, smoothing);
  return bleu_from_counts(s.matches, s.totals, s.sys_len, s.ref_len, smoothing, true);
}

double d2l_bleu(const Tokens& prediction, const Tokens& label, int k) {
  const int64_t len_pred = static_cast<int64_t>(prediction.size()),
                len_label = static_cast<int64_t>(label.size());
  if (len_pred == 0) return 0.0;
  double score =
      std::exp(std::min(0.0, 1.0 - static_cast<double>(len_label) / static_cast<double>(len_pred)));
  for (int n = 1; n <= std::min<int64_t>(k, len_pred); ++n) {
    const double p =
        static_cast<double>(clipped_matches(prediction, {&label}, n)) / static_cast<double>(len_pred - n + 1);
    score *= std::pow(p, std::pow(0.5, n));
  }
  return score;
}

}  // namespace tfm
