// Text to tokens: the char, byte, BPE and word tokenizers.
//
// The char tokenizer works on Unicode code points of a UTF-8 file; its vocabulary is the sorted set
// of distinct code points (= torch_lm.py's sorted(set(text))). The byte tokenizer uses the 256 byte
// values. The word tokenizer is d2l's machine-translation preprocessing (see Kind::Word).
//
// Special tokens: any tokenizer may carry a list of specials (e.g. seq2seq's "<pad>", "<bos>",
// "<eos>", "<unk>") that take ids [0, S); the base vocabulary's ids are shifted by S. With "<unk>"
// among them, a symbol or word outside the vocabulary encodes to <unk> instead of throwing.
//
// End of text: a corpus of several documents joins them with one reserved id (with_end_of_text), the
// last id, past the specials and the base vocabulary (as masked_lm's [MASK] sits past the tokenizer),
// so the ids of text are the same with or without it. Encoding text never produces it (the characters
// "<|endoftext|>" encode as characters); decode shows it as kEndOfText.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/data/bpe.h"
#include "tfm/data/gpt2_tokenizer.h"
#include "tfm/data/utf8.h"
#include "tfm/engine/enum_names.h"

namespace tfm {

constexpr const char* kEndOfText = "<|endoftext|>";

class Tokenizer {
 public:
  // Word: d2l's preprocessing (split_words): U+00A0 and U+202F become spaces, letters are lowercased
  // (ASCII, Latin-1 and Latin Extended-A: "É" -> "é"), a space is inserted before ',', '.', '!', '?'
  // when none precedes it, and the text is split on whitespace. decode() joins the words with spaces
  // and removes the space before ,.!? again.
  // Gpt2: GPT-2's tokenizer, or another byte-level BPE in its file formats (gpt2_tokenizer.h); its ids are
  // the vocabulary file's, and its "<|endoftext|>" is the end-of-text id (GPT-2's 50256).
  enum class Kind { Char, Byte, Bpe, Word, Gpt2 };
  Tokenizer() = default;
  Tokenizer(Kind kind, std::vector<uint32_t> symbols);  // symbols sorted ascending, distinct
  explicit Tokenizer(std::vector<std::string> words);   // a Kind::Word vocabulary, distinct words
  // The char vocabulary of a text (its sorted distinct code points), the 256-byte vocabulary, or the
  // word vocabulary: the words seen at least min_freq times, by frequency (descending), then bytewise.
  static Tokenizer from_text(Kind kind, const std::string& text, const std::string& source,
                             int64_t min_freq = 1);
  // The same over several texts (sentences), which are not joined: no character is added between them.
  static Tokenizer from_texts(Kind kind, const std::vector<std::string>& texts, const std::string& source,
                              int64_t min_freq = 1);
  static Kind parse_kind(const std::string& name);  // "char" | "byte" | "bpe" | "word" | "gpt2"
  // The words of a text after d2l's preprocessing (Kind::Word); IoError naming `source` on invalid UTF-8.
  static std::vector<std::string> split_words(const std::string& text, const std::string& source);
  // A byte-level BPE tokenizer (bpe.h): ids are its tokens, symbols() is empty.
  explicit Tokenizer(BpeTokenizer bpe);
  // The BPE tokenizer file of data.tokenizer_path; IoError "data.tokenizer_path: ..." when unusable.
  static Tokenizer load_bpe(const std::string& path);
  explicit Tokenizer(Gpt2Bpe gpt2);
  // data.tokenizer "gpt2": the files at data.tokenizer_path (Gpt2Bpe::load), or GPT-2's own when `path` is
  // empty; IoError "data.tokenizer_path: ..." when unusable.
  static Tokenizer load_gpt2(const std::string& path);
  // The tokenizer a new run of data.tokenizer = `kind` reads from a file: bpe's or gpt2's (`path` may be
  // empty for gpt2); ConfigError for the kinds whose vocabulary comes from the data.
  static Tokenizer from_file(Kind kind, const std::string& path);
  // {"kind": "char"|"byte", "symbols": [...]}, {"kind": "word", "words": [...]} or {"kind": "bpe",
  // "merges": [[l, r], ...]}, {"kind": "gpt2", "tokens": [...], "merges": ["l r", ...]}, plus "specials":
  // [...] when there are any and "end_of_text": true with the end-of-text id (checkpoints, export metadata);
  // from_json throws IoError/json exceptions on a malformed object.
  nlohmann::json to_json() const;
  static Tokenizer from_json(const nlohmann::json& j);

  // A copy whose ids [0, S) are `specials` (distinct, non-empty) and whose base ids are shifted by S;
  // replaces any specials this tokenizer had.
  Tokenizer with_specials(std::vector<std::string> specials) const;
  const std::vector<std::string>& specials() const { return specials_; }
  int32_t special_id(const std::string& name) const;  // its id, or -1 when not a special here
  bool is_special(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(specials_.size()); }

