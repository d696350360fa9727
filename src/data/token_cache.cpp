// The token cache (token_cache.h): streaming tokenization into a checked file, and its mapping.
#include "tfm/data/token_cache.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>

#include "tfm/data/corpus.h"
#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {

// ---- TokenSpan ----

class TokenMapping {
 public:
  TokenMapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~TokenMapping() { ::munmap(base_, bytes_); }
  TokenMapping(const TokenMapping&) = delete;
  TokenMapping& operator=(const TokenMapping&) = delete;
  const void* base() const { return base_; }
  void note(int64_t bytes) const {
    // What one read may map, counted until the next drop: the page cache holds a file in folios of up
    // to 2 MiB and a fault maps the whole folio (measured: ~200 KiB per window of 64 ids).
    constexpr int64_t kAround = int64_t{2} << 20, kDropEvery = int64_t{16} << 20;
    if (mapped_.fetch_add(std::max(bytes, kAround)) + std::max(bytes, kAround) < kDropEvery) return;
    mapped_.store(0);
    ::madvise(base_, bytes_, MADV_DONTNEED);  // a file's clean pages: the next read maps them again
  }

 private:
  void* base_;
  size_t bytes_;
  mutable std::atomic<int64_t> mapped_{0};
};

void note_read(const TokenMapping& mapping, int64_t bytes) {
  mapping.note(bytes);
}

TokenSpan::TokenSpan(const void* data, int width, int64_t count, std::shared_ptr<const void> owner,
                     const TokenMapping* mapping)
    : data_(data), width_(width), size_(count), owner_(std::move(owner)), mapping_(mapping) {
  TFM_CHECK(width == 2 || width == 4, "TokenSpan", "expected 2- or 4-byte ids, got ", width);
}

TokenSpan TokenSpan::of(std::vector<int32_t> ids) {
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  return TokenSpan(owned->data(), 4, static_cast<int64_t>(owned->size()), owned);
}

