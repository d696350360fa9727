#include "tfm/data/bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {

namespace {

constexpr uint64_t kMaxFileBytes = 64 << 20;  // 1M merges take ~20 MB of JSON

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

enum class CharClass { Letter, Digit, Space, Symbol };

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Non-ASCII code points that GPT-2's regex would not count as letters: the common punctuation and
// symbol blocks. Everything else non-ASCII (scripts of all languages) counts as a letter.
bool is_unicode_symbol(uint32_t c) {
  return (c >= 0x00A0 && c <= 0x00BF) || c == 0x00D7 || c == 0x00F7 ||
         (c >= 0x2000 && c <= 0x2BFF) ||  // general punctuation … misc symbols and arrows
         (c >= 0x3000 && c <= 0x303F) ||  // CJK symbols and punctuation
         (c >= 0xFE00 && c <= 0xFE0F) ||  // variation selectors (keep emoji sequences together)
         (c >= 0xFE30 && c <= 0xFE6F) ||  // CJK compatibility and small forms
         (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
         (c >= 0xFF5B && c <= 0xFF65) ||  // fullwidth punctuation
         (c >= 0x1F000 && c <= 0x1FAFF);  // emoji and pictographs
}

// The class of the character at t[i] and its length in bytes (an invalid byte is a 1-byte letter).
CharClass class_at(std::string_view t, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if (c < 0x80) {
    *len = 1;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
    if (c >= '0' && c <= '9') return CharClass::Digit;
    if (is_space(static_cast<char>(c))) return CharClass::Space;
    return CharClass::Symbol;
  }
  const Utf8Char ch = decode_utf8_char(t, i);
  if (ch.length == 0) {
    *len = 1;
    return CharClass::Letter;
  }
  *len = ch.length;
  return is_unicode_symbol(ch.code_point) ? CharClass::Symbol : CharClass::Letter;
}

// End of the chunk that starts at t[i] (see pretokenize in bpe.h).
size_t chunk_end(std::string_view t, size_t i) {
  const size_t n = t.size();
  if (t[i] == '\'') {
    for (std::string_view suffix : {"re", "ve", "ll", "s", "t", "m", "d"})
      if (t.substr(i + 1, suffix.size()) == suffix) return i + 1 + suffix.size();
  }
  size_t j = i;
  if (t[j] == ' ' && j + 1 < n && !is_space(t[j + 1])) ++j;  // the space goes with the word
  size_t len = 0;
  const CharClass cls = class_at(t, j, &len);
  if (cls != CharClass::Space) {
    size_t k = j + len;
    while (k < n) {
      if (class_at(t, k, &len) != cls || k + len - i > kBpeMaxChunkBytes) break;
      k += len;
    }
    return k;
  }
  size_t k = i;
  while (k < n && is_space(t[k])) ++k;
  if (k - i > kBpeMaxChunkBytes) return i + kBpeMaxChunkBytes;
  if (k == n) return k;
  if (k - i >= 2) return k - 1;  // leave the last whitespace character for the next chunk
  return i + 1;                  // a lone non-space whitespace character before a word
}

template <class F>
void for_each_chunk(std::string_view text, F&& f) {
  for (size_t i = 0; i < text.size();) {
    const size_t end = chunk_end(text, i);
    f(text.substr(i, end - i));
    i = end;
  }
}

// Replaces every (a, b) in `s`, left to right without overlap, by `id`.
void merge_pair(std::vector<int32_t>& s, int32_t a, int32_t b, int32_t id) {
  size_t r = 0;
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      s[r++] = id;
      i += 2;
    } else {
      s[r++] = s[i++];
    }
  }
  s.resize(r);
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  for_each_chunk(text, [&](std::string_view c) { out.push_back(c); });
  return out;
}

