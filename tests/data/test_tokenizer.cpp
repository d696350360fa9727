// Tokenizers, UTF-8 decoding, the train/validation split and the batch sampler.

#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <string>

#include "cli_run.h"
#include "tfm/data/dataset.h"
#include "tfm/engine/error.h"

using namespace tfm;

namespace {
// NAME in a scratch directory of this process, its token caches beside it (.tfm-cache), all removed
// when the test binary exits.
std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = tfm_test::scratch_file("data", name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}
}  // namespace

TEST_CASE("data: UTF-8 decodes to code points, Chinese included, and round-trips", "[data]") {
  const std::string text = "héllo, 世界! 🙂\n";
  const auto cps = decode_utf8(text, "t");
  REQUIRE(cps.size() == 13);
  CHECK(cps[1] == 0xE9);
  CHECK(cps[7] == 0x4E16);
  CHECK(cps[8] == 0x754C);
  CHECK(cps[11] == 0x1F642);
  std::string back;
  for (uint32_t cp : cps) append_utf8(back, cp);
  CHECK(back == text);
  // A text file's contents as corpora are read: the byte order mark at the start and each CR of a CRLF
  // dropped, nothing else.
  CHECK(text_file_contents("\xEF\xBB\xBF"
                           "a\r\nb\rc\r\n\r\n") == "a\nb\rc\n\n");
  CHECK(text_file_contents("x\xEF\xBB\xBF\r") == "x\xEF\xBB\xBF\r");
  CHECK(text_file_contents("").empty());
}

TEST_CASE("data: invalid UTF-8 names the file and the byte offset", "[data]") {
  struct Case {
    std::string bytes;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {"ab\xFF", 2},            // never valid
      {"abc\xC3", 3},           // truncated
      {"a\xC3(", 2},            // bad continuation: reported at the bad byte
      {"\xC0\xAF", 0},          // overlong '/'
      {"xx\xE0\x80\xAF", 3},    // overlong 3-byte
      {"\xED\xA0\x80", 1},      // surrogate
      {"\xF4\x90\x80\x80", 1},  // above U+10FFFF
      {"ok\x80", 2},            // lone continuation byte
  };
  for (const auto& c : cases) {
    INFO(c.offset);
    CHECK_THROWS_AS(decode_utf8(c.bytes, "bad.txt"), IoError);
    CHECK_THROWS_WITH(
        decode_utf8(c.bytes, "bad.txt"),
        Catch::StartsWith("bad.txt: invalid UTF-8 at byte offset " + std::to_string(c.offset) + " "));
  }
  const std::string path = write_temp("invalid.txt", std::string(1000, 'a') + "\xFE" + "bc");
  CHECK_THROWS_WITH(load_dataset(path, "char", 0.1, 8), Catch::Contains("byte offset 1000"));
  // The byte tokenizer reads anything.
  CHECK(load_dataset(path, "byte", 0.1, 8).tokenizer.size() == 256);
}

TEST_CASE("data: the char vocabulary is the sorted set of code points", "[data]") {
  const std::string text = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。 the cat sat on the mat\n";
  const Tokenizer tok = Tokenizer::from_text(Tokenizer::Kind::Char, text, "poem");
  const auto cps = decode_utf8(text, "poem");
  const std::set<uint32_t> distinct(cps.begin(), cps.end());
  REQUIRE(tok.size() == static_cast<int64_t>(distinct.size()));
  CHECK(std::vector<uint32_t>(distinct.begin(), distinct.end()) == tok.symbols());
  const auto ids = tok.encode(text, "poem");
  CHECK(ids.size() == cps.size());
  CHECK(tok.decode(ids) == text);
  CHECK_THROWS_WITH(tok.encode("dog", "prompt"), Catch::StartsWith("prompt: character 'd'"));
  // Every code point is looked up: ASCII in a table, the others in the sorted symbols, between two
  // symbols and past the largest included; with "<unk>" the unknown ones encode to it.
  const Tokenizer wide = Tokenizer::from_text(Tokenizer::Kind::Char, "a\u00e9\u4e16\U0001F642", "wide");
  CHECK(wide.encode("\U0001F642a\u4e16\u00e9", "p") == std::vector<int32_t>{3, 0, 2, 1});
  CHECK_THROWS_WITH(wide.encode("a\u00e8", "p"),
                    Catch::Contains("at character 1 (counted from 0) is not in the vocabulary"));
  CHECK_THROWS_WITH(wide.encode("\U0001F643", "p"),
                    Catch::Contains("at character 0 (counted from 0) is not in the vocabulary"));
  CHECK_THROWS_WITH(wide.encode("ab", "p"), Catch::StartsWith("p: character 'b' (U+0062) at character 1"));
  const Tokenizer with_unk = wide.with_specials({"<unk>"});
  CHECK(with_unk.encode("b\U0001F643\u00e9a", "p") == std::vector<int32_t>{0, 0, 2, 1});
  // What encodes to <unk>, each once, in order of first appearance.
  CHECK(with_unk.unknown_symbols("b\U0001F643\u00e9ab", "p") == std::vector<std::string>{"b", "\U0001F643"});
  CHECK(with_unk.unknown_symbols("a\u00e9", "p").empty());
  const Tokenizer words =
      Tokenizer::from_text(Tokenizer::Kind::Word, "the cat sat .", "w").with_specials({"<unk>"});
  CHECK(words.unknown_symbols("the dog sat on the dog .", "p") == std::vector<std::string>{"dog", "on"});
  CHECK(Tokenizer::from_text(Tokenizer::Kind::Byte, "x", "b").unknown_symbols("anything", "p").empty());
}