void TokenSpan::read(int64_t begin, int64_t n, int32_t* out) const {
  TFM_CHECK(begin >= 0 && n >= 0 && begin + n <= size_, "TokenSpan::read", "ids [", begin, ", ", begin + n,
            ") of ", size_);
  if (width_ == 4) {
    std::memcpy(out, static_cast<const int32_t*>(data_) + begin, static_cast<size_t>(n) * 4);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(data_) + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
  if (mapping_) note_read(*mapping_, n * width_);
}

TokenSpan TokenSpan::slice(int64_t begin, int64_t end) const {
  TFM_CHECK(begin >= 0 && begin <= end && end <= size_, "TokenSpan::slice", "[", begin, ", ", end, ") of ",
            size_);
  TokenSpan s = *this;
  s.data_ = static_cast<const char*>(data_) + begin * width_;
  s.size_ = end - begin;
  return s;
}

std::vector<int32_t> TokenSpan::to_vector() const {
  std::vector<int32_t> v(static_cast<size_t>(size_));
  read(0, size_, v.data());
  return v;
}

// ---- hashing ----

namespace {

// The cache format, decided here once: its version (the magic's last character) and the hash of
// every checksum in the file. Another hash, layout or reading of the text is another version (1 hashed
// with XXH64; 2 held one source file and no document ends; 3 kept a text file's byte order mark and
// CRs of CRLF; 4 read a file named in other than lower case, X.JSONL, as text), and a cache of any
// version but this one is rebuilt, never read.
struct CacheFormat {
  char version;
  XXH64_hash_t (*hash)(const void* data, size_t size);
};
constexpr CacheFormat kCacheFormat{'5', XXH3_64bits};

}  // namespace

uint64_t hash64(const void* data, size_t size) {
  return kCacheFormat.hash(data, size);
}

uint64_t hash_fold(uint64_t acc, uint64_t block_hash) {
  const uint64_t two[2] = {acc, block_hash};
  return hash64(two, sizeof two);
}

namespace {

using Clock = std::chrono::steady_clock;

// Files and folders that this user or root own; anything else another user could have planted.
bool trusted_owner(uid_t uid) {
  return uid == ::geteuid() || uid == 0;
}

int cores(int threads) {
  return threads > 0 ? threads : std::min(omp_get_max_threads(), 64);
}

// Runs f(0) .. f(n - 1) on up to `threads` OpenMP threads; the exception of the lowest index that
// threw is rethrown (the first error in file order, as a sequential pass would report). Each index
// writes only its own results, so they are the same whatever the number of threads.
template <class F>
void parallel_for(int n, int threads, F&& f) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for num_threads(std::max(1, std::min(threads, n))) schedule(static, 1)
  for (int i = 0; i < n; ++i) {
    try {
      f(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The block-folded hash of bytes [offset, offset + length) of an open file, blocks hashed in parallel
// through pread (the bytes are not mapped, so checking a cache adds nothing to the resident set).
uint64_t hash_file_range(int fd, uint64_t offset, uint64_t length, int threads, const std::string& what) {
  const uint64_t blocks = (length + kHashBlockBytes - 1) / kHashBlockBytes;
  std::vector<uint64_t> hashes(blocks);
  const int T = static_cast<int>(
      std::min<uint64_t>(static_cast<uint64_t>(cores(threads)), std::max<uint64_t>(blocks, 1)));
  parallel_for(T, T, [&](int t) {
    // A block's bytes, no more than the file holds; not zeroed (pread fills what is hashed): a small
    // file's check does not touch 4 MiB of fresh pages.
    const std::unique_ptr<char[]> buf(
        new char[static_cast<size_t>(std::min<uint64_t>(kHashBlockBytes, length))]);
    for (uint64_t b = static_cast<uint64_t>(t); b < blocks; b += static_cast<uint64_t>(T)) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kHashBlockBytes, length - b * kHashBlockBytes));
      if (read_at(fd, buf.get(), n, offset + b * kHashBlockBytes, what) != n)
        throw IoError(what + ": the file ended early");
      hashes[b] = hash64(buf.get(), n);
    }
  });
  uint64_t acc = kHashFoldStart;
  for (uint64_t h : hashes) acc = hash_fold(acc, h);
  return acc;
}

// A cut for the char tokenizer: just after an ASCII byte, where the decoder of the whole text either
// ends a character or has already failed (on that byte, in the piece too), so the pieces decode to
// the whole's characters and even an invalid file's error is the same. A text with no ASCII byte in
// the last 64 KiB is cut at a character boundary.
size_t char_cut(std::string_view t, size_t at) {
  const size_t top = std::min(at, t.size());
  for (size_t p = top; p > 0 && top - p < (size_t{1} << 16); --p)
    if (static_cast<unsigned char>(t[p - 1]) < 0x80) return p;
  return utf8_boundary_before(t, at);
}

// Where a text may be cut so that the pieces encode to the whole text's ids (Tokenizer::encode_piece):
// the last such position at or before `at`, 0 when none.
size_t cut_before(const Tokenizer& tok, std::string_view t, size_t at) {
  switch (tok.kind()) {
    case Tokenizer::Kind::Byte:
      return std::min(at, t.size());
    case Tokenizer::Kind::Char:
      return char_cut(t, at);
    case Tokenizer::Kind::Bpe:
      return pretokenize_cut(t, at);
    case Tokenizer::Kind::Gpt2:
      return gpt2_pretokenize_cut(t, at);
    case Tokenizer::Kind::Word:
      for (size_t p = std::min(at, t.size()); p > 0; --p)
        if (t[p - 1] == ' ' || t[p - 1] == '\n') return p;  // d2l's splitting restarts after a space
      return 0;
  }
  return 0;
}

}  // namespace

namespace {

// Encodes every document of `reader` as tokenizer.encode() of its whole text would, in a streaming
// pass over blocks of it (cut where the pieces encode to the whole's ids, the pieces encoded in
// parallel), handing the ids to `sink` in order; `separator` (>= 0) goes between two documents, and
// *ends (when given) gets the token count after each document. `stop`, when set, ends it between
// blocks (Interrupted).
void encode_documents(CorpusReader& reader, const Tokenizer& tok, int32_t separator,
                      const std::function<void(const int32_t*, size_t)>& sink, std::vector<uint64_t>* ends,
                      int threads, size_t block_bytes, const std::atomic<bool>* stop = nullptr) {
  const int T = cores(threads);
  // Pieces below this are not worth a thread (tests with small blocks still cut them).
  const size_t kMinPiece = block_bytes == 0 ? size_t{1} << 20 : std::max<size_t>(block_bytes / 8, 16);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(T));
  std::vector<BpeChunkCache> chunk_caches(static_cast<size_t>(T));  // piece k's, kept across blocks
  uint64_t count = 0;
  while (reader.next_document()) {
    if (separator >= 0 && reader.documents() > 1) {
      sink(&separator, 1);
      ++count;
    }
    const std::string source = reader.document_name();
    std::string buf;
    uint64_t base = 0;   // offset of buf[0] in the document
    uint64_t chars = 0;  // characters before buf[0]
    for (;;) {
      if (stop && stop->load()) throw Interrupted("stop requested");
      const bool more = reader.read(buf);
      if (buf.empty()) {
        if (more) continue;
        break;
      }
      // All of it at the end; else up to the last safe cut, the rest waits for the next block (a
      // block without one grows: only a text without newlines or punctuation does that for BPE).
      const size_t end = more ? cut_before(tok, buf, buf.size() - 1) : buf.size();
      if (end == 0) continue;
      const std::string_view ready(buf.data(), end);
      std::vector<size_t> cuts = {0};
      const int pieces =
          static_cast<int>(std::min<size_t>(static_cast<size_t>(T), std::max<size_t>(1, end / kMinPiece)));
      for (int k = 1; k < pieces; ++k) {
        const size_t c = cut_before(tok, ready, end * static_cast<size_t>(k) / static_cast<size_t>(pieces));
        if (c > cuts.back() && c < end) cuts.push_back(c);
      }
      cuts.push_back(end);
      const int n = static_cast<int>(cuts.size()) - 1;
      std::vector<uint64_t> char_at(static_cast<size_t>(n), chars);
      if (tok.kind() == Tokenizer::Kind::Char)
        for (int k = 1; k < n; ++k)
          char_at[k] = char_at[k - 1] + count_utf8_chars(ready.substr(cuts[k - 1], cuts[k] - cuts[k - 1]));
      parallel_for(n, T, [&](int k) {
        out[k].clear();
        tok.encode_piece(ready.substr(cuts[k], cuts[k + 1] - cuts[k]), source, base + cuts[k], char_at[k],
                         out[k], &chunk_caches[k]);
      });
      if (stop && stop->load()) throw Interrupted("stop requested");  // the last block's too
      for (int k = 0; k < n; ++k) {
        sink(out[k].data(), out[k].size());
        count += out[k].size();
        if (tok.kind() == Tokenizer::Kind::Char) chars += out[k].size();
      }
      buf.erase(0, end);
      base += end;
      if (!more) break;
    }
    if (ends) ends->push_back(count);
  }
}

// The sorted distinct code points of every document (Tokenizer::from_text's vocabulary of their
// concatenation), checking the UTF-8 on the way. `stop` as encode_documents's.
Tokenizer char_vocabulary(CorpusReader& reader, const std::atomic<bool>* stop = nullptr) {
  std::vector<uint8_t> seen(0x110000, 0);
  std::vector<uint32_t> cps;
  while (reader.next_document()) {
    const std::string source = reader.document_name();
    std::string buf;
    uint64_t base = 0;
    for (;;) {
      if (stop && stop->load()) throw Interrupted("stop requested");
      const bool more = reader.read(buf);
      if (buf.empty()) {
        if (more) continue;
        break;
      }
      const size_t end = more ? char_cut(buf, buf.size() - 1) : buf.size();
      const auto* p = reinterpret_cast<const unsigned char*>(buf.data());
      for (size_t i = 0; i < end;) {
        if (p[i] < 0x80) {  // ASCII, the common case, without a decode
          seen[p[i++]] = 1;
          continue;
        }
        // A non-ASCII run with the ASCII byte after it (Tokenizer::encode_piece says why).
        size_t j = i;
        while (j < end && p[j] >= 0x80) ++j;
        const size_t stop = j < end ? j + 1 : end;
        cps.clear();
        decode_utf8(std::string_view(buf.data() + i, stop - i), source, base + i, cps);
        for (uint32_t cp : cps) seen[cp] = 1;
        i = stop;
      }
      buf.erase(0, end);
      base += end;
      if (!more) break;
    }
  }
  std::vector<uint32_t> symbols;
  for (uint32_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) symbols.push_back(cp);
  return Tokenizer(Tokenizer::Kind::Char, std::move(symbols));
}

// One file read as text (encode_file, char_vocabulary_of_file: the single-file forms).
std::vector<CorpusFile> one_text_file(const std::string& source) {
  file_size(source);  // missing, or not a regular file: named as such
  return {CorpusFile{source, 0, 0}};
}

}  // namespace

