#include "tfm/data/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace {

std::string show_symbol(uint32_t cp) {
  if (cp == '\n') return "'\\n'";
  if (cp < 0x20 || cp == 0x7F) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X", cp);
    return buf;
  }
  std::string s = "'";
  append_utf8(s, cp);
  char buf[16];
  std::snprintf(buf, sizeof buf, "' (U+%04X)", cp);
  return s + buf;
}

}  // namespace

// ---- Tokenizer ----

namespace {

// Lowercase for ASCII, Latin-1 and Latin Extended-A (U+0100-U+017F), which cover the Tatoeba
// English-French pairs; other code points are kept.
uint32_t to_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;  // À..Þ except ×
  if (cp == 0x130) return 'i';                                 // İ
  if (cp == 0x178) return 0xFF;                                // Ÿ -> ÿ
  const bool even_upper = (cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177);
  const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
  if ((even_upper && cp % 2 == 0) || (odd_upper && cp % 2 == 1)) return cp + 1;
  return cp;
}

bool is_unicode_space(uint32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f';
}
bool is_split_punctuation(uint32_t cp) {
  return cp == ',' || cp == '.' || cp == '!' || cp == '?';
}

}  // namespace

Tokenizer::Tokenizer(Kind kind, std::vector<uint32_t> symbols) : kind_(kind), symbols_(std::move(symbols)) {
  for (size_t i = 0; i < symbols_.size(); ++i) {
    const uint32_t limit = kind_ == Kind::Byte ? 0xFF : 0x10FFFF;
    if (symbols_[i] > limit || (i > 0 && symbols_[i] <= symbols_[i - 1]))
      throw IoError(
          "tokenizer: the vocabulary must be distinct ascending symbols <= " + std::to_string(limit) +
          "; symbol " + std::to_string(i) + " is " + std::to_string(symbols_[i]));
  }
  ascii_ids_.fill(-1);
  for (size_t i = 0; i < symbols_.size() && symbols_[i] < ascii_ids_.size(); ++i)
    ascii_ids_[symbols_[i]] = static_cast<int32_t>(i);
}

Tokenizer::Tokenizer(std::vector<std::string> words) : kind_(Kind::Word), words_(std::move(words)) {
  word_order_.resize(words_.size());
  for (size_t i = 0; i < words_.size(); ++i) word_order_[i] = static_cast<int32_t>(i);
  std::sort(word_order_.begin(), word_order_.end(),
            [&](int32_t a, int32_t b) { return words_[a] < words_[b]; });
  for (size_t i = 0; i < words_.size(); ++i) {
    if (words_[i].empty()) throw IoError("tokenizer: word " + std::to_string(i) + " is empty");
    if (i > 0 && words_[word_order_[i]] == words_[word_order_[i - 1]])
      throw IoError("tokenizer: the word \"" + words_[word_order_[i]] + "\" appears twice in the vocabulary");
  }
}

template <>
const std::vector<std::string>& enum_names<Tokenizer::Kind>() {
  static const std::vector<std::string> names = {"char", "byte", "bpe", "word", "gpt2"};
  return names;
}

Tokenizer::Kind Tokenizer::parse_kind(const std::string& name) {
  if (const auto kind = enum_from<Kind>(name)) return *kind;
  throw ConfigError("data.tokenizer: expected one of " + enum_choices<Kind>() + ", got \"" + name + "\"");
}

std::string Tokenizer::kind_name() const {
  return name_of(kind_);
}

int64_t Tokenizer::size() const {
  const int64_t base = bpe_                  ? bpe_->vocab_size()
                       : gpt2_               ? gpt2_->vocab_size()
                       : kind_ == Kind::Word ? static_cast<int64_t>(words_.size())
                                             : static_cast<int64_t>(symbols_.size());
  // A gpt2 vocabulary with its own "<|endoftext|>" needs no extra id.
  const bool extra = end_of_text_ && !(gpt2_ && gpt2_->end_of_text() >= 0);
  return static_cast<int64_t>(specials_.size()) + base + (extra ? 1 : 0);
}

