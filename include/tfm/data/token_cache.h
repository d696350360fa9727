// Token streams that are views, and the token cache that backs them (docs/data.md).
//
// A text corpus (corpus.h: a file, a directory, a glob or a list of them; text and JSON Lines, plain,
// .gz or .zst) is tokenized once, in a streaming pass, into a cache file of token ids (uint16 when
// the vocabulary fits, else uint32) beside the data (data.cache_dir); every later start memory-maps
// it. Batches read windows of the mapping directly: no copy of the corpus is made in the process, and
// processes reading the same cache (MPI ranks, runs of a sweep) share its pages.
//
// Cache file (little-endian; the token region 4096-aligned so it maps on a page boundary):
//   offset  0  "TFMTOKS4"             magic and format version (4: every hash is XXH3-64, document ends,
//                                     text read as text: corpus.h)
//           8  u32 width              2 (uint16 ids) or 4 (uint32 ids)
//          12  u32 vocab_from_source  1: a char/byte vocabulary derived from the source itself
//          16  u64 count              tokens in the file
//          24  u64 tokens_offset      where the ids start
//          32  u64 meta_bytes         length of the JSON that starts at offset 96
//          40  u64 source_size        bytes of the corpus's files when it was tokenized
//          48  i64 source_mtime_ns    the latest of their modification times then
//          56  u64 source_hash        the files' hashes (hash64 of their blocks, folded), folded
//          64  u64 tokenizer_hash     hash64 of the tokenizer's JSON (its fingerprint)
//          72  u64 tokens_hash        hash64 of the bytes from tokens_offset to the end (blocks, folded)
//          80  u64 documents          D, the number of documents
//          88  u64 header_hash        hash64 of bytes [0, 88) and the JSON
//          96  JSON {"format": "tfm token cache", "corpus": data.path, "files": [[PATH, size, mtime_ns,
//              hash], ...] (PATH from corpus_home, so a corpus moved with its cache keeps it),
//              "text_field", "on_bad_record", "skipped_records": hex, "text_bytes": hex (of the
//              documents' text as read: decompressed, without separators), "document_separator": bool,
//              "tokenizer": {...}}
//   tokens_offset  count ids of `width` bytes
//   then, from an 8-byte boundary, D u64: the token index where each document ends (exclusive); with
//   the separator, the end-of-text id sits at that index (but after the last); the file ends there.
// Nothing in it is trusted before it is checked: a short file, a bad magic, another format version
// (an older tfm's cache, hashed another way), a header or token hash that does not match, a source or
// tokenizer that changed: each is named in a log line and the cache is rebuilt. The ids' hash is
// checked in full at the first start after the file was written (about a second of hashing per GB of
// ids); CACHE.checked then records the file's inode, size, mtime and ctime, and later starts skip that
// pass while they are unchanged (any write to the file changes its ctime).
// A file whose mtime changed is hashed again and, if its bytes are the same, keeps its cache; an added,
// removed or resized file, or another data.text_field or data.on_bad_record (JSON Lines), rebuilds it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/data/tokenizer.h"

