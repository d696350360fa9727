// GPT-2's tokenizer (data.tokenizer "gpt2"): the pre-split on tricky strings, ids identical to
// js-tiktoken's gpt2 encoding (tests/data/gpt2_tiktoken_cases.json, written by
// scripts/dev/check_tiktoken.mjs fixture), the safe cuts of the streaming encoder, and the loaders of every
// file format with their errors.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/data/bpe.h"
#include "tfm/data/gpt2_tokenizer.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace {

using tfm::Gpt2Bpe;
using tfm::Tokenizer;
using tfm_test::TempDir;

const Tokenizer& gpt2_test_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_gpt2("");
  return tok;
}

std::vector<std::string> gpt2_test_pieces(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : tfm::gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

void gpt2_test_write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A tiny byte-level vocabulary: the 256 bytes, then "Ġt", "he", "Ġthe" made by three merges.
std::string gpt2_test_vocab_json(bool with_gap = false, bool without_byte = false) {
  nlohmann::json v = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    if (without_byte && b == 'q') continue;
    v[tfm::gpt2_token_text(std::string(1, static_cast<char>(b)))] = id++;
  }
  if (with_gap) ++id;
  for (const char* t : {"\xc4\xa0t", "he", "\xc4\xa0the", "<|endoftext|>"}) v[t] = id++;
  return v.dump();
}
const char* const kGpt2TestMerges = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n";

}  // namespace

TEST_CASE("gpt2 pretokenize: the regex's pieces on tricky strings", "[gpt2][tokenizer]") {
  using V = std::vector<std::string>;
  CHECK(gpt2_test_pieces("Hello world") == V{"Hello", " world"});
  CHECK(gpt2_test_pieces("a  b") == V{"a", " ", " b"});  // a space run leaves its last space to the word
  CHECK(gpt2_test_pieces("a\t\tb") == V{"a", "\t", "\t", "b"});
  CHECK(gpt2_test_pieces("\n\nb") == V{"\n", "\n", "b"});
  CHECK(gpt2_test_pieces("end   ") == V{"end", "   "});  // at the end: the whole run
  CHECK(gpt2_test_pieces("I'm don't") == V{"I", "'m", " don", "'t"});
  CHECK(gpt2_test_pieces("x''s !'s") == V{"x", "''", "s", " !'", "s"});  // a symbol run takes apostrophes
  CHECK(gpt2_test_pieces("'LL 'll") == V{"'", "LL", " '", "ll"});        // contractions are lowercase only
  CHECK(gpt2_test_pieces(" 123abc") == V{" 123", "abc"});
  CHECK(gpt2_test_pieces("e\xcc\x81") == V{"e", "\xcc\x81"});  // U+0301 is a mark, not \p{L}
  CHECK(gpt2_test_pieces("\xe4\xb8\xad\xe6\x96\x87\xef\xbc\x8c") ==
        V{"中文", "，"});                                                 // CJK letters, then punctuation
  CHECK(gpt2_test_pieces("\xd9\xa1\xd9\xa2 \xc2\xbd") == V{"١٢", " ½"});  // Arabic-Indic digits, ½ are \p{N}
  // U+00A0 is \s, and not the space of " ?\p{L}+": the run keeps its last one, which stands alone.
  CHECK(gpt2_test_pieces("a\xc2\xa0\xc2\xa0"
                         "b") == V{"a", "\xc2\xa0", "\xc2\xa0", "b"});
  CHECK(gpt2_test_pieces("\xff\xfe x") == V{"\xff\xfe", " x"});  // invalid bytes: symbols
  std::string joined;
  for (const std::string& p : gpt2_test_pieces("mixed \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd 12\n\n x"))
    joined += p;
  CHECK(joined == "mixed \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd 12\n\n x");
}