size_t pretokenize_cut(std::string_view t, size_t at) {
  // Why these are chunk starts whatever precedes them (chunk_end): a newline run of one byte is a
  // chunk of its own that ends where the next non-space starts, in the piece (end of text) and in the
  // whole; a letter or digit run ends at the first byte of another class, and a symbol starts a chunk.
  const auto ws = [](unsigned char c) { return is_space(static_cast<char>(c)); };
  const auto alnum = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  const auto symbol = [&](unsigned char c) { return c > 0x20 && c < 0x7F && !alnum(c) && c != '\''; };
  if (t.size() < 3) return 0;
  for (size_t p = std::min(at, t.size() - 1); p >= 2; --p) {
    const auto a = static_cast<unsigned char>(t[p - 2]), b = static_cast<unsigned char>(t[p - 1]),
               c = static_cast<unsigned char>(t[p]);
    if ((b == '\n' && !ws(a) && !ws(c)) || (alnum(b) && symbol(c))) return p;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Construction

BpeTokenizer::BpeTokenizer() : BpeTokenizer(std::vector<Merge>{}) {}

BpeTokenizer::BpeTokenizer(std::vector<Merge> merges, const std::string& what) : merges_(std::move(merges)) {
  if (merges_.size() > static_cast<size_t>(kBpeMaxVocab - 256))
    throw IoError(
        detail::concat(what, ": ", merges_.size(), " merges, expected at most ", kBpeMaxVocab - 256));
  vocab_.reserve(256 + merges_.size());
  for (int b = 0; b < 256; ++b) vocab_.emplace_back(1, static_cast<char>(b));
  ranks_.reserve(merges_.size());
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto [a, b] = merges_[k];
    const int32_t limit = static_cast<int32_t>(256 + k);
    if (a < 0 || a >= limit || b < 0 || b >= limit)
      throw IoError(detail::concat(what, ": merge ", k, " [", a, ", ", b, "] uses a token id outside [0, ",
                                   limit, ") (a merge may only join earlier tokens)"));
    // Token lengths are bounded, else 64 self-merges would describe a 2^64-byte token.
    if (vocab_[a].size() + vocab_[b].size() > kBpeMaxChunkBytes)
      throw IoError(detail::concat(what, ": merge ", k, " [", a, ", ", b, "] makes a token of ",
                                   vocab_[a].size() + vocab_[b].size(), " bytes, longer than the ",
                                   kBpeMaxChunkBytes, "-byte chunk limit"));
    const auto [it, inserted] = ranks_.emplace(pair_key(a, b), static_cast<int32_t>(k));
    if (!inserted)
      throw IoError(detail::concat(what, ": merge ", k, " [", a, ", ", b, "] repeats merge ", it->second));
    vocab_.push_back(vocab_[a] + vocab_[b]);
  }
}

// ---------------------------------------------------------------------------------------------
// Training
//
// Chunks are counted once; each distinct chunk is a "word" of token ids with a frequency. A global
// table counts every adjacent pair (weighted by word frequency) and lists the words it occurs in.
// A merge rewrites only the words that contain the pair and updates the counts of the pairs it
// destroyed and created, so a step costs the size of the affected words, not of the text. The
// most frequent pair comes from a max-heap with lazy deletion: an entry whose count no longer
// matches the table is stale and skipped.

ChunkAlignedPieces::ChunkAlignedPieces(Sink sink, size_t every) : sink_(std::move(sink)), every_(every) {}

void ChunkAlignedPieces::add(std::string_view piece) {
  // The bytes not handed on yet: the piece itself when nothing waits (a whole text is not copied).
  if (!pending_.empty()) pending_.append(piece);
  const std::string_view text = pending_.empty() ? piece : std::string_view(pending_);
  // Cut at the last boundary. Only the new bytes are searched (a boundary reads the two bytes before it).
  size_t cut = 0;
  if (text.size() >= every_) {
    const size_t from = searched_ >= 2 ? searched_ - 2 : 0;
    const size_t found = pretokenize_cut(text.substr(from), text.size() - 1 - from);
    if (found > 0) cut = from + found;
    searched_ = text.size();
  }
  if (cut == 0) {
    if (pending_.empty()) pending_.assign(piece);
    return;
  }
  sink_(text.substr(0, cut));
  std::string rest(text.substr(cut));  // no boundary past the cut: the last one was taken
  pending_ = std::move(rest);
  searched_ = pending_.size();
}

void ChunkAlignedPieces::finish() {
  if (!pending_.empty()) sink_(pending_);
  pending_.clear();
  searched_ = 0;
}

BpeChunkCounter::BpeChunkCounter()
    : pieces_([this](std::string_view text) {
        for_each_chunk(text, [&](std::string_view c) { ++counts_[std::string(c)]; });
      }) {}

void BpeChunkCounter::add(std::string_view piece) {
  bytes_ += piece.size();
  pieces_.add(piece);
}

std::unordered_map<std::string, int64_t> BpeChunkCounter::finish() {
  pieces_.finish();
  bytes_ = 0;
  return std::exchange(counts_, {});
}

BpeTokenizer BpeTokenizer::train(const std::string& text, int vocab_size) {
  BpeChunkCounter counter;
  counter.add(text);
  return train(counter.finish(), vocab_size);
}

BpeTokenizer BpeTokenizer::train(const std::unordered_map<std::string, int64_t>& chunk_counts,
                                 int vocab_size) {
  if (vocab_size < 256 || vocab_size > kBpeMaxVocab)
    throw ConfigError(
        detail::concat("bpe train: vocab_size must be in [256, ", kBpeMaxVocab, "], got ", vocab_size));

  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  words.reserve(chunk_counts.size());
  freq.reserve(chunk_counts.size());
  for (const auto& [chunk, count] : chunk_counts) {
    if (chunk.size() < 2) continue;  // nothing to merge inside
    words.emplace_back(chunk.begin(), chunk.end());
    for (int32_t& id : words.back()) id = static_cast<uint8_t>(id);  // chars may be signed
    freq.push_back(count);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may list a word twice or stale
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t key = pair_key(s[i], s[i + 1]);
      pair_count[key] += freq[w];
      auto& list = pair_words[key];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }
  }

  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry& o) const {  // top = highest count, then smallest (left, right)
      return count != o.count ? count < o.count : key > o.key;
    }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  std::vector<Merge> merges;
  std::vector<uint64_t> touched;
  while (256 + static_cast<int>(merges.size()) < vocab_size && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto found = pair_count.find(top.key);
    if (found == pair_count.end() || found->second != top.count) continue;  // stale
    if (top.count < 2) break;  // merging a pair seen once compresses nothing
    const int32_t a = static_cast<int32_t>(top.key >> 32), b = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
    const int32_t id = 256 + static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);

    std::vector<int32_t> affected = std::move(pair_words[top.key]);
    pair_words.erase(top.key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    touched.clear();
    for (const int32_t w : affected) {
      auto& s = words[w];
      const int64_t f = freq[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] -= f;
        touched.push_back(key);
      }
      merge_pair(s, a, b, id);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] += f;
        touched.push_back(key);
        // Only pairs with the new token are new to this word; the others already list it.
        if (s[i] == id || s[i + 1] == id) {
          auto& list = pair_words[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const uint64_t key : touched) {
      const auto it = pair_count.find(key);
      if (it->second > 0) {
        heap.push({it->second, key});
      } else {  // gone for good: new adjacencies always involve the newest token
        pair_count.erase(it);
        pair_words.erase(key);
      }
    }
  }
  return BpeTokenizer(std::move(merges), "bpe train");
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