uint64_t encode_file(const std::string& source, const Tokenizer& tok,
                     const std::function<void(const int32_t*, size_t)>& sink, int threads,
                     size_t block_bytes) {
  CorpusOptions o;
  o.block_bytes = block_bytes;
  CorpusReader reader(one_text_file(source), o);
  encode_documents(reader, tok, -1, sink, nullptr, threads, block_bytes);
  return reader.file_hashes().empty() ? kHashFoldStart : reader.file_hashes()[0];
}

Tokenizer char_vocabulary_of_file(const std::string& source, uint64_t* hash, size_t block_bytes) {
  CorpusOptions o;
  o.block_bytes = block_bytes;
  CorpusReader reader(one_text_file(source), o);
  Tokenizer t = char_vocabulary(reader);
  if (hash) *hash = reader.file_hashes().empty() ? kHashFoldStart : reader.file_hashes()[0];
  return t;
}

// ---- the cache file ----

namespace {

constexpr char kCacheMagic[8] = {'T', 'F', 'M', 'T', 'O', 'K', 'S', kCacheFormat.version};
constexpr size_t kCacheMagicNameBytes = 7;  // "TFMTOKS", then the version
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kMaxMetaBytes = uint64_t{64} << 20;  // a BPE vocabulary of 1M merges is ~20 MB of JSON

struct CacheHeader {
  char magic[8];
  uint32_t width;
  uint32_t vocab_from_source;
  uint64_t count;
  uint64_t tokens_offset;
  uint64_t meta_bytes;
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint64_t source_hash;
  uint64_t tokenizer_hash;
  uint64_t tokens_hash;
  uint64_t documents;
  uint64_t header_hash;
};
static_assert(sizeof(CacheHeader) == 96, "the cache header is 96 bytes");
constexpr size_t kHashedHeaderBytes = offsetof(CacheHeader, header_hash);

uint64_t header_hash(const CacheHeader& h, const std::string& meta) {
  return hash_fold(hash64(&h, kHashedHeaderBytes), hash64(meta.data(), meta.size()));
}

uint64_t fingerprint(const Tokenizer& tok) {
  const std::string j = tok.to_json().dump();
  return hash64(j.data(), j.size());
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The ids' region is followed, from an 8-byte boundary, by the document ends (u64 each).
uint64_t ends_offset(const CacheHeader& h) {
  return (h.tokens_offset + h.count * h.width + 7) / 8 * 8;
}

std::string absolute_path(const std::string& p) {
  return std::filesystem::absolute(p.empty() ? "." : p).lexically_normal().string();
}

// A cache file's identity when its tokens were last hashed in full, kept in CACHE.checked: while the
// file's inode, size, mtime and ctime are unchanged, nothing has written to it since, and a start
// skips hashing its ids again (a 1 GB corpus's 2 GB of ids would cost a second per start). Any write,
// truncation or copy changes the ctime (which no one can set back), and then the ids are hashed again.
struct CheckStamp {
  uint64_t dev, ino, size;
  int64_t mtime_ns, ctime_ns;
  uint64_t header_hash, tokens_hash;
  uint64_t hash;  // of the fields above
};

CheckStamp stamp_of(const struct stat& st, const CacheHeader& h) {
  CheckStamp s{};
  s.dev = static_cast<uint64_t>(st.st_dev), s.ino = static_cast<uint64_t>(st.st_ino);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  s.header_hash = h.header_hash, s.tokens_hash = h.tokens_hash;
  s.hash = hash64(&s, offsetof(CheckStamp, hash));
  return s;
}

bool stamp_matches(const std::string& path, const CheckStamp& now) {
  FileDescriptor fd;
  try {
    fd = open_regular_file(path);
  } catch (const IoError&) {
    return false;  // missing, or not a file tfm wrote: the ids are hashed
  }
  struct stat st;
  CheckStamp saved;
  return ::fstat(fd.get(), &st) == 0 && trusted_owner(st.st_uid) &&
         read_at(fd.get(), &saved, sizeof saved, 0, path) == sizeof saved &&
         std::memcmp(&saved, &now, sizeof saved) == 0;
}

// What the caller asked for: a vocabulary derived from the corpus (kind), or a given tokenizer.
struct Request {
  Tokenizer::Kind kind;
  const Tokenizer* given;
  // The given tokenizer is a base vocabulary that gains the end-of-text id when documents are
  // separated (TokenCacheOptions::extend_vocabulary); else it is final and decides the separator.
  bool extend = false;
  std::optional<bool> separator;  // data.document_separator; null: more than one document
};

// A corpus as listed now, with the options that decide its text.
struct Corpus {
  std::string spec;
  std::string home;  // corpus_home(spec): the cache keys files by their path from here
  std::vector<CorpusFile> files;
  CorpusOptions options;
  // A file's key in the cache's list: its path from the corpus's home, so that the corpus moved or
  // copied together with its default cache (.tfm-cache in that home) keeps it.
  std::string key(const CorpusFile& f) const {
    return std::filesystem::path(absolute_path(f.path)).lexically_relative(absolute_path(home)).string();
  }
  // A key as a path again, for messages.
  std::string path_of(const std::string& key) const {
    return (std::filesystem::path(home) / key).lexically_normal().string();
  }
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const CorpusFile& f : files) n += f.size;
    return n;
  }
};

