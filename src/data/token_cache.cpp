// The token cache (token_cache.h): streaming tokenization into a checked file, and its mapping.
#include "tfm/data/token_cache.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>

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

void note_read(const TokenMapping& mapping, int64_t bytes) { mapping.note(bytes); }

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
  TFM_CHECK(begin >= 0 && begin <= end && end <= size_, "TokenSpan::slice", "[", begin, ", ", end, ") of ", size_);
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
// every checksum in the file. Another hash is another version: version 1 hashed with XXH64, and a
// cache of any version but this one is rebuilt, never read.
struct CacheFormat {
  char version;
  XXH64_hash_t (*hash)(const void* data, size_t size);
};
constexpr CacheFormat kCacheFormat{'2', XXH3_64bits};

}  // namespace

uint64_t hash64(const void* data, size_t size) { return kCacheFormat.hash(data, size); }

uint64_t hash_fold(uint64_t acc, uint64_t block_hash) {
  const uint64_t two[2] = {acc, block_hash};
  return hash64(two, sizeof two);
}

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_str() { return std::strerror(errno); }

// Files and folders that this user or root own; anything else another user could have planted.
bool trusted_owner(uid_t uid) {
  return uid == ::geteuid() || uid == 0;
}

int cores(int threads) { return threads > 0 ? threads : std::min(omp_get_max_threads(), 64); }

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
  const int T = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(cores(threads)), std::max<uint64_t>(blocks, 1)));
  parallel_for(T, T, [&](int t) {
    std::vector<char> buf(kHashBlockBytes);
    for (uint64_t b = static_cast<uint64_t>(t); b < blocks; b += static_cast<uint64_t>(T)) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kHashBlockBytes, length - b * kHashBlockBytes));
      if (read_at(fd, buf.data(), n, offset + b * kHashBlockBytes, what) != n)
        throw IoError(what + ": the file ended early");
      hashes[b] = hash64(buf.data(), n);
    }
  });
  uint64_t acc = kHashFoldStart;
  for (uint64_t h : hashes) acc = hash_fold(acc, h);
  return acc;
}

// A source file read front to back in reads of kReadBytes (whole hash blocks, so its hash is the
// block-folded one), hashed as it goes, and handed out in blocks of at most `block` bytes.
class SourceReader {
 public:
  static constexpr size_t kReadBytes = kHashBlockBytes;
  SourceReader(const std::string& path, size_t block)
      : path_(path), fd_(open_regular_file(path)), block_(block == 0 ? kReadBytes : block) {
    ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  // Appends the next block to buf; false at the end of the file.
  bool append(std::string& buf) {
    if (pos_ == chunk_.size()) refill();
    const size_t n = std::min(block_, chunk_.size() - pos_);
    buf.append(chunk_, pos_, n);
    pos_ += n;
    return n > 0;
  }
  uint64_t hash() const { return hash_; }

 private:
  void refill() {
    chunk_.resize(kReadBytes);
    const size_t n = read_at(fd_.get(), chunk_.data(), kReadBytes, offset_, path_);
    chunk_.resize(n);
    pos_ = 0;
    for (size_t b = 0; b < n; b += kHashBlockBytes)
      hash_ = hash_fold(hash_, hash64(chunk_.data() + b, std::min(kHashBlockBytes, n - b)));
    offset_ += n;
  }

  std::string path_;
  FileDescriptor fd_;
  size_t block_;
  std::string chunk_;  // the last read
  size_t pos_ = 0;     // of chunk_ handed out
  uint64_t offset_ = 0;
  uint64_t hash_ = kHashFoldStart;
};

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
    case Tokenizer::Kind::Byte: return std::min(at, t.size());
    case Tokenizer::Kind::Char: return char_cut(t, at);
    case Tokenizer::Kind::Bpe: return pretokenize_cut(t, at);
    case Tokenizer::Kind::Word:
      for (size_t p = std::min(at, t.size()); p > 0; --p)
        if (t[p - 1] == ' ' || t[p - 1] == '\n') return p;  // d2l's splitting restarts after a space
      return 0;
  }
  return 0;
}

}  // namespace