int32_t Tokenizer::end_of_text_id() const {
  if (!end_of_text_) return -1;
  if (gpt2_ && gpt2_->end_of_text() >= 0)
    return static_cast<int32_t>(specials_.size()) + gpt2_->end_of_text();
  return static_cast<int32_t>(size() - 1);
}

Tokenizer Tokenizer::with_end_of_text() const {
  Tokenizer t = *this;
  t.end_of_text_ = true;
  return t;
}

Tokenizer Tokenizer::without_end_of_text() const {
  Tokenizer t = *this;
  t.end_of_text_ = false;
  return t;
}

Tokenizer::Tokenizer(BpeTokenizer bpe)
    : kind_(Kind::Bpe), bpe_(std::make_shared<const BpeTokenizer>(std::move(bpe))) {}

Tokenizer Tokenizer::load_bpe(const std::string& path) {
  try {
    return Tokenizer(BpeTokenizer::load(path));
  } catch (const IoError& e) {
    // Making one at `path` is the advice only when nothing is there: a file that is not a tokenizer
    // (a config, a corpus) must not be suggested as tfm tokenizer train's --out.
    std::error_code ec;
    const bool missing = !std::filesystem::exists(std::filesystem::symlink_status(path, ec));
    const std::string name = std::filesystem::path(path).filename().string();
    if (std::filesystem::is_directory(path, ec) || name == "encoder.json" || name == "vocab.bpe" ||
        name == "vocab.json" || name == "merges.txt" || name == "tokenizer.json")
      throw IoError(
          std::string("data.tokenizer_path: ") + e.what() +
          " (GPT-2's and Hugging Face's byte-level BPE files are read with data.tokenizer = \"gpt2\")");
    throw IoError(std::string("data.tokenizer_path: ") + e.what() +
                  (missing
                       ? " (make one with: tfm tokenizer train --data FILE --vocab-size N --out " + path + ")"
                       : " (expected a byte-level BPE tokenizer file written by tfm tokenizer train)"));
  }
}

Tokenizer::Tokenizer(Gpt2Bpe gpt2)
    : kind_(Kind::Gpt2), gpt2_(std::make_shared<const Gpt2Bpe>(std::move(gpt2))) {}

Tokenizer Tokenizer::load_gpt2(const std::string& path) {
  try {
    return Tokenizer(path.empty() ? Gpt2Bpe::load_gpt2() : Gpt2Bpe::load(path));
  } catch (const IoError& e) {
    const std::string msg = e.what();
    throw IoError(msg.rfind("data.tokenizer", 0) == 0 ? msg : "data.tokenizer_path: " + msg);
  }
}

Tokenizer Tokenizer::from_file(Kind kind, const std::string& path) {
  if (kind == Kind::Bpe) return load_bpe(path);
  if (kind == Kind::Gpt2) return load_gpt2(path);
  throw ConfigError(std::string("data.tokenizer: \"") +
                    (kind == Kind::Char   ? "char"
                     : kind == Kind::Byte ? "byte"
                                          : "word") +
                    "\" takes its vocabulary from the data, not from a file");
}

Tokenizer Tokenizer::with_specials(std::vector<std::string> specials) const {
  Tokenizer t = *this;
  t.unk_ = -1;
  for (size_t i = 0; i < specials.size(); ++i) {
    if (specials[i].empty()) throw IoError("tokenizer: special " + std::to_string(i) + " is empty");
    for (size_t j = 0; j < i; ++j)
      if (specials[j] == specials[i])
        throw IoError("tokenizer: the special \"" + specials[i] + "\" appears twice");
    if (specials[i] == "<unk>") t.unk_ = static_cast<int32_t>(i);
  }
  t.specials_ = std::move(specials);
  return t;
}

int32_t Tokenizer::special_id(const std::string& name) const {
  for (size_t i = 0; i < specials_.size(); ++i)
    if (specials_[i] == name) return static_cast<int32_t>(i);
  return -1;
}