const char* bad_record_name(const CorpusOptions& o) {
  return o.skip_bad_records ? "skip" : "error";
}

// Why a cache cannot be used: `stale` (the corpus or tokenizer changed) or corrupt.
struct Rejection {
  std::string why;
  bool corrupt = false;
};

// Why the files of the corpus differ from those a cache was built from, "" when they are the same
// (a file whose time changed but whose bytes did not is the same).
std::string corpus_change(const nlohmann::json& stored, const Corpus& corpus, int threads) {
  std::vector<std::string> then, now;
  for (const auto& f : stored) then.push_back(f.at(0).get<std::string>());
  for (const CorpusFile& f : corpus.files) now.push_back(corpus.key(f));
  if (then != now) {
    std::string added, removed;
    for (const std::string& p : now)
      if (std::find(then.begin(), then.end(), p) == then.end())
        added += (added.empty() ? "" : ", ") + corpus.path_of(p);
    for (const std::string& p : then)
      if (std::find(now.begin(), now.end(), p) == now.end())
        removed += (removed.empty() ? "" : ", ") + corpus.path_of(p);
    std::string why = "the corpus's files changed since it was tokenized (";
    if (!added.empty()) why += "added: " + added + (removed.empty() ? "" : "; ");
    if (!removed.empty()) why += "removed: " + removed;
    if (added.empty() && removed.empty()) why += "the same files in another order";
    return why + ")";
  }
  for (size_t i = 0; i < corpus.files.size(); ++i) {
    const CorpusFile& f = corpus.files[i];
    const auto size = stored[i].at(1).get<uint64_t>();
    if (f.size != size)
      return f.path + " changed since it was tokenized (" + std::to_string(size) + " bytes then, " +
             std::to_string(f.size) + " now)";
    if (f.mtime_ns != stored[i].at(2).get<int64_t>()) {
      const FileDescriptor src = open_regular_file(f.path);
      if (hex(hash_file_range(src.get(), 0, f.size, threads, f.path)) != stored[i].at(3).get<std::string>())
        return f.path + " changed since it was tokenized (its bytes differ)";
    }
  }
  return "";
}