  // A copy with the end-of-text id (the last id, or a gpt2 vocabulary's own "<|endoftext|>"); unchanged
  // when it has one.
  Tokenizer with_end_of_text() const;
  Tokenizer without_end_of_text() const;
  bool has_end_of_text() const { return end_of_text_; }
  int32_t end_of_text_id() const;

  Kind kind() const { return kind_; }
  std::string kind_name() const;
  int64_t size() const;  // specials + base vocabulary (+ 1 with the end-of-text id)
  const std::vector<uint32_t>& symbols() const { return symbols_; }  // char/byte
  const std::vector<std::string>& words() const { return words_; }   // word
  const BpeTokenizer* bpe() const { return bpe_.get(); }             // bpe (null otherwise)
  const Gpt2Bpe* gpt2() const { return gpt2_.get(); }                // gpt2 (null otherwise)

  // Throws IoError naming `source` and the offset of a symbol (or word) outside the vocabulary,
  // unless "<unk>" is a special.
  std::vector<int32_t> encode(const std::string& text, const std::string& source) const;
  // Appends the ids of `text`, a piece of a longer text that starts `byte_offset` bytes and
  // `char_offset` characters into `source` (errors count from there). The pieces' ids concatenate to
  // the whole text's when each cut is at a character boundary (char), anywhere (byte), at a
  // pretokenization boundary (bpe: pretokenize_cut, gpt2: gpt2_pretokenize_cut) or at whitespace (word).
  // bpe_cache: chunks a BPE tokenizer encoded before (a streaming encoder's, one per thread).
  void encode_piece(std::string_view text, const std::string& source, uint64_t byte_offset,
                    uint64_t char_offset, std::vector<int32_t>& out,
                    BpeChunkCache* bpe_cache = nullptr) const;
  // A text a user gives a trained model (a prompt, an attention or fill-mask text) with marked tokens in
  // it: each occurrence of a marker's text is the marker's id, and the pieces between are encoded where
  // they stand, so an error counts from the text's start (a char vocabulary's offsets; a word
  // vocabulary's word index from the last marker); a char or word vocabulary's UTF-8 is checked whole
  // first. A marker whose id is -1 is text like any other. The earliest occurrence is read first (the
  // first listed on a tie). `found`, when given, gets (the marker's index, its token index) of each one
  // read. Corpora are never read this way: encode() keeps every marker's characters as text.
  struct Marker {
    std::string text;
    int32_t id = -1;
  };
  std::vector<int32_t> encode_marked(const std::string& text, const std::vector<Marker>& markers,
                                     const std::string& source,
                                     std::vector<std::pair<size_t, int64_t>>* found = nullptr) const;
  // The words (word) or characters (char) of `text` that are outside the vocabulary, each once, in the
  // order they first appear: what encode reads as <unk>. Empty for byte, bpe and gpt2, which encode
  // every text.
  std::vector<std::string> unknown_symbols(const std::string& text, const std::string& source) const;
  // Specials other than <unk> are skipped; <unk> reads "<unk>", the end-of-text id kEndOfText. Word:
  // detokenized (see Kind::Word). An id outside [0, size()) is no token of this vocabulary: tfm::Error
  // naming it and the vocabulary's size (a model and a tokenizer of different runs), never dropped.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(int32_t id) const;  // one token's text ("" for a skipped special)
  // Each token's text, specials other than <unk> skipped: the words of a word tokenizer (for BLEU). Ids
  // outside the vocabulary throw as in decode.
  std::vector<std::string> decode_tokens(const std::vector<int32_t>& ids) const;

 private:
  int32_t base_id(const std::string& word) const;  // word -> base id, -1 when unknown
  int32_t symbol_id(uint32_t cp) const;            // char: code point -> base id, -1 when unknown
  Kind kind_ = Kind::Char;
  std::vector<uint32_t> symbols_;
  std::array<int32_t, 128> ascii_ids_{};     // char: symbol_id of each ASCII code point, built once
  std::vector<std::string> words_;           // Kind::Word only, in id order
  std::vector<int32_t> word_order_;          // base ids sorted by word, for lookup
  std::shared_ptr<const BpeTokenizer> bpe_;  // Kind::Bpe only
  std::shared_ptr<const Gpt2Bpe> gpt2_;      // Kind::Gpt2 only
  std::vector<std::string> specials_;
  int32_t unk_ = -1;          // the id of "<unk>", -1 without it
  bool end_of_text_ = false;  // the last id is kEndOfText
};

// data.tokenizer's spellings of Tokenizer::Kind: "char", "byte", "bpe", "word", "gpt2".
template <>
const std::vector<std::string>& enum_names<Tokenizer::Kind>();

// The vocabularies of a trained run (checkpoints keep them): the input side's and, for an
// encoder-decoder, the target side's.
struct Vocabulary {
  Tokenizer tokenizer;                        // the input (seq2seq: source) side's
  std::optional<Tokenizer> target_tokenizer;  // seq2seq only
};

}  // namespace tfm