nlohmann::json Tokenizer::to_json() const {
  nlohmann::json j = bpe_                  ? nlohmann::json{{"kind", "bpe"}, {"merges", bpe_->merges()}}
                     : gpt2_               ? gpt2_->to_json()
                     : kind_ == Kind::Word ? nlohmann::json{{"kind", "word"}, {"words", words_}}
                                           : nlohmann::json{{"kind", kind_name()}, {"symbols", symbols_}};
  if (gpt2_) j["kind"] = "gpt2";
  if (!specials_.empty()) j["specials"] = specials_;
  if (end_of_text_) j["end_of_text"] = true;
  return j;
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j) {
  const Kind kind = parse_kind(j.at("kind").get<std::string>());
  Tokenizer t =
      kind == Kind::Gpt2 ? Tokenizer(Gpt2Bpe::from_json(j, "tokenizer"))
      : kind == Kind::Bpe
          ? Tokenizer(BpeTokenizer(j.at("merges").get<std::vector<BpeTokenizer::Merge>>(), "tokenizer"))
      : kind == Kind::Word ? Tokenizer(j.at("words").get<std::vector<std::string>>())
                           : Tokenizer(kind, j.at("symbols").get<std::vector<uint32_t>>());
  if (j.contains("specials")) t = t.with_specials(j.at("specials").get<std::vector<std::string>>());
  if (j.contains("end_of_text") && j.at("end_of_text").get<bool>()) t = t.with_end_of_text();
  return t;
}

std::vector<std::string> Tokenizer::split_words(const std::string& text, const std::string& source) {
  std::vector<std::string> words;
  std::string word;
  uint32_t prev = ' ';
  auto flush = [&] {
    if (!word.empty()) words.push_back(word);
    word.clear();
  };
  for (uint32_t cp : decode_utf8(text, source)) {
    if (cp == 0xA0 || cp == 0x202F) cp = ' ';  // non-breaking spaces (French puts them before ! and ?)
    if (is_split_punctuation(cp) && !is_unicode_space(prev))
      flush();  // d2l: a space before ,.!? when none precedes it
    prev = cp;
    if (is_unicode_space(cp)) {
      flush();
      continue;
    }
    append_utf8(word, to_lower(cp));
  }
  flush();
  return words;
}