// Opens, checks and maps a cache; nullopt with *rejected set when it is missing (why empty), stale
// or corrupt.
std::optional<TokenCache> try_open(const std::string& cache, const Corpus& corpus, const Request& req,
                                   int threads, Rejection* rejected) {
  const auto reject = [&](std::string why, bool corrupt) {
    *rejected = {std::move(why), corrupt};
    return std::nullopt;
  };
  struct stat st;
  if (::lstat(cache.c_str(), &st) != 0 && errno == ENOENT) return reject("", false);
  FileDescriptor fd;
  try {
    fd = open_regular_file(cache);  // a FIFO or device under the name is refused, not waited on
  } catch (const IoError& e) {
    return reject(e.what(), true);
  }
  if (::fstat(fd.get(), &st) != 0) return reject("cannot open it: " + errno_text(), true);
  // Its ids are trusted once its checksums match, and anyone who can write a file can make those
  // match: only a cache this user (or root) wrote is read.
  if (!trusted_owner(st.st_uid))
    throw IoError(
        detail::concat(cache, ": owned by another user (uid ", st.st_uid,
                       "), who could have planted it; tfm reads only token caches its own user wrote: "
                       "remove it or set data.cache_dir to a directory of your own"));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  CacheHeader h;
  if (file_bytes < sizeof h)
    return reject("truncated: " + std::to_string(file_bytes) + " bytes, shorter than its 96-byte header",
                  true);
  if (read_at(fd.get(), &h, sizeof h, 0, cache) != sizeof h)
    return reject("truncated while reading its header", true);
  if (std::memcmp(h.magic, kCacheMagic, kCacheMagicNameBytes) != 0)
    return reject("not a tfm token cache (bad magic)", true);
  if (h.magic[kCacheMagicNameBytes] != kCacheFormat.version)
    return reject(detail::concat("written in cache format ", std::string(1, h.magic[kCacheMagicNameBytes]),
                                 "; this tfm reads and writes format ", std::string(1, kCacheFormat.version)),
                  false);
  if ((h.width != 2 && h.width != 4) || h.meta_bytes > kMaxMetaBytes ||
      h.tokens_offset != (sizeof h + h.meta_bytes + kAlign - 1) / kAlign * kAlign ||
      h.count > (uint64_t{1} << 60) || h.documents == 0 || h.documents > (uint64_t{1} << 58))
    return reject("its header is corrupt", true);
  if (file_bytes < sizeof h + h.meta_bytes) return reject("truncated inside its header", true);
  std::string meta(static_cast<size_t>(h.meta_bytes), '\0');
  if (read_at(fd.get(), meta.data(), meta.size(), sizeof h, cache) != meta.size())
    return reject("truncated inside its header", true);
  if (header_hash(h, meta) != h.header_hash) return reject("its header fails its checksum (corrupt)", true);
  const uint64_t expected = ends_offset(h) + h.documents * 8;
  if (file_bytes != expected)
    return reject((file_bytes < expected ? "truncated: " : "too long: ") + std::to_string(file_bytes) +
                      " bytes, its header says " + std::to_string(expected) + " (" + std::to_string(h.count) +
                      " tokens, " + std::to_string(h.documents) + " documents)",
                  true);

  Tokenizer stored;
  nlohmann::json files;
  std::string text_field, on_bad_record;
  bool separator = false;
  uint64_t skipped_records = 0, text_bytes = 0;
  try {
    const nlohmann::json j = parse_json_strict(meta.data(), meta.size(), cache);
    stored = Tokenizer::from_json(j.at("tokenizer"));
    files = j.at("files");
    text_field = j.at("text_field").get<std::string>();
    on_bad_record = j.at("on_bad_record").get<std::string>();
    separator = j.at("document_separator").get<bool>();
    skipped_records = std::stoull(j.at("skipped_records").get<std::string>(), nullptr, 16);
    text_bytes = std::stoull(j.at("text_bytes").get<std::string>(), nullptr, 16);
    if (!files.is_array()) throw IoError("files is not a list");
    for (const auto& f : files) {
      f.at(0).get<std::string>(), f.at(1).get<uint64_t>(), f.at(2).get<int64_t>(), f.at(3).get<std::string>();
    }
  } catch (const std::exception& e) {
    return reject(std::string("its header cannot be read: ") + e.what(), true);
  }
  if (fingerprint(stored) != h.tokenizer_hash)
    return reject("its tokenizer fails its checksum (corrupt)", true);

  // The corpus: the same files, each of the same size and time or (touched, copied) the same bytes,
  // read the same way.
  const std::string changed = corpus_change(files, corpus, threads);
  if (!changed.empty()) return reject(changed, false);
  if (has_json_lines(corpus.files)) {
    if (text_field != corpus.options.text_field)
      return reject(
          "data.text_field changed (\"" + text_field + "\" then, \"" + corpus.options.text_field + "\" now)",
          false);
    if (on_bad_record != bad_record_name(corpus.options))
      return reject("data.on_bad_record changed (\"" + on_bad_record + "\" then, \"" +
                        bad_record_name(corpus.options) + "\" now)",
                    false);
  }
  const bool fixed = req.given && !req.extend;
  // Unset, the option means "when there is more than one document", as build() decides it: the corpus
  // is unchanged, so the cache's own count says. A cache built with the separator on for one document
  // must not serve a run that left the option at its default.
  const bool wanted_separator = req.separator ? *req.separator : h.documents > 1;
  if (!fixed && wanted_separator != separator)
    return reject(std::string("data.document_separator changed (") + (separator ? "true" : "false") +
                      " then, " + (wanted_separator ? "true" : "false") +
                      (req.separator ? "" : ", the default") + " now)",
                  false);

  // The tokenizer.
  if (req.given) {
    const uint64_t want = fingerprint(fixed || !separator ? *req.given : req.given->with_end_of_text());
    if (want != h.tokenizer_hash)
      return reject(
          "the tokenizer changed (fingerprint " + hex(want) + ", the cache's " + hex(h.tokenizer_hash) + ")",
          false);
  } else if (stored.kind() != req.kind || h.vocab_from_source != 1) {
    return reject("it holds ids of another vocabulary (a run's), not the corpus's own " +
                      std::string(req.kind == Tokenizer::Kind::Char ? "char" : "byte") + " vocabulary",
                  false);
  }

  // The ids and document ends themselves, unless they were hashed since the file was last written
  // (CheckStamp).
  const CheckStamp stamp = stamp_of(st, h);
  const std::string stamp_path = cache + ".checked";
  if (!stamp_matches(stamp_path, stamp)) {
    if (hash_file_range(fd.get(), h.tokens_offset, file_bytes - h.tokens_offset, threads, cache) !=
        h.tokens_hash)
      return reject("its tokens fail their checksum (corrupt)", true);
    // File times tick coarsely (a few ms): a file written less than a second ago could be written
    // again within the same tick, unseen; it is stamped at a later start.
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    if (now_ns - stamp.ctime_ns > 1000000000) {
      try {
        write_file_atomically(stamp_path, std::string(reinterpret_cast<const char*>(&stamp), sizeof stamp));
      } catch (const IoError&) {
        // A read-only cache directory: the ids are hashed at every start instead.
      }
    }
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) throw IoError(detail::concat(cache, ": cannot map it: ", errno_text()));
  // Windows are read at random offsets: no read-ahead around them.
  ::madvise(base, static_cast<size_t>(file_bytes), MADV_RANDOM);
  const auto mapping = std::make_shared<const TokenMapping>(base, static_cast<size_t>(file_bytes));
  TokenCache c;
  c.tokenizer = stored;
  c.tokens = TokenSpan(static_cast<const char*>(base) + h.tokens_offset, static_cast<int>(h.width),
                       static_cast<int64_t>(h.count), mapping, mapping.get());
  c.document_ends.ends = reinterpret_cast<const uint64_t*>(static_cast<const char*>(base) + ends_offset(h));
  c.document_ends.count = static_cast<int64_t>(h.documents);
  c.document_ends.owner = mapping;
  // The last document ends with the ids (the hash guards the rest; reading every end would bring a
  // corpus of many small documents into memory at every start).
  if (c.document_ends[c.document_ends.count - 1] != c.tokens.size())
    return reject("its document ends are corrupt", true);
  c.document_separator = separator;
  c.path = cache;
  c.source_bytes = corpus.bytes();
  c.skipped_records = static_cast<int64_t>(skipped_records);
  c.text_bytes = text_bytes;
  c.tokens_hash = h.tokens_hash;
  return c;
}

