// BLEU on already-tokenized text: seq2seq's evaluation figure and tfm translate's scores against references.
//
// corpus_bleu is sacreBLEU's corpus BLEU with tokenize='none' (one reference per sentence): the
// clipped n-gram matches and the n-gram counts of n = 1..max_n are summed over the corpus, p_n =
// matches_n / total_n, BLEU = BP * exp(mean_n log p_n) with BP = exp(1 - r / c) when c < r (c =
// hypothesis tokens, r = reference tokens, summed), else 1. No smoothing: 0 when any p_n is 0.
// Scores are on sacreBLEU's 0-100 scale; precisions too.
//
// d2l_bleu is the textbook's per-sentence BLEU (d2l, "Encoder-Decoder Seq2Seq"): exp(min(0, 1 -
// len_label / len_pred)) * prod_{n=1..k} p_n^(1/2^n), on a 0-1 scale.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm {

using Tokens = std::vector<std::string>;

struct BleuScore {
  double score = 0;                      // 0-100
  std::vector<double> precisions;        // p_n * 100, n = 1..max_n
  std::vector<int64_t> matches, totals;  // clipped matches and hypothesis n-grams per n
  double bp = 0;                         // brevity penalty
  int64_t sys_len = 0, ref_len = 0;
};

// hypotheses[i] is scored against references[i]; Error when the sizes differ.
BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses, const std::vector<Tokens>& references,
                      int max_n = 4);
// Several references per sentence (references[i] = those of hypothesis i, at least one), as sacreBLEU:
// an n-gram's matches are clipped to its largest count in any reference, and the reference length
// is the one closest to the hypothesis's (the shorter on a tie).
BleuScore corpus_bleu(const std::vector<Tokens>& hypotheses,
                      const std::vector<std::vector<Tokens>>& references, int max_n = 4);
// BLEU from summed statistics (sacreBLEU's compute_bleu without smoothing): matches and totals per n.
BleuScore bleu_from_counts(const std::vector<int64_t>& matches, const std::vector<int64_t>& totals,
                           int64_t sys_len, int64_t ref_len);
// The same on whitespace-separated strings (sacreBLEU's tokenize='none').
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      int max_n = 4);
// One sentence as a corpus of one (for display).
BleuScore sentence_bleu(const Tokens& hypothesis, const Tokens& reference, int max_n = 4);
// d2l's bleu(pred_seq, label_seq, k): n runs over 1..min(k, len_pred) as in its loop; 0 for an empty
// prediction (where d2l would divide by zero).
double d2l_bleu(const Tokens& prediction, const Tokens& label, int k);
// Splits on runs of whitespace.
Tokens split_whitespace(const std::string& text);

}  // namespace tfm