// Applies merges in rank order, each to all its occurrences left to right: the same sequence of
// rewrites training applied to this chunk. The rank of every adjacent pair is kept in `rank`, and a
// merge looks up only the pairs that touch a new token (the others keep their rank), so a long
// chunk costs a scan of small integers per merge rather than a hash lookup per pair.
void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  constexpr int32_t kNone = INT32_MAX;
  const auto rank_of = [&](int32_t a, int32_t b) {
    const auto it = ranks_.find(pair_key(a, b));
    return it == ranks_.end() ? kNone : it->second;
  };
  std::vector<int32_t> s(chunk.begin(), chunk.end());
  for (int32_t& id : s) id = static_cast<uint8_t>(id);
  std::vector<int32_t> rank(s.empty() ? 0 : s.size() - 1);  // rank[i]: the merge joining s[i], s[i+1]
  for (size_t i = 0; i < rank.size(); ++i) rank[i] = rank_of(s[i], s[i + 1]);
  while (!rank.empty()) {
    const int32_t best = *std::min_element(rank.begin(), rank.end());
    if (best == kNone) break;
    const int32_t id = 256 + best;
    // In place: output position w <= input position i, so nothing is overwritten before it is read.
    const size_t n = s.size();
    size_t w = 0;
    bool prev_merged = false;
    int32_t prev_rank = kNone;  // rank of the input pair that started at the previous output's source
    for (size_t i = 0; i < n;) {
      const bool merge = i + 1 < n && rank[i] == best;
      const int32_t sym = merge ? id : s[i];
      const int32_t old_rank = !merge && i + 1 < n ? rank[i] : kNone;
      if (w > 0) rank[w - 1] = (merge || prev_merged) ? rank_of(s[w - 1], sym) : prev_rank;
      s[w++] = sym;
      prev_merged = merge;
      prev_rank = old_rank;
      i += merge ? 2 : 1;
    }
    s.resize(w);
    rank.resize(w - 1);
  }
  out.insert(out.end(), s.begin(), s.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  // Text repeats its words: encode each distinct chunk once per call.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;  // chunk -> span in out
  for_each_chunk(text, [&](std::string_view chunk) {
    const auto it = cache.find(chunk);
    if (it != cache.end()) {
      const auto [begin, len] = it->second;
      for (size_t k = 0; k < len; ++k) {
        const int32_t id = out[begin + k];  // a copy: push_back may reallocate
        out.push_back(id);
      }
      return;
    }
    const size_t begin = out.size();
    encode_chunk(chunk, out);
    cache.emplace(chunk, std::make_pair(begin, out.size() - begin));
  });
  return out;
}