namespace tfm {

// A mapped cache file (token_cache.cpp). Reading a window faults in the pages around it (the kernel
// maps whole page-cache folios, up to 2 MiB, and fault-around beyond), so over a run a mapping's
// resident set would grow towards the whole cache (~100 MB after 40 steps on a 100 MB corpus); every 8
// reads its pages are dropped from this process (MADV_DONTNEED: they stay in the page cache, shared
// with other processes, and a later read costs a minor fault), which keeps a run's resident set within
// ~16 MB of its model whatever the corpus size.
class TokenMapping;
void note_read(const TokenMapping& mapping, int64_t bytes);

// A read-only run of token ids, uint16 or uint32 underneath: a window of a mapped cache, or of a
// vector. Copies are cheap (they share what they view) and safe across threads.
class TokenSpan {
 public:
  TokenSpan() = default;
  // A view of `ids`, which must outlive it (a test's vector, a call's argument).
  TokenSpan(const std::vector<int32_t>& ids)  // NOLINT: implicit, as std::span is
      : data_(ids.data()), width_(4), size_(static_cast<int64_t>(ids.size())) {}
  // `count` ids of `width` bytes (2 or 4) at `data`, which `owner` keeps alive; `mapping`, when
  // given, is the cache mapping they are in (owned by `owner`).
  TokenSpan(const void* data, int width, int64_t count, std::shared_ptr<const void> owner,
            const TokenMapping* mapping = nullptr);
  // A span that owns its ids.
  static TokenSpan of(std::vector<int32_t> ids);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int width() const { return width_; }  // bytes per id
  int32_t operator[](int64_t i) const {
    return width_ == 2 ? static_cast<int32_t>(static_cast<const uint16_t*>(data_)[i])
                       : static_cast<int32_t>(static_cast<const uint32_t*>(data_)[i]);
  }
  // ids [begin, begin + n) into out[0, n), widened to int32.
  void read(int64_t begin, int64_t n, int32_t* out) const;
  // The ids [begin, end) (0 <= begin <= end <= size()), sharing this span's memory.
  TokenSpan slice(int64_t begin, int64_t end) const;
  std::vector<int32_t> to_vector() const;

