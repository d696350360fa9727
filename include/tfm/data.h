// Text to tokens, the train/validation split and seeded random batches.
//
// The char tokenizer works on Unicode code points of a UTF-8 file; its vocabulary is the sorted set
// of distinct code points (= torch_lm.py's sorted(set(text))). The byte tokenizer uses the 256 byte
// values. Split (shared/ARCHITECTURE.md): the first floor(N * (1 - val_fraction)) tokens train.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/bpe.h"
#include "tfm/random.h"

namespace tfm {

// Decodes UTF-8 strictly (no overlongs, surrogates or values above U+10FFFF); on invalid input throws
// IoError "SOURCE: invalid UTF-8 at byte offset N (...)".
std::vector<uint32_t> decode_utf8(const std::string& bytes, const std::string& source);
// Appends the UTF-8 encoding of one code point.
void append_utf8(std::string& out, uint32_t code_point);

class Tokenizer {
 public:
  enum class Kind { Char, Byte, Bpe };
  Tokenizer() = default;
  Tokenizer(Kind kind, std::vector<uint32_t> symbols);  // symbols sorted ascending, distinct
  // The char vocabulary of a text (its sorted distinct code points), or the 256-byte vocabulary.
  static Tokenizer from_text(Kind kind, const std::string& text, const std::string& source);
  static Kind parse_kind(const std::string& name);  // "char" | "byte" | "bpe"
  // A byte-level BPE tokenizer (bpe.h): ids are its tokens, symbols() is empty.
  explicit Tokenizer(BpeTokenizer bpe);
  // The BPE tokenizer file of data.tokenizer_path; IoError "data.tokenizer_path: ..." when unusable.
  static Tokenizer load_bpe(const std::string& path);
  // {"kind": "char"|"byte", "symbols": [...]} or {"kind": "bpe", "merges": [[l, r], ...]} (checkpoints,
  // export metadata); from_json throws IoError/json exceptions on a malformed object.
  nlohmann::json to_json() const;
  static Tokenizer from_json(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  std::string kind_name() const { return kind_ == Kind::Char ? "char" : kind_ == Kind::Byte ? "byte" : "bpe"; }
  int64_t size() const { return bpe_ ? bpe_->vocab_size() : static_cast<int64_t>(symbols_.size()); }
  const std::vector<uint32_t>& symbols() const { return symbols_; }

  // Throws IoError naming `source` and the offset of a symbol outside the vocabulary.
  std::vector<int32_t> encode(const std::string& text, const std::string& source) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(int32_t id) const;

 private:
  Kind kind_ = Kind::Char;
  std::vector<uint32_t> symbols_;
  std::shared_ptr<const BpeTokenizer> bpe_;  // Kind::Bpe only
};

struct Dataset {
  Tokenizer tokenizer;
  std::vector<int32_t> train, val;
  std::string path;
};

// Reads `path` and splits it. Throws IoError (missing, empty, invalid UTF-8) or ConfigError when a
// split is too short for one sequence of `seq_len` (it needs seq_len + 2 tokens).
Dataset load_dataset(const std::string& path, const std::string& tokenizer, double val_fraction,
                     int64_t seq_len);
// The same file encoded with an existing vocabulary (evaluating a trained run).
Dataset load_dataset(const std::string& path, const Tokenizer& tokenizer, double val_fraction,
                     int64_t seq_len);

// B random windows of T+1 tokens: offsets uniform in [0, n - T - 1) as torch.randint(n - T - 1).
// Its state is one Rng, saved in checkpoints, so a resumed run draws the same batches.
class BatchSampler {
 public:
  explicit BatchSampler(uint64_t seed) : rng_(seed) {}
  // x, y: (B, T) row-major; y is x shifted by one token.
  void sample(const std::vector<int32_t>& tokens, int64_t B, int64_t T, std::vector<int32_t>& x,
              std::vector<int32_t>& y);
  Rng& rng() { return rng_; }

 private:
  Rng rng_;
};

}  // namespace tfm