void BpeChunkCache::clear() {
  index_.clear();
  keys_.clear();
  ids_.clear();
}

bool BpeChunkCache::append(std::string_view chunk, std::vector<int32_t>& out) const {
  const auto it = index_.find(chunk);
  if (it == index_.end()) return false;
  const auto [begin, len] = it->second;
  out.insert(out.end(), ids_.begin() + static_cast<std::ptrdiff_t>(begin),
             ids_.begin() + static_cast<std::ptrdiff_t>(begin + len));
  return true;
}

void BpeChunkCache::add(std::string_view chunk, const int32_t* ids, size_t n) {
  if (index_.size() >= kMaxEntries) clear();
  const std::string& key = keys_.emplace_back(chunk);
  const size_t begin = ids_.size();
  ids_.insert(ids_.end(), ids, ids + n);
  index_.emplace(std::string_view(key), std::make_pair(begin, n));
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out, BpeChunkCache& cache) const {
  for_each_chunk(text, [&](std::string_view chunk) {
    if (cache.append(chunk, out)) return;
    const size_t first = out.size();
    encode_chunk(chunk, out);
    cache.add(chunk, out.data() + first, out.size() - first);
  });
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      throw Error(detail::concat("bpe decode: token id ", ids[i], " at position ", i, " is outside [0, ",
                                 vocab_size(), ")"));
    out += vocab_[ids[i]];
  }
  return out;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  TFM_CHECK(id >= 0 && id < vocab_size(), "bpe token_bytes", "token id ", id, " is outside [0, ",
            vocab_size(), ")");
  return vocab_[id];
}