// Whether the corpus holds at least two documents (read only as far as the second).
bool more_than_one_document(const Corpus& corpus) {
  CorpusReader reader(corpus.files, corpus.options);
  return reader.next_document() && reader.next_document();
}

// The error of a corpus that gave no document, read to its end by `reader`: when it skipped records,
// how many and the first one's why (no field "text": data.text_field names another), not data.path.
std::string no_text_message(const Corpus& corpus, const CorpusReader& reader) {
  const std::string skipped = reader.skipped_text();
  return corpus.spec + ": the corpus has no text (" + std::to_string(corpus.files.size()) +
         (corpus.files.size() == 1 ? " file" : " files") + ", no document in " +
         (corpus.files.size() == 1 ? "it" : "any") + (skipped.empty() ? "; data.path)" : "): " + skipped);
}

// Tokenizes the corpus into `cache` (atomically: a complete file or none; a stop request abandons the
// file unnamed, so the cache stays as it was).
void build(const std::string& cache, const Corpus& corpus, const Request& req, int threads,
           size_t block_bytes, const std::function<void(const std::string&)>& log,
           const std::atomic<bool>* stop) {
  CorpusOptions copts = corpus.options;
  copts.block_bytes = block_bytes;
  // The corpus's own vocabulary, also for a given char vocabulary (a run's): when the two are the same,
  // the cache serves both, so a resume or eval that rebuilt it does not make the next new run rebuild
  // it again. The char pass also checks the UTF-8 of the whole corpus before anything is encoded.
  const Tokenizer::Kind kind = req.given ? req.given->kind() : req.kind;
  std::optional<Tokenizer> own;
  std::vector<uint64_t> vocabulary_hashes;
  uint64_t documents_seen = 0;
  if (kind == Tokenizer::Kind::Char) {
    CorpusReader reader(corpus.files, copts);
    own = char_vocabulary(reader, stop);
    documents_seen = reader.documents();
    vocabulary_hashes = reader.file_hashes();
    if (documents_seen == 0) throw IoError(no_text_message(corpus, reader));
  }
  if (kind == Tokenizer::Kind::Byte) own = Tokenizer::from_text(kind, "", corpus.spec);
  const bool fixed = req.given && !req.extend;
  const bool separator = fixed                                  ? req.given->has_end_of_text()
                         : req.separator                        ? *req.separator
                         : own && kind == Tokenizer::Kind::Char ? documents_seen > 1
                                                                : more_than_one_document(corpus);
  const Tokenizer base = req.given ? *req.given : *own;
  const Tokenizer tok = fixed ? base : separator ? base.with_end_of_text() : base;
  if (own && separator) own = own->with_end_of_text();
  const uint32_t width = tok.size() <= 65536 ? 2 : 4;
  // The files' hashes are known once they are read: written as placeholders of the same width first.
  const auto meta_of = [&](const std::vector<uint64_t>& hashes, uint64_t skipped_records,
                           uint64_t text_bytes) {
    nlohmann::json files = nlohmann::json::array();
    for (size_t i = 0; i < corpus.files.size(); ++i) {
      const CorpusFile& f = corpus.files[i];
      files.push_back({corpus.key(f), f.size, f.mtime_ns, hex(i < hashes.size() ? hashes[i] : 0)});
    }
    return nlohmann::json{{"format", "tfm token cache"},
                          {"corpus", corpus.spec},
                          {"files", files},
                          {"text_field", corpus.options.text_field},
                          {"on_bad_record", bad_record_name(corpus.options)},
                          {"skipped_records", hex(skipped_records)},  // fixed width, as the hashes
                          {"text_bytes", hex(text_bytes)},
                          {"document_separator", separator},
                          {"tokenizer", tok.to_json()}}
        .dump();
  };
  std::string meta = meta_of({}, 0, 0);
  CacheHeader h{};
  std::memcpy(h.magic, kCacheMagic, sizeof kCacheMagic);
  h.width = width;
  h.tokenizer_hash = fingerprint(tok);
  h.vocab_from_source = own && fingerprint(*own) == h.tokenizer_hash ? 1 : 0;
  h.meta_bytes = meta.size();
  h.tokens_offset = (sizeof h + meta.size() + kAlign - 1) / kAlign * kAlign;

  AtomicFile file(cache);
  const std::string front(static_cast<size_t>(h.tokens_offset - sizeof h - meta.size()), '\0');
  file.write(&h, sizeof h);  // rewritten once the counts and hashes are known
  file.write(meta.data(), meta.size());
  file.write(front.data(), front.size());
  // Ids narrowed into whole hash blocks (a whole number of ids), each hashed and written when full;
  // then the document ends through the same blocks, so one hash covers both.
  std::vector<unsigned char> block(kHashBlockBytes);
  size_t fill = 0;
  uint64_t tokens_hash = kHashFoldStart, count = 0;
  const auto flush = [&] {
    if (fill == 0) return;
    tokens_hash = hash_fold(tokens_hash, hash64(block.data(), fill));
    file.write(block.data(), fill);
    fill = 0;
  };
  const auto put = [&](const void* data, size_t n,
                       size_t unit) {  // n items of `unit` bytes (a divisor of the block)
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const size_t k = std::min(n, (block.size() - fill) / unit);
      std::memcpy(block.data() + fill, p, k * unit);
      fill += k * unit, p += k * unit, n -= k;
      if (fill == block.size()) flush();
    }
  };
  CorpusReader reader(corpus.files, copts);
  std::vector<uint64_t> ends;
  std::vector<uint16_t> narrow;
  encode_documents(
      reader, tok, separator ? tok.end_of_text_id() : -1,
      [&](const int32_t* ids, size_t n) {
        count += n;
        if (width == 4) return put(ids, n, 4);
        narrow.resize(n);
        for (size_t i = 0; i < n; ++i) narrow[i] = static_cast<uint16_t>(ids[i]);
        put(narrow.data(), n, 2);
      },
      &ends, threads, block_bytes, stop);
  if (ends.empty()) throw IoError(no_text_message(corpus, reader));
  if (reader.skipped() > 0 && log) {
    std::string first;
    for (const std::string& s : reader.first_skipped()) first += "; " + s;
    log("skipped " + std::to_string(reader.skipped()) + " bad record" + (reader.skipped() == 1 ? "" : "s") +
        " (data.on_bad_record = \"skip\"), the first: " + first.substr(2));
  }
  const std::vector<uint64_t>& hashes = reader.file_hashes();
  const std::vector<CorpusFile> after = list_corpus(corpus.spec);
  bool same = after.size() == corpus.files.size() && hashes.size() == corpus.files.size() &&
              (vocabulary_hashes.empty() || vocabulary_hashes == hashes);
  for (size_t i = 0; same && i < after.size(); ++i)
    same = after[i].path == corpus.files[i].path && after[i].size == corpus.files[i].size &&
           after[i].mtime_ns == corpus.files[i].mtime_ns;
  if (!same)
    throw IoError(corpus.spec +
                  ": the corpus changed while it was being tokenized; run again when it is complete");
  const std::string pad(static_cast<size_t>((8 - (count * width) % 8) % 8), '\0');
  put(pad.data(), pad.size(), 1);
  put(ends.data(), ends.size(), 8);
  flush();
  meta = meta_of(hashes, reader.skipped(), reader.text_bytes());
  TFM_CHECK(meta.size() == h.meta_bytes, "token cache", "the header's JSON changed length");
  h.count = count;
  h.documents = ends.size();
  h.source_size = corpus.bytes();
  for (const CorpusFile& f : corpus.files) h.source_mtime_ns = std::max(h.source_mtime_ns, f.mtime_ns);
  h.source_hash = kHashFoldStart;
  for (uint64_t x : hashes) h.source_hash = hash_fold(h.source_hash, x);
  h.tokens_hash = tokens_hash;
  h.header_hash = header_hash(h, meta);
  file.write_at(sizeof h, meta.data(), meta.size());
  file.write_at(0, &h, sizeof h);
  file.commit();
}