uint64_t encode_file(const std::string& source, const Tokenizer& tok,
                     const std::function<void(const int32_t*, size_t)>& sink, int threads, size_t block_bytes) {
  SourceReader reader(source, block_bytes);
  const int T = cores(threads);
  // Pieces below this are not worth a thread (tests with small blocks still cut them).
  const size_t kMinPiece = block_bytes == 0 ? size_t{1} << 20 : std::max<size_t>(block_bytes / 8, 16);
  std::string buf;
  uint64_t base = 0;  // file offset of buf[0]
  uint64_t chars = 0; // characters before buf[0]
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(T));
  std::vector<BpeChunkCache> chunk_caches(static_cast<size_t>(T));  // piece k's, kept across blocks
  for (;;) {
    const bool more = reader.append(buf);
    if (buf.empty()) break;
    // All of it at the end; else up to the last safe cut, the rest waits for the next block (a
    // block without one grows: only a text without newlines or punctuation does that for BPE).
    const size_t end = more ? cut_before(tok, buf, buf.size() - 1) : buf.size();
    if (end == 0) continue;
    const std::string_view ready(buf.data(), end);
    std::vector<size_t> cuts = {0};
    const int pieces = static_cast<int>(std::min<size_t>(static_cast<size_t>(T), std::max<size_t>(1, end / kMinPiece)));
    for (int k = 1; k < pieces; ++k) {
      const size_t c = cut_before(tok, ready, end * static_cast<size_t>(k) / static_cast<size_t>(pieces));
      if (c > cuts.back() && c < end) cuts.push_back(c);
    }
    cuts.push_back(end);
    const int n = static_cast<int>(cuts.size()) - 1;
    std::vector<uint64_t> char_at(static_cast<size_t>(n), chars);
    if (tok.kind() == Tokenizer::Kind::Char)
      for (int k = 1; k < n; ++k) char_at[k] = char_at[k - 1] + count_utf8_chars(ready.substr(cuts[k - 1], cuts[k] - cuts[k - 1]));
    parallel_for(n, T, [&](int k) {
      out[k].clear();
      tok.encode_piece(ready.substr(cuts[k], cuts[k + 1] - cuts[k]), source, base + cuts[k], char_at[k], out[k],
                       &chunk_caches[k]);
    });
    for (int k = 0; k < n; ++k) {
      sink(out[k].data(), out[k].size());
      if (tok.kind() == Tokenizer::Kind::Char) chars += out[k].size();
    }
    buf.erase(0, end);
    base += end;
    if (!more) break;
  }
  return reader.hash();
}

