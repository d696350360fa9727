// GPT-2's tokenizer (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", 2.2):
// byte-level BPE over the pieces of a regex pre-split, with a vocabulary file that names every token.
//
// Encoding, exactly as OpenAI's encoder.py and tiktoken's "gpt2":
//   1. pre-split (gpt2_pretokenize) with the regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      implemented by hand over UTF-8 code points with Unicode's letter and number classes;
//   2. each piece's bytes -> the byte tokens (every one of the 256 bytes has one);
//   3. merges by rank: the adjacent pair of lowest rank is joined everywhere in the piece (left to right),
//      until no adjacent pair has a rank.
// Pieces already encoded are looked up in a per-word cache (BpeChunkCache), so a corpus costs a hash lookup
// per repeated word.
//
// Files (Gpt2Bpe::load): OpenAI's encoder.json + vocab.bpe, Hugging Face's vocab.json + merges.txt, or a
// Hugging Face tokenizer.json (model.type "BPE", byte-level pre-tokenizer). Tokens are written in GPT-2's
// printable form of bytes (gpt2_byte_to_code_point: byte 0x20 is "Ġ"); a token that is not a byte string
// reachable by merges (like "<|endoftext|>") is in the vocabulary but never produced by encoding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tfm/data/bpe.h"

namespace tfm {

// GPT-2's bytes_to_unicode: each byte as a printable code point (printable Latin-1 bytes as themselves,
// the others as U+0100 + n in byte order), so a token's bytes are a readable JSON string.
uint32_t gpt2_byte_to_code_point(uint8_t byte);
// A byte string in that form ("Ġthe" for " the").
std::string gpt2_token_text(std::string_view bytes);

// The pieces of GPT-2's pre-split (see above). \s is Unicode's White_Space (U+0009-U+000D, U+0020, U+0085,
// U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), as in tiktoken's Rust regex. A
// byte that is not valid UTF-8 is a one-byte character of neither class (as U+FFFD would be), so every
// byte string splits and encodes. Concatenating the pieces gives back `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);
// The last position p <= at (2 <= p < text.size()) where text may be cut without changing its pieces, 0
// when there is none (see pretokenize_cut): a newline between two printable ASCII bytes (after it), or an
// ASCII letter or digit followed by an ASCII symbol other than the apostrophe.
size_t gpt2_pretokenize_cut(std::string_view text, size_t at);

class Gpt2Bpe {
 public:
  using TextMerge = std::pair<std::string, std::string>;  // two tokens in GPT-2's printable form

  // `tokens`: id -> token in GPT-2's printable form, distinct; `merges` by rank. IoError naming `what` when
  // a byte has no token, a token is not in the printable form, or a merge names a token (or makes one)
  // outside the vocabulary.
  Gpt2Bpe(std::vector<std::string> tokens, const std::vector<TextMerge>& merges, const std::string& what);

  // The files at `path`: a directory holding encoder.json + vocab.bpe, vocab.json + merges.txt or
  // tokenizer.json, or one of those files (its partner is looked for beside it). IoError naming the file
  // and the place on a bad file.
  static Gpt2Bpe load(const std::string& path);
  // GPT-2's own files, shipped with tfm (data/tokenizers/gpt2, installed to share/tfm/tokenizers/gpt2).
  static Gpt2Bpe load_gpt2();
  // Where GPT-2's files are: PREFIX/share/tfm/tokenizers/gpt2 of an installed binary's prefix, else of
  // the installed package a program of another project linked (platform::data_directories), else the
  // source tree this was built from, else data/tokenizers/gpt2 of the working directory. IoError listing
  // the places when none has them.
  static std::string gpt2_directory();

  // {"tokens": [...], "merges": ["a b", ...]} (vocab.bpe's lines), and back.
  nlohmann::json to_json() const;
  static Gpt2Bpe from_json(const nlohmann::json& j, const std::string& what);

  // Appends the ids of `text`; `cache` (one per thread) keeps pieces across calls, null: one per call.
  void encode(std::string_view text, std::vector<int32_t>& out, BpeChunkCache* cache = nullptr) const;
  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& tokens() const { return tokens_; }  // printable form, by id
  const std::vector<TextMerge>& merges() const { return merges_; }
  // The id of "<|endoftext|>", -1 when the vocabulary has none.
  int32_t end_of_text() const { return end_of_text_; }
  // Ids that encoding never produces (not a byte or a merge's result), e.g. "<|endoftext|>": control
  // tokens for llama.cpp.
  bool is_control(int32_t id) const { return !reachable_[static_cast<size_t>(id)]; }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;  // id -> printable form
  std::vector<std::string> bytes_;   // id -> bytes
  std::vector<TextMerge> merges_;
  std::vector<bool> reachable_;
  int32_t byte_ids_[256] = {};
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> ranks_;  // (left << 32 | right) -> (rank, id)
  int32_t end_of_text_ = -1;
};

}  // namespace tfm