TEST_CASE("gpt2 encode: ids identical to js-tiktoken's gpt2 on tricky strings, and decode gives them back",
          "[gpt2][tokenizer]") {
  const Tokenizer& tok = gpt2_test_tokenizer();
  REQUIRE(tok.size() == 50257);
  REQUIRE(tok.kind_name() == "gpt2");
  const std::string fixture =
      tfm::read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/gpt2_tiktoken_cases.json", 1 << 20);
  const nlohmann::json cases = nlohmann::json::parse(fixture).at("cases");
  REQUIRE(cases.size() >= 30);
  for (const nlohmann::json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    INFO(text);
    const std::vector<int32_t> ids = tok.encode(text, "case");
    CHECK(ids == c.at("ids").get<std::vector<int32_t>>());
    CHECK(tok.decode(ids) == text);
  }
  // The streaming encoder's per-thread cache gives the same ids, on first and repeated use.
  tfm::BpeChunkCache cache;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int32_t> ids;
    tok.encode_piece("Hello world, hello world", "cached", 0, 0, ids, &cache);
    CHECK(ids == tok.encode("Hello world, hello world", "plain"));
  }
}

TEST_CASE("gpt2 end of text: <|endoftext|> is 50256, never produced by text, kept through JSON",
          "[gpt2][tokenizer]") {
  const Tokenizer& tok = gpt2_test_tokenizer();
  const Tokenizer eot = tok.with_end_of_text();
  CHECK(eot.size() == 50257);  // the vocabulary's own id, no extra one
  CHECK(eot.end_of_text_id() == 50256);
  CHECK(tok.end_of_text_id() == -1);
  CHECK(eot.decode(std::vector<int32_t>{15496, 50256, 995}) == "Hello<|endoftext|> world");
  const std::vector<int32_t> ids = eot.encode("<|endoftext|>", "text");
  CHECK(std::find(ids.begin(), ids.end(), 50256) == ids.end());
  CHECK(tok.gpt2()->is_control(50256));
  CHECK_FALSE(tok.gpt2()->is_control(995));
  const Tokenizer back = Tokenizer::from_json(eot.to_json());
  CHECK(back.kind() == Tokenizer::Kind::Gpt2);
  CHECK(back.end_of_text_id() == 50256);
  CHECK(back.encode("naïve café", "x") == eot.encode("naïve café", "x"));
  CHECK(back.to_json() == eot.to_json());
}

TEST_CASE("gpt2 pretokenize_cut: the pieces of both sides are the whole text's", "[gpt2][tokenizer]") {
  const std::vector<std::string> texts = {
      "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.",
      "int main() {\n  return f(x, y);\n}\n",
      "a\n\xc2\xa0\xc2\xa0"
      "b c\n\xc2\xa0x",
      "x\n'sa,b.c\n\nd)e'f 1,2 3\n4",
  };
  for (const std::string& t : texts) {
    const std::vector<std::string> whole = gpt2_test_pieces(t);
    int cuts = 0;
    for (size_t at = 0; at <= t.size(); ++at) {
      const size_t p = tfm::gpt2_pretokenize_cut(t, at);
      if (p == 0) continue;
      REQUIRE(p <= at);
      std::vector<std::string> both = gpt2_test_pieces(t.substr(0, p));
      for (const std::string& s : gpt2_test_pieces(t.substr(p))) both.push_back(s);
      INFO(t << " cut at " << p);
      CHECK(both == whole);
      ++cuts;
    }
    // The text with U+00A0 beside its newlines has no safe cut: a newline there may join a whitespace run.
    CHECK((cuts > 0) == (t.find("\xc2\xa0") == std::string::npos));
  }
}

TEST_CASE("gpt2 loaders: encoder.json + vocab.bpe, vocab.json + merges.txt, tokenizer.json agree",
          "[gpt2][tokenizer]") {
  TempDir tmp("gpt2_loaders");
  const std::string openai = tmp.file("openai"), hf = tmp.file("hf"), fast = tmp.file("fast");
  for (const std::string& d : {openai, hf, fast}) std::filesystem::create_directories(d);
  gpt2_test_write(openai + "/encoder.json", gpt2_test_vocab_json());
  gpt2_test_write(openai + "/vocab.bpe", kGpt2TestMerges);
  gpt2_test_write(hf + "/vocab.json", gpt2_test_vocab_json());
  gpt2_test_write(hf + "/merges.txt", kGpt2TestMerges);
  nlohmann::json tj = {
      {"version", "1.0"},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", nlohmann::json::parse(gpt2_test_vocab_json())},
        {"merges", {"\xc4\xa0 t", nlohmann::json::array({"h", "e"}), "\xc4\xa0t he"}}}}};
  gpt2_test_write(fast + "/tokenizer.json", tj.dump());

  const std::string text = "the theme, then the end";
  const Tokenizer a = Tokenizer::load_gpt2(openai);
  const std::vector<int32_t> ids = a.encode(text, "t");
  CHECK(ids.size() < text.size());
  CHECK(std::find(ids.begin(), ids.end(), 258) != ids.end());  // " the" in one token
  CHECK(a.decode(ids) == text);
  CHECK(a.size() == 260);
  CHECK(a.with_end_of_text().end_of_text_id() == 259);
  for (const std::string& path : {openai + "/vocab.bpe", openai + "/encoder.json", hf, hf + "/merges.txt",
                                  hf + "/vocab.json", fast, fast + "/tokenizer.json"}) {
    INFO(path);
    CHECK(Tokenizer::load_gpt2(path).encode(text, "t") == ids);
  }
}