Tokenizer char_vocabulary_of_file(const std::string& source, uint64_t* hash, size_t block_bytes) {
  SourceReader reader(source, block_bytes);
  std::vector<uint8_t> seen(0x110000, 0);
  std::string buf;
  std::vector<uint32_t> cps;
  uint64_t base = 0;
  for (;;) {
    const bool more = reader.append(buf);
    if (buf.empty()) break;
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
  if (hash) *hash = reader.hash();
  std::vector<uint32_t> symbols;
  for (uint32_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) symbols.push_back(cp);
  return Tokenizer(Tokenizer::Kind::Char, std::move(symbols));
}

// ---- the cache file ----

namespace {

constexpr char kMagic[8] = {'T', 'F', 'M', 'T', 'O', 'K', 'S', kCacheFormat.version};
constexpr size_t kMagicNameBytes = 7;  // "TFMTOKS", then the version
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kMaxMetaBytes = uint64_t{64} << 20;  // a BPE vocabulary of 1M merges is ~20 MB of JSON

struct Header {
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
  uint64_t header_hash;
  uint64_t reserved;
};
static_assert(sizeof(Header) == 96, "the cache header is 96 bytes");
constexpr size_t kHashedHeaderBytes = offsetof(Header, header_hash);

uint64_t header_hash(const Header& h, const std::string& meta) {
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

struct SourceStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

SourceStat stat_source(const std::string& path) {
  file_size(path);  // missing, or not a regular file: named as such
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw IoError(detail::concat(path, ": cannot open: ", errno_str()));
  return {static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
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

CheckStamp stamp_of(const struct stat& st, const Header& h) {
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

// What the caller asked for: a vocabulary derived from the source (kind), or a given tokenizer.
struct Request {
  Tokenizer::Kind kind;
  const Tokenizer* given;
};

// Why a cache cannot be used: `stale` (the source or tokenizer changed) or corrupt.
struct Rejection {
  std::string why;
  bool corrupt = false;
};

// Opens, checks and maps a cache; nullopt with *rejected set when it is missing (why empty), stale
// or corrupt.
std::optional<TokenCache> try_open(const std::string& cache, const std::string& source, const Request& req,
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
  if (::fstat(fd.get(), &st) != 0) return reject("cannot open it: " + errno_str(), true);
  // Its ids are trusted once its checksums match, and anyone who can write a file can make those
  // match: only a cache this user (or root) wrote is read.
  if (!trusted_owner(st.st_uid))
    throw IoError(
        detail::concat(cache, ": owned by another user (uid ", st.st_uid,
                       "), who could have planted it; tfm reads only token caches its own user wrote: "
                       "remove it or set data.cache_dir to a directory of your own"));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  Header h;
  if (file_bytes < sizeof h)
    return reject("truncated: " + std::to_string(file_bytes) + " bytes, shorter than its 96-byte header", true);
  if (read_at(fd.get(), &h, sizeof h, 0, cache) != sizeof h) return reject("truncated while reading its header", true);
  if (std::memcmp(h.magic, kMagic, kMagicNameBytes) != 0) return reject("not a tfm token cache (bad magic)", true);
  if (h.magic[kMagicNameBytes] != kCacheFormat.version)
    return reject(detail::concat("written in cache format ", std::string(1, h.magic[kMagicNameBytes]),
                                 "; this tfm reads and writes format ", std::string(1, kCacheFormat.version)),
                  false);
  if ((h.width != 2 && h.width != 4) || h.meta_bytes > kMaxMetaBytes ||
      h.tokens_offset != (sizeof h + h.meta_bytes + kAlign - 1) / kAlign * kAlign || h.count > (uint64_t{1} << 60))
    return reject("its header is corrupt", true);
  if (file_bytes < sizeof h + h.meta_bytes) return reject("truncated inside its header", true);
  std::string meta(static_cast<size_t>(h.meta_bytes), '\0');
  if (read_at(fd.get(), meta.data(), meta.size(), sizeof h, cache) != meta.size())
    return reject("truncated inside its header", true);
  if (header_hash(h, meta) != h.header_hash) return reject("its header fails its checksum (corrupt)", true);
  const uint64_t expected = h.tokens_offset + h.count * h.width;
  if (file_bytes != expected)
    return reject((file_bytes < expected ? "truncated: " : "too long: ") + std::to_string(file_bytes) +
                      " bytes, its header says " + std::to_string(expected) + " (" + std::to_string(h.count) +
                      " tokens)",
                  true);

  // The source: the same size and time, or (touched, copied) the same bytes.
  const SourceStat now = stat_source(source);
  if (now.size != h.source_size)
    return reject(source + " changed since it was tokenized (" + std::to_string(h.source_size) + " bytes then, " +
                      std::to_string(now.size) + " now)",
                  false);
  if (now.mtime_ns != h.source_mtime_ns) {
    const FileDescriptor src = open_regular_file(source);
    if (hash_file_range(src.get(), 0, now.size, threads, source) != h.source_hash)
      return reject(source + " changed since it was tokenized (its bytes differ)", false);
  }

  // The tokenizer.
  Tokenizer stored;
  try {
    const nlohmann::json j = parse_json_strict(meta.data(), meta.size(), cache);
    stored = Tokenizer::from_json(j.at("tokenizer"));
  } catch (const std::exception& e) {
    return reject(std::string("its tokenizer cannot be read: ") + e.what(), true);
  }
  if (fingerprint(stored) != h.tokenizer_hash) return reject("its tokenizer fails its checksum (corrupt)", true);
  if (req.given) {
    const uint64_t want = fingerprint(*req.given);
    if (want != h.tokenizer_hash)
      return reject("the tokenizer changed (fingerprint " + hex(want) + ", the cache's " + hex(h.tokenizer_hash) + ")",
                    false);
  } else if (stored.kind() != req.kind || h.vocab_from_source != 1) {
    return reject("it holds ids of another vocabulary (a run's), not the file's own " +
                      std::string(req.kind == Tokenizer::Kind::Char ? "char" : "byte") + " vocabulary",
                  false);
  }

  // The ids themselves, unless they were hashed since the file was last written (CheckStamp).
  const CheckStamp stamp = stamp_of(st, h);
  const std::string stamp_path = cache + ".checked";
  if (!stamp_matches(stamp_path, stamp)) {
    if (hash_file_range(fd.get(), h.tokens_offset, h.count * h.width, threads, cache) != h.tokens_hash)
      return reject("its tokens fail their checksum (corrupt)", true);
    // File times tick coarsely (a few ms): a file written less than a second ago could be written
    // again within the same tick, unseen; it is stamped at a later start.
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    if (now_ns - stamp.ctime_ns > 1000000000) {
      try {
        write_file_atomically(stamp_path, std::string(reinterpret_cast<const char*>(&stamp), sizeof stamp));
      } catch (const IoError&) {
        // A read-only cache directory: the ids are hashed at every start instead.
      }
    }
  }

  void* base = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) throw IoError(detail::concat(cache, ": cannot map it: ", errno_str()));
  // Windows are read at random offsets: no read-ahead around them.
  ::madvise(base, static_cast<size_t>(file_bytes), MADV_RANDOM);
  const auto mapping = std::make_shared<const TokenMapping>(base, static_cast<size_t>(file_bytes));
  TokenCache c;
  c.tokenizer = req.given ? *req.given : std::move(stored);
  c.tokens = TokenSpan(static_cast<const char*>(base) + h.tokens_offset, static_cast<int>(h.width),
                       static_cast<int64_t>(h.count), mapping, mapping.get());
  c.path = cache;
  c.source_bytes = now.size;
  return c;
}

// Tokenizes `source` into `cache` (atomically: a complete file or none).
void build(const std::string& cache, const std::string& source, const Request& req, int threads, size_t block_bytes) {
  const SourceStat before = stat_source(source);
  uint64_t source_hash = 0;
  // The file's own vocabulary, also for a given char vocabulary (a run's): when the two are the same,
  // the cache serves both, so a resume or eval that rebuilt it does not make the next new run rebuild
  // it again. The char pass also checks the UTF-8 of the whole file before anything is encoded.
  const Tokenizer::Kind kind = req.given ? req.given->kind() : req.kind;
  std::optional<Tokenizer> own;
  if (kind == Tokenizer::Kind::Char) own = char_vocabulary_of_file(source, &source_hash, block_bytes);
  if (kind == Tokenizer::Kind::Byte) own = Tokenizer::from_text(kind, "", source);
  const Tokenizer tok = req.given ? *req.given : *own;
  const uint32_t width = tok.size() <= 65536 ? 2 : 4;
  nlohmann::json meta_json = {{"format", "tfm token cache"},
                              {"source", std::filesystem::absolute(source).lexically_normal().string()},
                              {"tokenizer", tok.to_json()}};
  const std::string meta = meta_json.dump();
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
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
  // Ids narrowed into whole hash blocks (a whole number of ids), each hashed and written when full.
  std::vector<unsigned char> block(kHashBlockBytes);
  size_t fill = 0;
  uint64_t tokens_hash = kHashFoldStart, count = 0;
  const auto flush = [&] {
    if (fill == 0) return;
    tokens_hash = hash_fold(tokens_hash, hash64(block.data(), fill));
    file.write(block.data(), fill);
    fill = 0;
  };
  const uint64_t hash = encode_file(source, tok, [&](const int32_t* ids, size_t n) {
    count += n;
    while (n > 0) {
      const size_t k = std::min(n, (block.size() - fill) / width);  // ids that fit in the block
      if (width == 2) {
        uint16_t* out = reinterpret_cast<uint16_t*>(block.data() + fill);  // fill is even
        for (size_t i = 0; i < k; ++i) out[i] = static_cast<uint16_t>(ids[i]);
      } else {
        std::memcpy(block.data() + fill, ids, k * 4);
      }
      fill += k * width, ids += k, n -= k;
      if (fill == block.size()) flush();
    }
  }, threads, block_bytes);
  flush();
  if (kind != Tokenizer::Kind::Char) source_hash = hash;
  const SourceStat after = stat_source(source);
  if (after.size != before.size || after.mtime_ns != before.mtime_ns || hash != source_hash)
    throw IoError(source + ": the file changed while it was being tokenized; run again when it is complete");
  h.count = count;
  h.source_size = before.size;
  h.source_mtime_ns = before.mtime_ns;
  h.source_hash = source_hash;
  h.tokens_hash = tokens_hash;
  h.header_hash = header_hash(h, meta);
  file.write_at(0, &h, sizeof h);
  file.commit();
}

// Holds an exclusive flock on `path` (created) while alive: one process builds a cache, the others
// wait and then map what it built.
class BuildLock {
 public:
  // Never through a link, and only a regular file (open_lock_file).
  explicit BuildLock(const std::string& path) : fd_(open_lock_file(path)) {
    while (::flock(fd_.get(), LOCK_EX) != 0)
      if (errno != EINTR) throw IoError(detail::concat(path, ": cannot lock: ", errno_str()));
  }

 private:
  FileDescriptor fd_;
};

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

TokenCache open_cache(const std::string& source, const Request& req, const TokenCacheOptions& o) {
  const auto start = Clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  stat_source(source);  // a missing source is named as such, not as a cache problem
  const std::string dir = o.dir.empty() ? default_cache_dir(source) : o.dir;
  const std::string cache = token_cache_path(source, dir, req.given ? req.given->kind() : req.kind);
  check_cache_dir(dir);
  Rejection rejected;
  if (!o.rebuild) {
    if (auto c = try_open(cache, source, req, o.threads, &rejected)) {
      c->seconds = seconds();
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
  const BuildLock lock(cache + ".lock");
  // Another process may have built it while this one waited for the lock.
  if (!o.rebuild) {
    if (auto c = try_open(cache, source, req, o.threads, &rejected)) {
      c->seconds = seconds();
      return std::move(*c);
    }
  }
  if (o.log) {
    const std::string why = o.rebuild        ? "rebuilding it as asked"
                            : rejected.why.empty() ? "first use"
                                                   : rejected.why + (rejected.corrupt ? "; not trusted, rebuilding" : "; rebuilding");
    o.log("tokenizing " + source + " into " + cache + " (" + why + ")");
  }
  build(cache, source, req, o.threads, o.block_bytes);
  Rejection after;
  auto c = try_open(cache, source, req, o.threads, &after);
  if (!c) throw IoError(cache + ": the cache just written cannot be used: " + after.why);
  c->built = true;
  c->seconds = seconds();
  return std::move(*c);
}

}  // namespace

std::string default_cache_dir(const std::string& source) {
  const std::filesystem::path parent = std::filesystem::path(source).parent_path();
  return (parent.empty() ? std::filesystem::path(".tfm-cache") : parent / ".tfm-cache").string();
}

std::string token_cache_path(const std::string& source, const std::string& dir, Tokenizer::Kind kind) {
  const std::string name = std::filesystem::path(source).filename().string();
  const char* k = kind == Tokenizer::Kind::Char  ? "char"
                  : kind == Tokenizer::Kind::Byte ? "byte"
                  : kind == Tokenizer::Kind::Bpe  ? "bpe"
                                                  : "word";
  return (std::filesystem::path(dir) / (name + "." + k + ".tokens")).string();
}

TokenCache open_token_cache(const std::string& source, Tokenizer::Kind kind, const TokenCacheOptions& options) {
  if (kind != Tokenizer::Kind::Char && kind != Tokenizer::Kind::Byte)
    throw ConfigError("data.tokenizer: a vocabulary derived from the data file is char or byte; bpe reads "
                      "data.tokenizer_path");
  return open_cache(source, {kind, nullptr}, options);
}

TokenCache open_token_cache(const std::string& source, const Tokenizer& tokenizer, const TokenCacheOptions& options) {
  return open_cache(source, {tokenizer.kind(), &tokenizer}, options);
}

}  // namespace tfm
