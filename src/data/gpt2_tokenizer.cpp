#include "tfm/data/gpt2_tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/platform.h"

#ifndef TFM_SOURCE_TOKENIZERS_DIR  // set by the build: its source tree's data/tokenizers
#define TFM_SOURCE_TOKENIZERS_DIR "data/tokenizers"
#endif

namespace tfm {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxVocabFileBytes = 256 << 20;  // GPT-2's encoder.json is 1 MB, a tokenizer.json ~2-20 MB

// ---- Unicode classes of GPT-2's regex ----

enum class UnicodeClass : uint8_t { Letter, Number, Space, Other };

struct UnicodeRange {
  uint32_t first, last;
  UnicodeClass cls;
};

constexpr UnicodeRange kUnicodeRanges[] = {
#include "unicode_classes.inc"
};

// Unicode's White_Space property, the \s of tiktoken's Rust regex (and of OpenAI's Python `regex`).
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

UnicodeClass class_of(uint32_t c) {
  if (is_white_space(c)) return UnicodeClass::Space;
  const auto it = std::upper_bound(std::begin(kUnicodeRanges), std::end(kUnicodeRanges), c,
                                   [](uint32_t v, const UnicodeRange& r) { return v < r.first; });
  if (it == std::begin(kUnicodeRanges)) return UnicodeClass::Other;
  const UnicodeRange& r = *(it - 1);
  return c <= r.last ? r.cls : UnicodeClass::Other;
}

const std::array<UnicodeClass, 128>& ascii_classes() {
  static const std::array<UnicodeClass, 128> table = [] {
    std::array<UnicodeClass, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = class_of(c);
    return t;
  }();
  return table;
}

struct Gpt2Char {
  UnicodeClass cls;
  size_t length;  // bytes
};

// The character at t[i]; an invalid UTF-8 byte is a one-byte character of class Other.
Gpt2Char char_at(std::string_view t, size_t i) {
  const auto c = static_cast<unsigned char>(t[i]);
  if (c < 0x80) return {ascii_classes()[c], 1};
  const Utf8Char ch = decode_utf8_char(t, i);
  if (ch.length == 0) return {UnicodeClass::Other, 1};
  return {class_of(ch.code_point), ch.length};
}

// End of the run of characters of class `cls` that continues at t[i].
size_t run_end(std::string_view t, size_t i, UnicodeClass cls) {
  while (i < t.size()) {
    const Gpt2Char ch = char_at(t, i);
    if (ch.cls != cls) break;
    i += ch.length;
  }
  return i;
}

// End of the piece that starts at t[i]: the first alternative of the regex that matches there.
size_t piece_end(std::string_view t, size_t i) {
  const size_t n = t.size();
  if (t[i] == '\'' && i + 1 < n) {  // 's|'t|'re|'ve|'m|'ll|'d
    const char a = t[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = t[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  const Gpt2Char first = char_at(t, i);
  if (t[i] == ' ' && i + 1 < n) {  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+` with the space
    const Gpt2Char next = char_at(t, i + 1);
    if (next.cls != UnicodeClass::Space) return run_end(t, i + 1 + next.length, next.cls);
  }
  if (first.cls != UnicodeClass::Space) return run_end(t, i + first.length, first.cls);
  // `\s+(?!\S)|\s+`: a whitespace run at the end of the text whole; else all but its last character
  // (which then goes with what follows), or the one character when the run has only one.
  size_t last = i, k = i;
  while (k < n) {
    const Gpt2Char ch = char_at(t, k);
    if (ch.cls != UnicodeClass::Space) break;
    last = k;
    k += ch.length;
  }
  if (k == n) return n;
  return last > i ? last : k;
}

uint64_t merge_pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// GPT-2's printable form back to bytes; false when a code point is not one of the 256.
bool token_text_to_bytes(const std::string& text, std::string& bytes) {
  static const std::map<uint32_t, uint8_t> inverse = [] {
    std::map<uint32_t, uint8_t> m;
    for (int b = 0; b < 256; ++b)
      m[gpt2_byte_to_code_point(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
    return m;
  }();
  bytes.clear();
  for (size_t i = 0; i < text.size();) {
    const Utf8Char ch = decode_utf8_char(text, i);
    if (ch.length == 0) return false;
    const auto it = inverse.find(ch.code_point);
    if (it == inverse.end()) return false;
    bytes += static_cast<char>(it->second);
    i += ch.length;
  }
  return true;
}

// ---- files ----

nlohmann::json read_json(const std::string& path) {
  const std::string bytes = read_file(path, kMaxVocabFileBytes);
  return parse_json_strict(bytes.data(), bytes.size(), path);
}

// An object {token: id, ...} (encoder.json, vocab.json, tokenizer.json's model.vocab) into id -> token.
void read_vocab(const nlohmann::json& vocab, const std::string& where,
                std::map<int64_t, std::string>& by_id) {
  if (!vocab.is_object())
    throw IoError(where + ": expected a JSON object {\"token\": id, ...}, got " + vocab.type_name());
  for (const auto& item : vocab.items()) {
    if (!item.value().is_number_unsigned() || item.value().get<uint64_t>() > INT32_MAX)
      throw IoError(where + ": the id of token \"" + item.key() + "\" must be an integer >= 0, got " +
                    item.value().dump());
    const int64_t id = item.value().get<int64_t>();
    const auto [it, inserted] = by_id.emplace(id, item.key());
    if (!inserted && it->second != item.key())
      throw IoError(where + ": id " + std::to_string(id) + " names two tokens, \"" + it->second +
                    "\" and \"" + item.key() + "\"");
  }
}

std::vector<std::string> dense_tokens(const std::map<int64_t, std::string>& by_id, const std::string& where) {
  std::vector<std::string> tokens;
  tokens.reserve(by_id.size());
  for (const auto& [id, token] : by_id) {
    if (id != static_cast<int64_t>(tokens.size()))
      throw IoError(where + ": token ids must run 0..N-1 without a gap; id " + std::to_string(tokens.size()) +
                    " has no token");
    tokens.push_back(token);
  }
  if (tokens.empty()) throw IoError(where + ": the vocabulary is empty");
  return tokens;
}

// "left right" (vocab.bpe, merges.txt and tokenizer.json's merges); false when it is not two tokens.
bool split_merge(std::string_view line, Gpt2Bpe::TextMerge& merge) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string_view::npos)
    return false;
  merge = {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
  return true;
}

// vocab.bpe / merges.txt: an optional "#version" line, then one "left right" merge per line.
std::vector<Gpt2Bpe::TextMerge> read_merges(const std::string& path, size_t* first_line) {
  const std::string text = read_file(path, kMaxVocabFileBytes);
  std::vector<Gpt2Bpe::TextMerge> merges;
  size_t line_no = 0;
  *first_line = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.substr(0, 8) == "#version") continue;
    if (line.empty() && at >= text.size()) break;  // the final newline
    if (*first_line == 0) *first_line = line_no;
    Gpt2Bpe::TextMerge m;
    if (!split_merge(line, m))
      throw IoError(path + ":" + std::to_string(line_no) +
                    ": expected a merge, two tokens separated by one space, got \"" +
                    std::string(line.substr(0, 80)) + "\"");
    merges.push_back(std::move(m));
  }
  return merges;
}

Gpt2Bpe load_pair(const std::string& vocab_path, const std::string& merges_path) {
  std::map<int64_t, std::string> by_id;
  read_vocab(read_json(vocab_path), vocab_path, by_id);
  size_t first_line = 0;
  const std::vector<Gpt2Bpe::TextMerge> merges = read_merges(merges_path, &first_line);
  std::vector<std::string> tokens = dense_tokens(by_id, vocab_path);
  try {
    return Gpt2Bpe(std::move(tokens), merges, vocab_path);
  } catch (const IoError& e) {
    const std::string msg = e.what();
    // Merge errors name the merge by index: the file and line say where it is.
    const size_t at = msg.find(": merge ");
    if (at == std::string::npos || msg.compare(0, at, vocab_path) != 0) throw;
    const size_t k = std::strtoull(msg.c_str() + at + 8, nullptr, 10);
    throw IoError(merges_path + ":" + std::to_string(first_line + k) + msg.substr(at));
  }
}

std::string describe_pre_tokenizer(const nlohmann::json& p) {
  if (p.is_null()) return "null";
  if (p.is_object() && p.contains("type") && p["type"].is_string())
    return "\"" + p["type"].get<std::string>() + "\"";
  return p.dump().substr(0, 80);
}

Gpt2Bpe load_tokenizer_json(const std::string& path, const nlohmann::json& root) {
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    throw IoError(path + ": expected a Hugging Face tokenizer.json (an object with \"model\")");
  const nlohmann::json& model = root["model"];
  const std::string type =
      model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "(none)";
  if (type != "BPE")
    throw IoError(
        path + ": model.type is \"" + type +
        "\"; tfm reads byte-level BPE tokenizers (model.type \"BPE\" with a ByteLevel pre-tokenizer)");
  // GPT-2's pre-split is the ByteLevel pre-tokenizer with its regex; another split (a Split of its own
  // regex, Metaspace) would tokenize differently.
  const nlohmann::json pre = root.value("pre_tokenizer", nlohmann::json());
  const bool byte_level =
      pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true);
  if (!byte_level)
    throw IoError(path + ": pre_tokenizer is " + describe_pre_tokenizer(pre) +
                  "; tfm reads byte-level BPE with GPT-2's pre-split (pre_tokenizer type \"ByteLevel\", "
                  "use_regex true)");
  if (model.value("byte_fallback", false))
    throw IoError(path + ": model.byte_fallback is true (a SentencePiece-style BPE), not byte-level BPE");
  std::map<int64_t, std::string> by_id;
  read_vocab(model.value("vocab", nlohmann::json()), path + ": model.vocab", by_id);
  const nlohmann::json added = root.value("added_tokens", nlohmann::json::array());
  if (!added.is_array())
    throw IoError(path + ": added_tokens must be an array, got " + std::string(added.type_name()));
  for (size_t i = 0; i < added.size(); ++i) {
    const nlohmann::json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
        !a["content"].is_string())
      throw IoError(path + ": added_tokens[" + std::to_string(i) +
                    "] must have an integer id and a string content");
    const auto [it, inserted] = by_id.emplace(a["id"].get<int64_t>(), a["content"].get<std::string>());
    if (!inserted && it->second != a["content"].get<std::string>())
      throw IoError(path + ": added_tokens[" + std::to_string(i) + "] gives id " + std::to_string(it->first) +
                    " to \"" + a["content"].get<std::string>() + "\", which model.vocab gives to \"" +
                    it->second + "\"");
  }
  const nlohmann::json merges_json = model.value("merges", nlohmann::json::array());
  if (!merges_json.is_array())
    throw IoError(path + ": model.merges must be an array, got " + std::string(merges_json.type_name()));
  std::vector<Gpt2Bpe::TextMerge> merges;
  merges.reserve(merges_json.size());
  for (size_t k = 0; k < merges_json.size(); ++k) {
    const nlohmann::json& m = merges_json[k];
    Gpt2Bpe::TextMerge merge;
    const bool ok = m.is_string() ? split_merge(m.get_ref<const std::string&>(), merge)
                    : m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()
                        ? (merge = {m[0].get<std::string>(), m[1].get<std::string>()}, true)
                        : false;
    if (!ok)
      throw IoError(path + ": model.merges[" + std::to_string(k) +
                    "] must be \"left right\" or [\"left\", \"right\"], got " + m.dump().substr(0, 80));
    merges.push_back(std::move(merge));
  }
  return Gpt2Bpe(dense_tokens(by_id, path), merges, path);
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

uint32_t gpt2_byte_to_code_point(uint8_t b) {
  const auto printable = [](uint32_t c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
  };
  if (printable(b)) return b;
  uint32_t rank = 0;
  for (uint32_t c = 0; c < b; ++c) rank += printable(c) ? 0 : 1;
  return 256 + rank;
}

std::string gpt2_token_text(std::string_view bytes) {
  std::string out;
  for (char b : bytes) append_utf8(out, gpt2_byte_to_code_point(static_cast<uint8_t>(b)));
  return out;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size();) {
    const size_t end = piece_end(text, i);
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

size_t gpt2_pretokenize_cut(std::string_view t, size_t at) {
  // A newline between printable ASCII is a piece of its own (a one-character whitespace run) in the
  // piece and in the whole; a letter or digit run (or a contraction) ends at an ASCII symbol, which
  // starts a piece. Non-ASCII neighbours are excluded: U+00A0 and friends are whitespace here.
  const auto printable = [](unsigned char c) { return c > 0x20 && c < 0x7F; };
  const auto alnum = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  const auto symbol = [&](unsigned char c) { return printable(c) && !alnum(c) && c != '\''; };
  if (t.size() < 3) return 0;
  for (size_t p = std::min(at, t.size() - 1); p >= 2; --p) {
    const auto a = static_cast<unsigned char>(t[p - 2]), b = static_cast<unsigned char>(t[p - 1]),
               c = static_cast<unsigned char>(t[p]);
    if ((b == '\n' && printable(a) && printable(c)) || (alnum(b) && symbol(c))) return p;
  }
  return 0;
}

// ---- Gpt2Bpe ----

Gpt2Bpe::Gpt2Bpe(std::vector<std::string> tokens, const std::vector<TextMerge>& merges,
                 const std::string& what)
    : tokens_(std::move(tokens)), merges_(merges) {
  const auto V = static_cast<int32_t>(tokens_.size());
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(tokens_.size());
  bytes_.resize(tokens_.size());
  reachable_.assign(tokens_.size(), false);
  for (int32_t id = 0; id < V; ++id) {
    const auto [it, inserted] = ids.emplace(tokens_[id], id);
    if (!inserted)
      throw IoError(
          detail::concat(what, ": tokens ", it->second, " and ", id, " are both \"", tokens_[id], "\""));
    // A token outside the printable form (an added token such as "<|im_start|>" stays readable) is its
    // own text; encoding never reaches it.
    if (!token_text_to_bytes(tokens_[id], bytes_[id])) bytes_[id] = tokens_[id];
    if (tokens_[id] == "<|endoftext|>") end_of_text_ = id;
  }
  for (int b = 0; b < 256; ++b) {
    const std::string text = gpt2_token_text(std::string(1, static_cast<char>(b)));
    const auto it = ids.find(text);
    if (it == ids.end())
      throw IoError(detail::concat(what, ": byte-level BPE needs a token for each of the 256 bytes; byte ", b,
                                   " (\"", text, "\") has none"));
    byte_ids_[b] = it->second;
    reachable_[static_cast<size_t>(it->second)] = true;
  }
  ranks_.reserve(merges_.size());
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto& [left, right] = merges_[k];
    const auto l = ids.find(left), r = ids.find(right), joined = ids.find(left + right);
    const char* missing = l == ids.end()        ? "its left token"
                          : r == ids.end()      ? "its right token"
                          : joined == ids.end() ? "the token it makes"
                                                : nullptr;
    if (missing)
      throw IoError(detail::concat(what, ": merge ", k, " (\"", left, " ", right, "\"): ", missing,
                                   " is not in the vocabulary"));
    // A pair listed twice keeps its first (lowest) rank, as GPT-2's bpe_ranks dict built in order would
    // not: it keeps the last; Hugging Face's keeps the first. Neither happens in a real vocabulary.
    ranks_.emplace(merge_pair_key(l->second, r->second),
                   std::make_pair(static_cast<int32_t>(k), joined->second));
    reachable_[static_cast<size_t>(joined->second)] = true;
  }
  if (end_of_text_ >= 0 && reachable_[static_cast<size_t>(end_of_text_)]) end_of_text_ = -1;
}

// Merges by rank, each to all its occurrences left to right (GPT-2's bpe()). rank[i] holds the rank of
// the pair (s[i], s[i+1]); a merge looks up only the pairs that touch a new token.
void Gpt2Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  constexpr int32_t kNone = INT32_MAX;
  std::vector<int32_t> s(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) s[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  if (s.size() < 2) {
    out.insert(out.end(), s.begin(), s.end());
    return;
  }
  std::vector<int32_t> made(s.size() - 1);  // made[i]: the token the merge of rank[i] makes
  const auto rank_of = [&](int32_t a, int32_t b, int32_t* id) {
    const auto it = ranks_.find(merge_pair_key(a, b));
    if (it == ranks_.end()) return kNone;
    *id = it->second.second;
    return it->second.first;
  };
  std::vector<int32_t> rank(s.size() - 1);
  for (size_t i = 0; i < rank.size(); ++i) rank[i] = rank_of(s[i], s[i + 1], &made[i]);
  while (!rank.empty()) {
    const auto best_at = std::min_element(rank.begin(), rank.end());
    const int32_t best = *best_at;
    if (best == kNone) break;
    const int32_t id = made[static_cast<size_t>(best_at - rank.begin())];
    // In place: output position w <= input position i, so nothing is overwritten before it is read.
    const size_t n = s.size();
    size_t w = 0;
    bool prev_merged = false;
    int32_t prev_rank = kNone, prev_made = 0;  // the input pair that started at the previous output's source
    for (size_t i = 0; i < n;) {
      const bool merge = i + 1 < n && rank[i] == best;
      const int32_t sym = merge ? id : s[i];
      const int32_t old_rank = !merge && i + 1 < n ? rank[i] : kNone;
      const int32_t old_made = !merge && i + 1 < n ? made[i] : 0;
      if (w > 0) {
        if (merge || prev_merged) {
          rank[w - 1] = rank_of(s[w - 1], sym, &made[w - 1]);
        } else {
          rank[w - 1] = prev_rank;
          made[w - 1] = prev_made;
        }
      }
      s[w++] = sym;
      prev_merged = merge;
      prev_rank = old_rank;
      prev_made = old_made;
      i += merge ? 2 : 1;
    }
    s.resize(w);
    rank.resize(w - 1);
    made.resize(w - 1);
  }
  out.insert(out.end(), s.begin(), s.end());
}

void Gpt2Bpe::encode(std::string_view text, std::vector<int32_t>& out, BpeChunkCache* cache) const {
  BpeChunkCache local;
  BpeChunkCache& c = cache ? *cache : local;
  for (size_t i = 0; i < text.size();) {
    const size_t end = piece_end(text, i);
    const std::string_view piece = text.substr(i, end - i);
    i = end;
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (c.append(piece, out)) continue;
    const size_t first = out.size();
    encode_piece(piece, out);
    c.add(piece, out.data() + first, out.size() - first);
  }
}

nlohmann::json Gpt2Bpe::to_json() const {
  std::vector<std::string> lines;
  lines.reserve(merges_.size());
  for (const auto& [l, r] : merges_) lines.push_back(l + " " + r);
  return {{"tokens", tokens_}, {"merges", lines}};
}

Gpt2Bpe Gpt2Bpe::from_json(const nlohmann::json& j, const std::string& what) {
  std::vector<TextMerge> merges;
  for (const std::string& line : j.at("merges").get<std::vector<std::string>>()) {
    TextMerge m;
    if (!split_merge(line, m))
      throw IoError(what + ": merge " + std::to_string(merges.size()) + " is not two tokens: \"" + line +
                    "\"");
    merges.push_back(std::move(m));
  }
  return Gpt2Bpe(j.at("tokens").get<std::vector<std::string>>(), merges, what);
}

Gpt2Bpe Gpt2Bpe::load(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) throw IoError(path + ": no such file or directory");
  if (fs::is_directory(p, ec)) {
    if (is_file(p / "encoder.json") && is_file(p / "vocab.bpe"))
      return load_pair((p / "encoder.json").string(), (p / "vocab.bpe").string());
    if (is_file(p / "vocab.json") && is_file(p / "merges.txt"))
      return load_pair((p / "vocab.json").string(), (p / "merges.txt").string());
    if (is_file(p / "tokenizer.json"))
      return load_tokenizer_json((p / "tokenizer.json").string(), read_json((p / "tokenizer.json").string()));
    throw IoError(
        path +
        ": a directory without GPT-2's encoder.json + vocab.bpe, Hugging Face's vocab.json + merges.txt "
        "or a tokenizer.json");
  }
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const auto partner = [&](std::initializer_list<const char*> names, const char* what_it_is) {
    for (const char* name : names)
      if (is_file(dir / name)) return (dir / name).string();
    std::string list;
    for (const char* name : names) list += std::string(list.empty() ? "" : " or ") + name;
    throw IoError(path + ": " + what_it_is + " needs its partner file, " + list +
                  ", beside it; there is none in " + dir.string());
  };
  if (p.extension() == ".json") {
    const nlohmann::json root = read_json(path);
    if (root.is_object() && root.contains("model")) return load_tokenizer_json(path, root);
    if (root.is_object() && root.value("type", nlohmann::json()) == "byte_bpe")
      throw IoError(path +
                    ": a tokenizer of tfm's own (tfm tokenizer train), read with data.tokenizer \"bpe\"; "
                    "data.tokenizer \"gpt2\" reads GPT-2's or Hugging Face's files");
    return load_pair(path, partner({"vocab.bpe", "merges.txt"}, "a vocabulary (token -> id)"));
  }
  return load_pair(partner({"encoder.json", "vocab.json"}, "a merges file"), path);
}

std::string Gpt2Bpe::gpt2_directory() {
  std::vector<fs::path> candidates;
  for (const std::string& d :
       platform::data_directories("tokenizers/gpt2", TFM_SOURCE_TOKENIZERS_DIR "/gpt2"))
    candidates.push_back(d);
  candidates.push_back(fs::path("data") / "tokenizers" / "gpt2");  // a repository root as working directory
  std::string tried;
  for (const fs::path& d : candidates) {
    if (is_file(d / "encoder.json") && is_file(d / "vocab.bpe")) return d.string();
    tried += (tried.empty() ? "" : ", ") + d.string();
  }
  throw IoError(
      "data.tokenizer: \"gpt2\": GPT-2's encoder.json and vocab.bpe are not in " + tried +
      " (they ship in the repository's data/tokenizers/gpt2; or set data.tokenizer_path to a directory "
      "holding them)");
}

Gpt2Bpe Gpt2Bpe::load_gpt2() {
  return load(gpt2_directory());
}

}  // namespace tfm