// The cache folder: tfm reads ids from it and writes into it, so no other user may control it.
// Refused (not skipped, which would leave a user wondering why every start tokenizes again) when
// another user owns it or may replace what is in it (anyone may write, and no sticky bit).
void check_cache_dir(const std::string& dir) {
  struct stat link, st;
  if (::lstat(dir.c_str(), &link) != 0 || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return;  // missing (made below, ours) or not a directory (creating it says so)
  std::string why;
  if (S_ISLNK(link.st_mode) && !trusted_owner(link.st_uid))
    why = detail::concat("is a symbolic link owned by another user (uid ", link.st_uid, ")");
  else if (!trusted_owner(st.st_uid))
    why = detail::concat("is owned by another user (uid ", st.st_uid, ")");
  else if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    why = "may be written by anyone and has no sticky bit, so anyone may replace a cache in it";
  if (!why.empty())
    throw IoError(dir + ": the token cache folder (data.cache_dir) " + why +
                  "; tfm keeps token caches only where no other user can plant them: set data.cache_dir to a "
                  "directory of your own");
}

TokenCache open_cache(const std::string& spec, const Request& req, const TokenCacheOptions& o) {
  const auto start = Clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  Corpus corpus;
  corpus.spec = spec;
  corpus.home = corpus_home(spec);
  std::vector<std::string> left_out;
  corpus.files = list_corpus(
      spec, &left_out);  // a missing file or an empty match is named as such, not as a cache problem
  corpus.options.text_field = o.text_field;
  corpus.options.skip_bad_records = o.skip_bad_records;
  const std::string dir = o.dir.empty() ? default_cache_dir(spec) : o.dir;
  const std::string cache = token_cache_path(spec, dir, req.given ? req.given->kind() : req.kind, req.given);
  check_cache_dir(dir);
  Rejection rejected;
  if (!o.rebuild) {
    if (auto c = try_open(cache, corpus, req, o.threads, &rejected)) {
      c->seconds = seconds();
      c->left_out = left_out;
      return std::move(*c);
    }
  }
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Not writable by others whatever the umask: check_cache_dir would refuse it.
  if (!ec && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) ec.assign(errno, std::generic_category());
  if (!ec && !std::filesystem::is_directory(dir, ec) && !ec)
    ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw IoError("data.cache_dir: cannot create " + dir + " (" + ec.message() +
                  "); set data.cache_dir to a writable directory");
  check_cache_dir(dir);
  const ExclusiveFileLock lock(cache + ".lock");  // one process builds, the others wait and map it
  // Another process may have built it while this one waited for the lock.
  if (!o.rebuild) {
    if (auto c = try_open(cache, corpus, req, o.threads, &rejected)) {
      c->seconds = seconds();
      c->left_out = left_out;
      return std::move(*c);
    }
  }
  if (o.log) {
    const std::string why =
        o.rebuild ? "rebuilding it as asked"
        : rejected.why.empty()
            ? "first use"
            : rejected.why + (rejected.corrupt ? "; not trusted, rebuilding" : "; rebuilding");
    o.log("tokenizing " + spec + " into " + cache + " (" + why + ")");
  }
  try {
    build(cache, corpus, req, o.threads, o.block_bytes, o.log, o.stop);
  } catch (const Interrupted&) {
    throw Interrupted("data.path " + spec + ": stop requested while tokenizing it into " + cache +
                      "; abandoned, the cache is not written");
  }
  Rejection after;
  auto c = try_open(cache, corpus, req, o.threads, &after);
  if (!c) throw IoError(cache + ": the cache just written cannot be used: " + after.why);
  c->built = true;
  c->seconds = seconds();
  c->left_out = left_out;
  return std::move(*c);
}

}  // namespace

