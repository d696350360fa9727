// A text corpus as token streams: the train/validation split and seeded random windows of it. One
// document: the first floor(N * (1 - val_fraction)) tokens train, as docs/architecture.md says; D >= 2
// documents: whole documents, the first floor(D * (1 - val_fraction)) in corpus order train and the
// rest validate. The streams are views
// of the file's token cache (token_cache.h), mapped, not copied: a corpus costs the process no memory
// beyond the pages its batches touch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/data/token_cache.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/random.h"

namespace tfm {

struct Dataset {
  Tokenizer tokenizer;
  TokenSpan train, val;  // (N_train), (N_val): views of the cache's mapping
  std::string path;
  std::string cache_path;                    // the token cache the spans map
  bool cache_built = false;                  // tokenized by this load (else mapped from an earlier one)
  double load_seconds = 0;                   // the cache's open (or build) time
  uint64_t source_bytes = 0;                 // of the corpus's files on disk
  uint64_t text_bytes = 0;                   // of the documents' text as read (token_cache.h)
  uint64_t tokens_hash = 0;                  // the cache's hash of every id and document end (token_cache.h)
  int64_t documents = 0, val_documents = 0;  // val_documents: 0 with one document (a token split)
  bool document_separator = false;
  // Set when the whole documents put a share of the tokens in validation far from data.val_fraction
  // (under half or over twice it: few or uneven documents); "" otherwise.
  std::string split_warning;
  int64_t skipped_records = 0;  // JSON Lines records left out when the cache was built (on_bad_record "skip")
  std::vector<std::string> left_out;  // files the listing of data.path left out, and why (corpus.h)
  // What a run says at every start about its data: split_warning, the files the listing left out, and
  // the records left out, which the build named on its own start only.
  std::vector<std::string> warnings() const;
};

// Tokens a split needs for one training sequence of `seq_len`: seq_len + 2, since a window of seq_len + 1
// starts at randint(n - seq_len - 1) (BatchSampler), which needs n - seq_len - 1 >= 1.
constexpr int64_t tokens_for_a_sequence(int64_t seq_len) {
  return seq_len + 2;
}

// A split too short for one sequence of train.seq_len: refused (training, evaluating), or kept for the
// caller to count and warn about (tfm data prepare, whose counts are the point, with every tokenizer).
enum class ShortSplit { Refuse, Keep };

// Reads the corpus data.path = `path` (corpus.h) through its token cache and splits it. Throws
// IoError (missing, empty, invalid UTF-8, a bad record, an unwritable cache directory, a split without
// a document or, with ShortSplit::Refuse, too short for one sequence of `seq_len`: it needs seq_len + 2
// tokens).
Dataset load_dataset(const std::string& path, const std::string& tokenizer, double val_fraction,
                     int64_t seq_len, const TokenCacheOptions& cache = {},
                     ShortSplit short_split = ShortSplit::Refuse);
// The same file encoded with an existing vocabulary (evaluating a trained run, a BPE tokenizer).
Dataset load_dataset(const std::string& path, const Tokenizer& tokenizer, double val_fraction,
                     int64_t seq_len, const TokenCacheOptions& cache = {},
                     ShortSplit short_split = ShortSplit::Refuse);

// B random windows of T+1 tokens: offsets uniform in [0, n - T - 1) as torch.randint(n - T - 1).
// Its state is one Rng, saved in checkpoints, so a resumed run draws the same batches.
class BatchSampler {
 public:
  explicit BatchSampler(uint64_t seed) : rng_(seed) {}
  // x, y: (B, T) row-major; y is x shifted by one token. Reads the windows straight from `tokens`.
  void sample(const TokenSpan& tokens, int64_t B, int64_t T, std::vector<int32_t>& x,
              std::vector<int32_t>& y);
  Rng& rng() { return rng_; }

 private:
  Rng rng_;
};

}  // namespace tfm
