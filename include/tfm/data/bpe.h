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
#include <functional>
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

// A text given in pieces of any size (a corpus read block by block), handed on to `sink` in pieces that
// end at chunk boundaries (pretokenize_cut), so that each pretokenizes, and encodes, as it does within
// the whole text. It holds `every` bytes before it cuts, and a stretch with no boundary (no newline, no
// letter or digit before a symbol) whole.
class ChunkAlignedPieces {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit ChunkAlignedPieces(Sink sink, size_t every = size_t{1} << 20);
  void add(std::string_view text);
  void finish();                                         // hands on what is held
  size_t held_bytes() const { return pending_.size(); }  // added, not handed on yet

 private:
  Sink sink_;
  size_t every_;
  std::string pending_;  // the bytes after the last cut
  size_t searched_ = 0;  // pending_'s first bytes known to hold no boundary
};

// How often each pretokenized chunk occurs in a text given in pieces cut anywhere: the counts are the
// whole text's, and memory holds the distinct chunks and about a MiB of text, not the text. What
// BpeTokenizer::train learns from.
class BpeChunkCounter {
 public:
  BpeChunkCounter();
  BpeChunkCounter(const BpeChunkCounter&) = delete;  // its pieces_ count into this one
  BpeChunkCounter& operator=(const BpeChunkCounter&) = delete;
  void add(std::string_view piece);  // the text's next bytes
  // Every chunk's count, the text's end counted: the counter is empty afterwards.
  std::unordered_map<std::string, int64_t> finish();
  uint64_t bytes() const { return bytes_; }                   // the bytes added so far
  size_t held_bytes() const { return pieces_.held_bytes(); }  // of them, those not counted yet

 private:
  std::unordered_map<std::string, int64_t> counts_;
  ChunkAlignedPieces pieces_;
  uint64_t bytes_ = 0;
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
  // The same from a text's chunk counts (BpeChunkCounter::finish).
  static BpeTokenizer train(const std::unordered_map<std::string, int64_t>& chunk_counts, int vocab_size);

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