TEST_CASE("data: decode refuses an id outside the vocabulary by name, and skips specials as documented",
          "[data]") {
  const Tokenizer chars = Tokenizer::from_text(Tokenizer::Kind::Char, "abc", "t");
  CHECK_THROWS_AS(chars.decode(std::vector<int32_t>{0, 7}), Error);
  CHECK_THROWS_WITH(
      chars.decode(std::vector<int32_t>{0, 7}),
      "Tokenizer::decode: token id 7 at position 1 is outside the char vocabulary's ids [0, 3)");
  CHECK_THROWS_WITH(
      chars.decode(std::vector<int32_t>{-1}),
      "Tokenizer::decode: token id -1 at position 0 is outside the char vocabulary's ids [0, 3)");
  CHECK_THROWS_WITH(chars.decode(3),
                    "Tokenizer::decode: token id 3 is outside the char vocabulary's ids [0, 3)");
  const Tokenizer words =
      Tokenizer::from_text(Tokenizer::Kind::Word, "go .", "w").with_specials({"<pad>", "<unk>"});
  CHECK_THROWS_WITH(
      words.decode_tokens({2, 4}),
      "Tokenizer::decode: token id 4 at position 1 is outside the word vocabulary's ids [0, 4)");
  // Specials are no text: skipped on purpose, <unk> shown.
  const std::vector<int32_t> go = words.encode("go .", "p");
  REQUIRE(go.size() == 2);
  CHECK(words.decode({0, go[0], 1, go[1]}) == "go <unk>.");
  CHECK(words.decode_tokens({0, go[0], 1}) == std::vector<std::string>{"go", "<unk>"});
  CHECK(chars.decode(std::vector<int32_t>{0, 1, 2}) == "abc");
}

TEST_CASE("data: split sizes as docs/architecture.md, and clear errors for bad files", "[data]") {
  std::string text;
  for (int i = 0; i < 1003; ++i) text += static_cast<char>('a' + i % 7);
  const std::string path = write_temp("split.txt", text);
  const Dataset d = load_dataset(path, "char", 0.1, 16);
  CHECK(d.train.size() == 902);  // int(1003 * 0.9)
  CHECK(d.val.size() == 101);
  CHECK(d.tokenizer.size() == 7);

  CHECK_THROWS_WITH(load_dataset("/nonexistent/x.txt", "char", 0.1, 16),
                    Catch::StartsWith("/nonexistent/x.txt: cannot open"));
  CHECK_THROWS_WITH(load_dataset(write_temp("empty.txt", ""), "char", 0.1, 16), Catch::Contains("empty"));
  CHECK_THROWS_WITH(load_dataset(path, "char", 0.1, 100),
                    Catch::Contains("validation split has 101 tokens") && Catch::Contains("102"));
}

TEST_CASE("data: batches are seeded windows with targets shifted by one", "[data]") {
  std::vector<int32_t> tokens(500);
  for (int i = 0; i < 500; ++i) tokens[i] = i;
  BatchSampler a(7), b(7);
  std::vector<int32_t> x, y, x2, y2;
  a.sample(tokens, 4, 10, x, y);
  b.sample(tokens, 2, 10, x2, y2);  // two half batches draw the same offsets as one batch
  std::vector<int32_t> x3, y3;
  b.sample(tokens, 2, 10, x3, y3);
  x2.insert(x2.end(), x3.begin(), x3.end());
  CHECK(x == x2);
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] + 1);
  for (int r = 0; r < 4; ++r) CHECK(x[r * 10] + 10 < 500 - 0);  // within [0, n - T - 1)
}

TEST_CASE("data: encode_marked reads each marker as its id and the text between where it stands", "[data]") {
  const Tokenizer chars = Tokenizer::from_text(Tokenizer::Kind::Char, "ab\u00e9 [MASK]<|endoftext|>", "t");
  const int32_t a = chars.encode("a", "t")[0], b = chars.encode("b", "t")[0];
  const std::vector<Tokenizer::Marker> markers = {{"[MASK]", 90}, {"<|endoftext|>", 91}};
  std::vector<std::pair<size_t, int64_t>> found;
  CHECK(chars.encode_marked("a[MASK]b<|endoftext|>[MASK]", markers, "t", &found) ==
        std::vector<int32_t>{a, 90, b, 91, 90});
  CHECK(found == std::vector<std::pair<size_t, int64_t>>{{0, 1}, {1, 3}, {0, 4}});
  // A marker of id -1 is text; no marker, encode's ids.
  CHECK(chars.encode_marked("a[MASK]", {{"[MASK]", -1}}, "t") == chars.encode("a[MASK]", "t"));
  CHECK(chars.encode_marked("ab", {}, "t") == chars.encode("ab", "t"));
  // Offsets count from the text's start, in characters; UTF-8 is checked whole, so a character cut short
  // before a marker is the byte after it.
  CHECK_THROWS_WITH(chars.encode_marked("\u00e9[MASK]z", markers, "--text"),
                    Catch::Contains("at character 7 (counted from 0)"));
  CHECK_THROWS_WITH(chars.encode_marked("a\xc3[MASK]", markers, "--text"),
                    Catch::Contains("invalid UTF-8 at byte offset 2"));
}