std::string BpeTokenizer::token_str(int32_t id) const {
  const std::string& t = token_bytes(id);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    const size_t len = c >= 0x80 ? decode_utf8_char(t, i).length : 0;
    if (len > 0) {
      out.append(t, i, len);
      i += len;
      continue;
    }
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\')
      out += "\\\\";
    else if (c >= 0x20 && c < 0x7F)
      out += static_cast<char>(c);
    else
      out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    ++i;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Files

std::string BpeTokenizer::to_json() const {
  // Written by hand: one merge per line keeps the file readable and diffable.
  std::string out = detail::concat("{\"type\": \"byte_bpe\", \"version\": 1, \"vocab_size\": ", vocab_size(),
                                   ",\n \"merges\": [");
  for (size_t k = 0; k < merges_.size(); ++k)
    out += detail::concat(k ? ",\n  [" : "\n  [", merges_[k].first, ", ", merges_[k].second, "]");
  out += merges_.empty() ? "]}\n" : "\n ]}\n";
  return out;
}

void BpeTokenizer::save(const std::string& path) const {
  const std::string text = to_json();
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  const std::string bytes = read_file(path, kMaxFileBytes);
  return parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

BpeTokenizer BpeTokenizer::parse(const uint8_t* data, size_t size, const std::string& what) {
  using json = nlohmann::json;
  if (size > kMaxFileBytes)
    throw IoError(detail::concat(what, ": ", size, " bytes, expected at most ", kMaxFileBytes));
  const json root = parse_json_strict(reinterpret_cast<const char*>(data), size, what);
  if (!root.is_object())
    throw IoError(detail::concat(what, ": expected a JSON object, got ", root.type_name()));
  for (const auto& item : root.items())
    if (item.key() != "type" && item.key() != "version" && item.key() != "vocab_size" &&
        item.key() != "merges")
      throw IoError(detail::concat(what, ": unknown field \"", item.key(),
                                   "\" (expected type, version, vocab_size, merges)"));
  for (const char* key : {"type", "version", "merges"})
    if (!root.contains(key)) throw IoError(detail::concat(what, ": missing \"", key, "\""));

  const json& type = root["type"];
  if (!type.is_string() || type.get_ref<const std::string&>() != "byte_bpe")
    throw IoError(detail::concat(what, ": type must be \"byte_bpe\", got ", type.dump()));
  const json& version = root["version"];
  if (!version.is_number_integer())
    throw IoError(detail::concat(what, ": version must be an integer, got ", version.dump()));
  if (version.get<int64_t>() != 1)
    throw IoError(
        detail::concat(what, ": unsupported version ", version.dump(), " (this build reads version 1)"));

  const json& list = root["merges"];
  if (!list.is_array())
    throw IoError(detail::concat(what, ": merges must be an array, got ", list.type_name()));
  if (list.size() > static_cast<size_t>(kBpeMaxVocab - 256))
    throw IoError(detail::concat(what, ": ", list.size(), " merges, expected at most ", kBpeMaxVocab - 256));
  std::vector<Merge> merges;
  merges.reserve(list.size());
  for (size_t k = 0; k < list.size(); ++k) {
    const json& m = list[k];
    const auto is_id = [](const json& v) { return v.is_number_unsigned() && v.get<uint64_t>() <= INT32_MAX; };
    if (!m.is_array() || m.size() != 2 || !is_id(m[0]) || !is_id(m[1]))
      throw IoError(
          detail::concat(what, ": merge ", k, " must be a pair of token ids [left, right], got ", m.dump()));
    merges.emplace_back(m[0].get<int32_t>(), m[1].get<int32_t>());
  }
  if (root.contains("vocab_size")) {
    const json& v = root["vocab_size"];
    if (!v.is_number_unsigned() || v.get<uint64_t>() != 256 + merges.size())
      throw IoError(detail::concat(what, ": vocab_size ", v.dump(), " does not match 256 + ", merges.size(),
                                   " merges = ", 256 + merges.size()));
  }
  return BpeTokenizer(std::move(merges), what);
}

}  // namespace tfm