std::string default_cache_dir(const std::string& spec) {
  return (std::filesystem::path(corpus_home(spec)) / ".tfm-cache").string();
}

std::string token_cache_path(const std::string& spec, const std::string& dir, Tokenizer::Kind kind,
                             const Tokenizer* given) {
  std::string name = corpus_name(spec);
  // A cache folder of the user's choosing may hold the caches of many corpora, and two of them may
  // share a name (two train.jsonl): each would rebuild over the other at every start. There the name
  // also says where the corpus is; the default folder is the corpus's own.
  if (absolute_path(dir) != absolute_path(default_cache_dir(spec)))
    name += "-" + hex(hash64(corpus_location(spec).data(), corpus_location(spec).size())).substr(0, 8);
  std::string k = kind == Tokenizer::Kind::Char   ? "char"
                  : kind == Tokenizer::Kind::Byte ? "byte"
                  : kind == Tokenizer::Kind::Bpe  ? "bpe"
                  : kind == Tokenizer::Kind::Gpt2 ? "gpt2"
                                                  : "word";
  if (kind == Tokenizer::Kind::Bpe && given) k += "-" + hex(fingerprint(*given)).substr(0, 12);
  return (std::filesystem::path(dir) / (name + "." + k + ".tokens")).string();
}

TokenCache open_token_cache(const std::string& spec, Tokenizer::Kind kind, const TokenCacheOptions& options) {
  if (kind != Tokenizer::Kind::Char && kind != Tokenizer::Kind::Byte)
    throw ConfigError(
        "data.tokenizer: a vocabulary derived from the data file is char or byte; bpe reads "
        "data.tokenizer_path");
  return open_cache(spec, {kind, nullptr, false, options.document_separator}, options);
}

TokenCache open_token_cache(const std::string& spec, const Tokenizer& tokenizer,
                            const TokenCacheOptions& options) {
  return open_cache(
      spec, {tokenizer.kind(), &tokenizer, options.extend_vocabulary, options.document_separator}, options);
}

}  // namespace tfm
