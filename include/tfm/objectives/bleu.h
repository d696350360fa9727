// BLEU on already-tokenized text: seq2seq's evaluation figure and tfm translate's scores against references.
//
// corpus_bleu is sacreBLEU's corpus BLEU with tokenize='none' (one reference per sentence) and its
// default smoothing: the clipped n-gram matches and the n-gram counts of n = 1..max_n are summed over
// the corpus, p_n = matches_n / total_n, BLEU = BP * exp(mean_n log p_n) with BP = exp(1 - r / c) when
// c < r (c = hypothesis tokens, r = reference tokens, summed), else 1. Smoothing "exp" (Chen and Cherry
// 2014, method 3: NIST's mteval-v13a): the k-th order with no match, counted from the lowest, gets
// p_n = 1 / (2^k total_n) instead of 0, so that a corpus of short sentences with no 4-gram in common
// with its references scores above 0. BLEU is 0 when no unigram matches, or when the hypotheses hold no
// n-gram of some order n <= max_n. BleuSmoothing::None: 0 when any p_n is 0 (sacreBLEU's
// smooth_method='none'). Scores are on sacreBLEU's 0-100 scale; precisions (unsmoothed) too.
//
// d2l_bleu is the textbook's per-sentence BLEU (d2l, "Encoder-Decoder Seq2Seq"): exp(min(0, 1 -
// len_label / len_pred)) * prod_{n=1..k} p_n^(1/2^n), on a 0-1 scale.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm {

using Tokens = std::vector<std::string>;
enum class BleuSmoothing { Exp, None };  // sacreBLEU's smooth_method 'exp' (its default) and 'none'

struct BleuScore {
  double score = 0;                      // 0-100
  std::vector<double> precisions;        // p_n * 100, n = 1..max_n
  std::vector<int64_t> matches, totals;  // clipped matches and hypothesis n-grams per n
  double bp = 0;                         // brevity penalty
  int64_t sys_len = 0, ref_len = 0;
};

// hypotheses[i] is scored against references[i]; Error when the sizes differ.
BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses, const std::vector<Tokens>& references,
                      int max_n = 4, BleuSmoothing smoothing = BleuSmoothing::Exp);
// Several references per sentence (references[i] = those of hypothesis i, at least one), as sacreBLEU:
// an n-gram's matches are clipped to its largest count in any reference, and the reference length
// is the one closest to the hypothesis's (the shorter on a tie).
BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses,
                      const std::vector<std::vector<Tokens>>& references, int max_n = 4,
                      BleuSmoothing smoothing = BleuSmoothing::Exp);
// BLEU from summed statistics (sacreBLEU's compute_bleu): matches and totals per n. effective_order
// (sacreBLEU's, which its sentence_bleu sets): the mean runs over the orders up to the last one the
// hypotheses hold n-grams of, instead of scoring 0 when an order has none (a 3-token sentence has no
// 4-gram).
BleuScore bleu_from_counts(const std::vector<int64_t>& matches, const std::vector<int64_t>& totals,
                           int64_t sys_len, int64_t ref_len, BleuSmoothing smoothing = BleuSmoothing::Exp,
                           bool effective_order = false);
// The same on whitespace-separated strings (sacreBLEU's tokenize='none').
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      int max_n = 4, BleuSmoothing smoothing = BleuSmoothing::Exp);
// sacreBLEU's sentence_bleu: one sentence's statistics, effective_order set (a translation equal to its
// 2-token reference scores 100, not 0).
BleuScore sentence_bleu(const Tokens& hypothesis, const Tokens& reference, int max_n = 4,
                        BleuSmoothing smoothing = BleuSmoothing::Exp);
// d2l's bleu(pred_seq, label_seq, k): n runs over 1..min(k, len_pred) as in its loop; 0 for an empty
// prediction (where d2l would divide by zero).
double d2l_bleu(const Tokens& prediction, const Tokens& label, int k);
// Splits on runs of whitespace.
Tokens split_whitespace(const std::string& text);

}  // namespace tfm