TEST_CASE("gpt2 loaders: a bad file is refused, naming the file and the place", "[gpt2][tokenizer]") {
  TempDir tmp("gpt2_bad");
  const auto refuse = [&](const std::string& path, const std::string& what) {
    INFO(path << " -> " << what);
    CHECK_THROWS_WITH(Tokenizer::load_gpt2(path),
                      Catch::Contains("data.tokenizer_path: ") && Catch::Contains(what));
  };
  const auto pair = [&](const std::string& name, const std::string& vocab, const std::string& merges) {
    const std::string d = tmp.file(name);
    std::filesystem::create_directories(d);
    gpt2_test_write(d + "/encoder.json", vocab);
    gpt2_test_write(d + "/vocab.bpe", merges);
    return d;
  };
  refuse(tmp.file("missing"), "missing: no such file or directory");
  refuse(tmp.path, "a directory without GPT-2's encoder.json + vocab.bpe");
  refuse(pair("line", gpt2_test_vocab_json(), "#version: 0.2\n\xc4\xa0 t\nhe\n"),
         "vocab.bpe:3: expected a merge");
  refuse(pair("unknown", gpt2_test_vocab_json(), "#version: 0.2\n\xc4\xa0 t\nh x\n"),
         "vocab.bpe:3: merge 1 (\"h x\"): the token it makes is not in the vocabulary");
  refuse(pair("gap", gpt2_test_vocab_json(true), kGpt2TestMerges), "id 256 has no token");
  refuse(pair("byte", gpt2_test_vocab_json(false, true), kGpt2TestMerges), "byte 113 (\"q\") has none");
  refuse(pair("notjson", "{\"a\": 0,", kGpt2TestMerges), "encoder.json");
  refuse(pair("strid", "{\"a\": \"zero\"}", kGpt2TestMerges), "the id of token \"a\" must be an integer");
  const std::string lone = tmp.file("lone");
  std::filesystem::create_directories(lone);
  gpt2_test_write(lone + "/vocab.bpe", kGpt2TestMerges);
  refuse(lone + "/vocab.bpe", "needs its partner file, encoder.json or vocab.json");
  // tfm's own BPE file (tfm tokenizer train) is named as such.
  const std::string own = tmp.file("own.json");
  BpeTokenizer::train("the theme of the thesis", 260).save(own);
  refuse(own, "own.json: a tokenizer of tfm's own (tfm tokenizer train), read with data.tokenizer \"bpe\"");
  const auto tokenizer_json = [&](const std::string& name, const nlohmann::json& j) {
    const std::string p = tmp.file(name + ".json");
    gpt2_test_write(p, j.dump());
    return p;
  };
  refuse(tokenizer_json("wordpiece", {{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}}),
         "wordpiece.json: model.type is \"WordPiece\"; tfm reads byte-level BPE");
  refuse(
      tokenizer_json("metaspace", {{"pre_tokenizer", {{"type", "Metaspace"}}}, {"model", {{"type", "BPE"}}}}),
      "metaspace.json: pre_tokenizer is \"Metaspace\"");
  refuse(tokenizer_json("split", {{"pre_tokenizer", {{"type", "Sequence"}}}, {"model", {{"type", "BPE"}}}}),
         "pre_tokenizer is \"Sequence\"");
  // tfm's own BPE file format read as "bpe" points to "gpt2" for these files.
  CHECK_THROWS_WITH(
      Tokenizer::load_bpe(pair("asbpe", gpt2_test_vocab_json(), kGpt2TestMerges) + "/encoder.json"),
      Catch::Contains("data.tokenizer = \"gpt2\""));
}