 private:
  const void* data_ = nullptr;
  int width_ = 4;
  int64_t size_ = 0;
  std::shared_ptr<const void> owner_;
  const TokenMapping* mapping_ = nullptr;
};

// The cache format's 64-bit hash of bytes (XXH3-64, seed 0; token_cache.cpp's kCacheFormat).
uint64_t hash64(const void* data, size_t size);
// The hash of a byte stream cut into kHashBlockBytes blocks: each block hashed on its own, the
// block hashes folded in order. Blocks are independent, so a long stream is hashed in parallel.
constexpr size_t kHashBlockBytes = size_t{4} << 20;
uint64_t hash_fold(uint64_t acc, uint64_t block_hash);
constexpr uint64_t kHashFoldStart = 0x7466'6d2d'6361'6368ull;  // "tfm-cach"

struct TokenCacheOptions {
  // Directory of the cache files; "" = default_cache_dir(source).
  std::string dir;
  // Called with one line for every decision that is not a silent reuse: a cache built, and why
  // (first use, the source or tokenizer changed, a corrupt or truncated file). Null: silent.
  std::function<void(const std::string&)> log;
  // Rebuild even when the cache is valid (tfm data prepare --rebuild).
  bool rebuild = false;
  // Threads that encode in parallel (BPE); 0 = the machine's cores.
  int threads = 0;
  // Bytes of text per streaming step (0 = 4 MiB); tests make it small to cross many block edges.
  size_t block_bytes = 0;
  // How the corpus is read (corpus.h): data.text_field, data.on_bad_record = "skip".
  std::string text_field = "text";
  bool skip_bad_records = false;
  // data.document_separator: the documents joined by the tokenizer's end-of-text id; null: when the
  // corpus has more than one document (resolved from the data).
  std::optional<bool> document_separator;
  // A given tokenizer is a base vocabulary (a BPE file for a new run) that gains the end-of-text id
  // when the documents are separated. Otherwise (false) it is a run's whole vocabulary, a checkpoint's:
  // the documents are separated exactly when it has the id, whatever document_separator says.
  bool extend_vocabulary = false;
  // Set by a stop request (platform::stop_on_signals): tokenizing stops between blocks and throws
  // Interrupted (error.h), the cache left as it was. Null: never stopped.
  const std::atomic<bool>* stop = nullptr;
};

// Where each document's tokens end (exclusive), in order: a view of the mapped cache.
struct DocumentEnds {
  const uint64_t* ends = nullptr;
  int64_t count = 0;
  std::shared_ptr<const void> owner;
  int64_t size() const { return count; }
  int64_t operator[](int64_t i) const { return static_cast<int64_t>(ends[i]); }
};

// A corpus's tokens, mapped from its cache.
struct TokenCache {
  Tokenizer tokenizer;  // the vocabulary of the ids (char from the corpus: its sorted characters)
  TokenSpan tokens;     // every token of the corpus, documents in order
  DocumentEnds document_ends;
  bool document_separator = false;    // the tokenizer's end-of-text id between two documents
  std::string path;                   // the cache file
  bool built = false;                 // tokenized by this call (else an existing cache was mapped)
  double seconds = 0;                 // wall time of this call
  uint64_t source_bytes = 0;          // of the corpus's files on disk
  uint64_t text_bytes = 0;            // of the documents' text as read (decompressed; JSON Lines: the fields)
  int64_t skipped_records = 0;        // JSON Lines records left out (data.on_bad_record "skip")
  uint64_t tokens_hash = 0;           // the ids' and document ends' hash (the header's): what the data is
  std::vector<std::string> left_out;  // what listing the corpus left out, one line each (list_corpus's notes)
};

// `.tfm-cache` in the corpus's home (corpus_home: beside a file, inside a folder): every run, sweep
// point, eval and sample reading it shares one cache, and it goes with the data.
std::string default_cache_dir(const std::string& spec);
// DIR/<corpus_name>.<kind>.tokens: one cache per corpus and tokenizer kind; a BPE vocabulary (`given`,
// from data.tokenizer_path) adds 12 hex digits of its hash, <corpus_name>.bpe-<id>.tokens, so that runs
// with two BPE tokenizers on one corpus keep a cache each instead of rebuilding each other's. In a DIR
// other than default_cache_dir(spec) (data.cache_dir set: shared by corpora), the name gains 8 hex
// digits of the hash of corpus_location(spec), <corpus_name>-<hash>.<kind>.tokens, so two corpora of
// one name (two train.jsonl) never share a file. A char or
// byte vocabulary is the corpus's own (an eval with the run's reuses the run's cache).
std::string token_cache_path(const std::string& spec, const std::string& dir, Tokenizer::Kind kind,
                             const Tokenizer* given = nullptr);

// The tokens of the corpus data.path = `spec` in a char or byte vocabulary derived from the corpus
// itself (char: its sorted distinct code points, exactly Tokenizer::from_text's of the documents'
// text), from the cache when it is valid, else tokenized now and cached. IoError names the file and
// what is wrong (missing, invalid UTF-8, a bad record, no text, an unwritable cache directory).
// Interrupted when options.stop is set while it tokenizes.
TokenCache open_token_cache(const std::string& spec, Tokenizer::Kind kind, const TokenCacheOptions& options);
// The same in a given vocabulary (a checkpoint's, a BPE tokenizer): the ids are tokenizer.encode()'s.
TokenCache open_token_cache(const std::string& spec, const Tokenizer& tokenizer,
                            const TokenCacheOptions& options);

// Encodes `source` as tokenizer.encode(whole file, source) would, in a streaming pass over blocks of
// the file (cut at UTF-8 character boundaries, and for BPE at pretokenization boundaries, encoded in
// parallel), handing the ids to `sink` in order; memory stays bounded by the block size. Returns the
// source's hash (its blocks' hash64, folded by hash_fold). For tests, and the cache.
uint64_t encode_file(const std::string& source, const Tokenizer& tokenizer,
                     const std::function<void(const int32_t* ids, size_t n)>& sink, int threads = 0,
                     size_t block_bytes = 0);
// The char vocabulary of a file (Tokenizer::from_text's) in a streaming pass; *hash gets its hash.
Tokenizer char_vocabulary_of_file(const std::string& source, uint64_t* hash = nullptr,
                                  size_t block_bytes = 0);

}  // namespace tfm
