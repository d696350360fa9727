// Byte-level BPE tokenizer (the idea of GPT-2): the base vocabulary is the 256 byte values, so
// every byte string – any UTF-8, invalid UTF-8, binary – encodes and decodes back exactly. Merge k
// joins two existing tokens into token 256 + k; decoding concatenates the tokens' bytes.
//
// Text is first split into chunks (pretokenize) and merges never cross a chunk boundary, so a
// token is a piece of a word, a number or a punctuation run, usually with its leading space.
//
// File format (JSON): {"type": "byte_bpe", "version": 1, "vocab_size": 256 + M,
//                      "merges": [[left, right], ...]}   // M pairs, each id < 256 + its index
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tfm {

// Longest chunk, in bytes: longer runs are cut (at a UTF-8 character boundary when there is one)
// so one huge "word" cannot make training or encoding quadratic. No token can be longer.
constexpr size_t kBpeMaxChunkBytes = 256;
// Largest vocabulary accepted by train() and load().
constexpr int kBpeMaxVocab = 1 << 20;

// GPT-2's split on bytes: contractions ('s 't 're 've 'm 'll 'd); an optional space followed by
// a run of letters, of digits, or of other symbols; whitespace runs, whose last space goes with the
// following word. Bytes of multi-byte UTF-8 characters count as letters, except common Unicode
// punctuation and symbols (general punctuation, CJK and fullwidth punctuation, emoji), which
// count as symbols. Concatenating the chunks gives back `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

// The last position p <= at (2 <= p < text.size()) where text may be cut without changing its chunks:
// pretokenize(text[0, p)) followed by pretokenize(text[p, n)) is pretokenize(text), so the two
// pieces encode (in parallel, in a streaming pass) to the whole text's tokens. 0 when there is none.
// Such a p: a newline between two non-whitespace bytes (before it), or an ASCII letter or digit
// followed by an ASCII symbol other than the apostrophe.
size_t pretokenize_cut(std::string_view text, size_t at);

// Chunks already encoded, kept across encode() calls by a streaming encoder (one per thread): a
// corpus repeats its words, so most chunks are looked up rather than merged. Bounded: it starts
// over past kMaxEntries distinct chunks.
class BpeChunkCache {
 public:
  static constexpr size_t kMaxEntries = size_t{1} << 18;
  void clear();
  // Appends the ids of `chunk` to `out` and returns true when it is cached; false otherwise.
  bool append(std::string_view chunk, std::vector<int32_t>& out) const;
  // Remembers the n ids of `chunk` (starting over when full).
  void add(std::string_view chunk, const int32_t* ids, size_t n);

 private:
  std::unordered_map<std::string_view, std::pair<size_t, size_t>>
      index_;                     // chunk -> [begin, begin + n) of ids_
  std::deque<std::string> keys_;  // the chunks' bytes (stable addresses for the views)
  std::vector<int32_t> ids_;
};

class BpeTokenizer {
 public:
  using Merge = std::pair<int32_t, int32_t>;

  BpeTokenizer();  // no merges: the 256 byte tokens only
  explicit BpeTokenizer(std::vector<Merge> merges, const std::string& what = "bpe");

  // Learns merges until the vocabulary has `vocab_size` tokens or no pair of adjacent tokens occurs
  // twice. Each step merges the most frequent pair; ties go to the smaller (left, right) ids, so
  // the result depends on the text alone.
  static BpeTokenizer train(const std::string& text, int vocab_size);

  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out`, looking chunks up in (and adding them to) `cache`.
  void encode(std::string_view text, std::vector<int32_t>& out, BpeChunkCache& cache) const;
  // Error("bpe decode: ...") for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const { return static_cast<int>(vocab_.size()); }
  const std::vector<Merge>& merges() const { return merges_; }
  const std::string& token_bytes(int32_t id) const;
  // The token for humans: printable ASCII and valid UTF-8 as is, \n \t \r \\ escaped, other bytes
  // as \xNN. Spaces stay spaces; quote the result to see them.
  std::string token_str(int32_t id) const;

  std::string to_json() const;
  // Atomic write (AtomicFile: a temporary, then rename).
  void save(const std::string& path) const;
  // Reads and validates a tokenizer file; errors are IoError("<path>: ...").
  static BpeTokenizer load(const std::string& path);
  // The same from bytes in memory (for tests and fuzzers); errors are IoError("<what>: ...").
  static BpeTokenizer parse(const uint8_t* data, size_t size, const std::string& what = "bpe");

 private:
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  std::vector<Merge> merges_;
  std::vector<std::string> vocab_;               // id -> bytes
  std::unordered_map<uint64_t, int32_t> ranks_;  // (left << 32 | right) -> merge index
};

}  // namespace tfm
