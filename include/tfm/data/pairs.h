// Sentence pairs for sequence-to-sequence training (docs/seq2seq.md): loading a tab-separated file of
// `source<TAB>target[<TAB>ignored...]` lines, the seeded train/validation split, separate source and
// target tokenizers with the seq2seq specials, padded batches and a seeded pair sampler.
// Legend: B pairs in a batch, S source length, T target length (both in tokens, after padding).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/data/dataset.h"
#include "tfm/engine/random.h"

namespace tfm {

// The specials every seq2seq tokenizer carries, with these ids: {"<pad>", "<bos>", "<eos>", "<unk>"}.
constexpr int32_t kPadId = 0, kBosId = 1, kEosId = 2, kUnkId = 3;
std::vector<std::string> seq2seq_specials();

struct SentencePair {
  std::string source, target;     // the raw text (BLEU references, showing examples)
  std::vector<int32_t> src, tgt;  // token ids, truncated, without <bos>/<eos>
  int64_t line = 0;               // 1-based line in the file
};

struct PairOptions {
  std::string source_tokenizer = "word";  // "char" | "byte" | "word" | "bpe"
  std::string target_tokenizer = "word";
  std::string source_tokenizer_path;  // the BPE file(s) when source_tokenizer = "bpe" or "gpt2"
  std::string target_tokenizer_path;
  int64_t min_freq = 1;        // word tokenizers: keep words seen at least this often in train (d2l: 2)
  int64_t max_pairs = 0;       // read only the first N lines (0 = all)
  double val_fraction = 0.1;   // share of the shuffled pairs that validate (see load_pairs)
  uint64_t seed = 1337;        // of the shuffle
  int64_t max_source_len = 0;  // truncate src to this many tokens, before <eos> (0 = no limit)
  int64_t max_target_len = 0;  // truncate tgt to this many tokens, before <eos> (0 = no limit)
};

struct PairDataset {
  Tokenizer source_tokenizer, target_tokenizer;  // both with seq2seq_specials()
  std::vector<SentencePair> train, val;
  std::string path;
};

// Reads `path` (UTF-8; blank lines are skipped), keeps the first max_pairs lines, shuffles the pairs
// with Fisher-Yates over Rng(seed) (i from n-1 down to 1, j = below(i + 1)), and puts the last
// n_val = floor(n * val_fraction) pairs (at least 1 when val_fraction > 0) in val. The tokenizers
// are built from the training pairs only (char: their code points; word: words seen >= min_freq
// times; byte: 256; bpe: read from the *_tokenizer_path file), each with seq2seq_specials(), so a
// validation symbol outside the vocabulary becomes <unk>. Throws IoError "PATH:LINE: ..." for a line
// without a tab, an empty side or invalid UTF-8, IoError "PATH: ..." for a missing or empty file, and
// ConfigError for bad options (an empty training split included).
PairDataset load_pairs(const std::string& path, const PairOptions& options);
// The same with existing tokenizers (evaluating a trained run); options' tokenizer fields are ignored.
PairDataset load_pairs(const std::string& path, const PairOptions& options, const Tokenizer& source,
                       const Tokenizer& target);

// Indices of `pairs` grouped by identical source text, groups in order of first appearance (Tatoeba
// has several translations of one sentence: translate each source once and score it against all of
// its targets with multi-reference corpus_bleu).
std::vector<std::vector<int64_t>> group_by_source(const std::vector<SentencePair>& pairs);

// A padded batch. src ends each sentence with <eos> (as d2l), tgt_in = <bos> y, tgt_out = y <eos>;
// <pad> (0) elsewhere.
struct PairBatch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> src;          // (B, S): x <eos> <pad>...
  std::vector<int64_t> src_lengths;  // (B): real source tokens, <eos> included
  std::vector<int32_t> tgt_in;       // (B, T): <bos> y <pad>...
  std::vector<int32_t> tgt_out;      // (B, T): y <eos> <pad>...  (loss targets, ignore_index = kPadId)
  int64_t real_source_tokens = 0;    // sum of src_lengths
  int64_t real_target_tokens = 0;    // non-pad entries of tgt_out
};
// S = the longest source + 1, T = the longest target + 1 among pairs[indices].
PairBatch make_pair_batch(const std::vector<SentencePair>& pairs, const std::vector<int64_t>& indices);

// B pair indices drawn uniformly with replacement; its state is one Rng (saved in checkpoints).
class PairSampler {
 public:
  explicit PairSampler(uint64_t seed) : rng_(seed) {}
  std::vector<int64_t> sample(int64_t n_pairs, int64_t B);
  Rng& rng() { return rng_; }

 private:
  Rng rng_;
};

}  // namespace tfm