Tokenizer Tokenizer::from_texts(Kind kind, const std::vector<std::string>& texts, const std::string& source,
                                int64_t min_freq) {
  if (kind == Kind::Bpe || kind == Kind::Gpt2)
    throw ConfigError(
        "data.tokenizer: \"bpe\" and \"gpt2\" read their vocabulary from files (Tokenizer::from_file)");
  std::vector<uint32_t> symbols;
  if (kind == Kind::Byte) {
    for (uint32_t b = 0; b < 256; ++b) symbols.push_back(b);
  } else if (kind == Kind::Char) {
    std::vector<bool> seen(0x110000, false);
    for (const std::string& text : texts)
      for (uint32_t cp : decode_utf8(text, source)) seen[cp] = true;
    for (uint32_t cp = 0; cp < seen.size(); ++cp)
      if (seen[cp]) symbols.push_back(cp);
  } else {
    std::map<std::string, int64_t> counts;
    for (const std::string& text : texts)
      for (const std::string& w : split_words(text, source)) ++counts[w];
    std::vector<std::pair<std::string, int64_t>> kept;
    for (const auto& [w, n] : counts)
      if (n >= min_freq) kept.emplace_back(w, n);
    // Frequency descending, then the word (bytewise): the map's order, kept by a stable sort.
    std::stable_sort(kept.begin(), kept.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    std::vector<std::string> words;
    for (auto& [w, n] : kept) words.push_back(w);
    return Tokenizer(std::move(words));
  }
  return Tokenizer(kind, std::move(symbols));
}

Tokenizer Tokenizer::from_text(Kind kind, const std::string& text, const std::string& source,
                               int64_t min_freq) {
  return from_texts(kind, {text}, source, min_freq);
}

int32_t Tokenizer::base_id(const std::string& word) const {
  const auto it = std::lower_bound(word_order_.begin(), word_order_.end(), word,
                                   [&](int32_t id, const std::string& w) { return words_[id] < w; });
  return it != word_order_.end() && words_[*it] == word ? *it : -1;
}

// ASCII from the table; other code points by binary search in the ascending symbols (a table up to the
// largest code point, ~4 MiB for an emoji, would cost more to build or keep than the search).
int32_t Tokenizer::symbol_id(uint32_t cp) const {
  if (cp < ascii_ids_.size()) return ascii_ids_[cp];
  const auto it = std::lower_bound(symbols_.begin(), symbols_.end(), cp);
  return it != symbols_.end() && *it == cp ? static_cast<int32_t>(it - symbols_.begin()) : -1;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, const std::string& source) const {
  std::vector<int32_t> ids;
  encode_piece(text, source, 0, 0, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_marked(const std::string& text, const std::vector<Marker>& markers,
                                              const std::string& source,
                                              std::vector<std::pair<size_t, int64_t>>* found) const {
  if (kind_ == Kind::Char ||
      kind_ == Kind::Word) {  // a character cut short before a marker: the text's error
    std::vector<uint32_t> unused;
    decode_utf8(text, source, 0, unused);
  }
  std::vector<int32_t> ids;
  size_t from = 0;
  uint64_t chars_before = 0;
  for (;;) {
    size_t at = std::string::npos, which = 0;
    for (size_t m = 0; m < markers.size(); ++m) {
      if (markers[m].id < 0 || markers[m].text.empty()) continue;
      const size_t p = text.find(markers[m].text, from);
      if (p < at) at = p, which = m;
    }
    const std::string_view piece =
        std::string_view(text).substr(from, at == std::string::npos ? at : at - from);
    encode_piece(piece, source, from, chars_before, ids);
    if (at == std::string::npos) return ids;
    if (found) found->emplace_back(which, static_cast<int64_t>(ids.size()));
    ids.push_back(markers[which].id);
    chars_before += static_cast<uint64_t>(count_utf8_chars(piece) + count_utf8_chars(markers[which].text));
    from = at + markers[which].text.size();
  }
}

std::vector<std::string> Tokenizer::unknown_symbols(const std::string& text,
                                                    const std::string& source) const {
  std::vector<std::string> unknown;
  const auto note = [&unknown](std::string symbol) {
    if (std::find(unknown.begin(), unknown.end(), symbol) == unknown.end())
      unknown.push_back(std::move(symbol));
  };
  if (kind_ == Kind::Word) {
    for (const std::string& w : split_words(text, source))
      if (base_id(w) < 0) note(w);
  } else if (kind_ == Kind::Char) {
    for (const uint32_t cp : decode_utf8(text, source)) {
      if (symbol_id(cp) >= 0) continue;
      std::string symbol;
      append_utf8(symbol, cp);
      note(std::move(symbol));
    }
  }
  return unknown;
}

void Tokenizer::encode_piece(std::string_view text, const std::string& source, uint64_t byte_offset,
                             uint64_t char_offset, std::vector<int32_t>& ids,
                             BpeChunkCache* bpe_cache) const {
  const int32_t shift = static_cast<int32_t>(specials_.size());
  const size_t first = ids.size();
  if (gpt2_) {
    gpt2_->encode(text, ids, bpe_cache);  // every byte string encodes
  } else if (bpe_ && bpe_cache) {
    bpe_->encode(text, ids, *bpe_cache);  // every byte string encodes
  } else if (bpe_) {
    const std::vector<int32_t> piece = bpe_->encode(text);
    ids.insert(ids.end(), piece.begin(), piece.end());
  } else if (kind_ == Kind::Byte) {
    ids.resize(first + text.size());
    int32_t* out = ids.data() + first;
    for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  } else if (kind_ == Kind::Word) {
    const std::vector<std::string> words = split_words(std::string(text), source);
    for (size_t i = 0; i < words.size(); ++i) {
      const int32_t id = base_id(words[i]);
      if (id < 0 && unk_ < 0)
        throw IoError(source + ": word \"" + words[i] + "\" (word " + std::to_string(i) +
                      ") is not in the vocabulary of " + std::to_string(words_.size()) + " words");
      ids.push_back(id < 0 ? unk_ - shift : id);
    }
  } else {
    ids.resize(first + text.size());  // at most one id per byte; trimmed below
    int32_t* out = ids.data() + first;
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    const uint64_t char0 = char_offset;
    size_t w = 0;   // ids written
    size_t at = 0;  // where the bytes not yet decoded start
    const auto put = [&](uint32_t cp) {
      const int32_t id = symbol_id(cp);
      if (id < 0 && unk_ < 0) {
        std::vector<uint32_t> rest;  // invalid UTF-8 anywhere is reported first, as a whole-text decode does
        decode_utf8(text.substr(at), source, byte_offset + at, rest);
        ids.resize(first);
        throw IoError(source + ": character " + show_symbol(cp) + " at character " +
                      std::to_string(char0 + w) + " (counted from 0) is not in the vocabulary of " +
                      std::to_string(symbols_.size()) + " symbols");
      }
      out[w++] = id < 0 ? unk_ - shift : id;
    };
    std::vector<uint32_t> cps;
    for (size_t i = 0; i < n;) {
      if (p[i] < 0x80) {  // ASCII: one byte, one character
        at = i + 1;
        put(p[i++]);
        continue;
      }
      // A non-ASCII run, decoded with the ASCII byte after it: a character that byte cuts short fails
      // there, as in a decode of the whole text.
      size_t j = i;
      while (j < n && p[j] >= 0x80) ++j;
      const size_t end = j < n ? j + 1 : n;
      cps.clear();
      decode_utf8(text.substr(i, end - i), source, byte_offset + i, cps);
      at = end;
      for (uint32_t cp : cps) put(cp);
      i = end;
    }
    ids.resize(first + w);
  }
  if (shift != 0)
    for (size_t i = first; i < ids.size(); ++i) ids[i] += shift;
}

std::string Tokenizer::decode(int32_t id) const {
  std::string out;
  TFM_CHECK(id >= 0 && id < size(), "Tokenizer::decode", "token id ", id, " is outside the ", kind_name(),
            " vocabulary's ids [0, ", size(), ")");
  if (id == end_of_text_id()) return kEndOfText;
  if (is_special(id)) return id == unk_ ? specials_[id] : out;
  id -= static_cast<int32_t>(specials_.size());
  if (bpe_) return bpe_->token_bytes(id);
  if (gpt2_) return gpt2_->token_bytes(id);
  if (kind_ == Kind::Word) return words_[id];
  if (kind_ == Kind::Byte)
    out += static_cast<char>(symbols_[id]);
  else
    append_utf8(out, symbols_[id]);
  return out;
}

namespace {
void check_decoded_ids(const Tokenizer& t, const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i)
    TFM_CHECK(ids[i] >= 0 && ids[i] < t.size(), "Tokenizer::decode", "token id ", ids[i], " at position ", i,
              " is outside the ", t.kind_name(), " vocabulary's ids [0, ", t.size(), ")");
}
}  // namespace

std::vector<std::string> Tokenizer::decode_tokens(const std::vector<int32_t>& ids) const {
  check_decoded_ids(*this, ids);
  std::vector<std::string> out;
  for (int32_t id : ids)
    if (!is_special(id) || id == unk_) out.push_back(decode(id));
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  check_decoded_ids(*this, ids);
  std::string out;
  if (kind_ != Kind::Word) {
    for (int32_t id : ids) out += decode(id);
    return out;
  }
  // Words joined by spaces, without the space split_words put before ,.!?.
  for (const std::string& w : decode_tokens(ids)) {
    const bool attach = w.size() == 1 && is_split_punctuation(static_cast<unsigned char>(w[0]));
    if (!out.empty() && !attach) out += ' ';
    out += w;
  }
  return out;
}

}  // namespace tfm
