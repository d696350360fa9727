// Byte-level BPE: exact round trips of any bytes, the split into chunks, the merge order training
// must find, save/load, and a catalogue of malformed tokenizer files.

#include <catch2/catch.hpp>
#include <random>
#include <unordered_map>

#include "cli_run.h"
#include "tfm/data/bpe.h"
#include "tfm/engine/error.h"

using namespace tfm;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

const std::string kText =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
    "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n\n"
    "All:\nWe know't, we know't.\n\n"
    "First Citizen:\nLet us kill him, and we'll have corn at our own price.\nIs't a verdict?\n\n";

const std::string kChinese = "你好，世界";  // "Hello, world"
const std::string kEmoji = "hi 👋🏽! ❤️ 🇫🇷";

// /tmp/tfm_test_bpe_<pid>_files/NAME, removed when the test binary exits.
std::string temp_path(const std::string& name) {
  return tfm_test::scratch_file("bpe", name);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

BpeTokenizer parse(const std::string& text) {
  return BpeTokenizer::parse(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "tok.json");
}

std::vector<std::string> chunks(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view c : pretokenize(text)) out.emplace_back(c);
  return out;
}

}  // namespace

TEST_CASE("bpe: pretokenize splits like GPT-2 and loses nothing", "[bpe]") {
  using V = std::vector<std::string>;
  REQUIRE(chunks("Hello world's  end\n\nFirst 42x").size() == 10);
  REQUIRE(chunks("Hello world's  end\n\nFirst 42x") ==
          V{"Hello", " world", "'s", " ", " end", "\n", "\n", "First", " 42", "x"});
  REQUIRE(chunks("we'll, they're") == V{"we", "'ll", ",", " they", "'re"});
  REQUIRE(chunks("trailing   ") == V{"trailing", "   "});
  REQUIRE(chunks(kChinese) == V{"你好", "，", "世界"});
  REQUIRE(chunks("hi 👋🏽!") == V{"hi", " 👋🏽!"});
  REQUIRE(chunks("").empty());

  // A long run is cut into chunks of at most kBpeMaxChunkBytes, on character boundaries.
  const auto long_run = chunks(repeat("a", 1000));
  REQUIRE(long_run.size() == 4);
  REQUIRE(long_run[0].size() == kBpeMaxChunkBytes);
  for (const auto& c : chunks(repeat("世", 200))) REQUIRE(c.size() % 3 == 0);

  // Any bytes: the chunks are non-empty and concatenate back to the input.
  std::mt19937 gen(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(gen() % 300, '\0');
    for (char& c : s) c = static_cast<char>(gen() % 256);
    std::string joined;
    for (std::string_view c : pretokenize(s)) {
      REQUIRE_FALSE(c.empty());
      REQUIRE(c.size() <= kBpeMaxChunkBytes);
      joined += c;
    }
    REQUIRE(joined == s);
  }
}

TEST_CASE("bpe: training merges the most frequent pair first, ties to the smaller ids", "[bpe]") {
  // Pairs: (a,b) x5, (' ',a) x4, (' ',c) x2, (c,d) x2.
  const BpeTokenizer tok = BpeTokenizer::train("ab ab ab ab ab cd cd", 1000);
  using M = BpeTokenizer::Merge;
  REQUIRE(tok.merges() == std::vector<M>{{'a', 'b'}, {' ', 256}, {' ', 'c'}, {258, 'd'}});
  // Stops when no pair occurs twice, below the requested size.
  REQUIRE(tok.vocab_size() == 260);
  REQUIRE(tok.token_bytes(257) == " ab");
  REQUIRE(tok.token_bytes(259) == " cd");
  REQUIRE(tok.encode("ab ab cd") == std::vector<int32_t>{256, 257, 259});

  // The requested size is respected.
  REQUIRE(BpeTokenizer::train("ab ab ab ab ab cd cd", 258).merges() ==
          std::vector<M>{{'a', 'b'}, {' ', 256}});
  REQUIRE(BpeTokenizer::train("ab ab ab", 256).vocab_size() == 256);
}

TEST_CASE("bpe: a text given in pieces cut anywhere counts its chunks as the whole text", "[bpe]") {
  // Over 1 MiB, so that the counter counts and cuts as it goes: a stretch with no boundary to cut at
  // (Chinese without a newline) waits whole, and emoji are cut in the middle of their bytes.
  const std::string text =
      repeat(kText, 4000) + repeat(kChinese, 100000) + repeat(kEmoji + "\n" + kText, 2000) + "  tail";
  REQUIRE(text.size() > (size_t{3} << 20));
  std::unordered_map<std::string, int64_t> whole;
  for (const std::string& c : chunks(text)) ++whole[c];
  std::mt19937 rng(7);
  for (const size_t largest : {size_t{1}, size_t{4096}, size_t{3} << 20}) {
    BpeChunkCounter counter;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % largest);
      counter.add(std::string_view(text).substr(at, n));
      at += n;
    }
    CHECK(counter.bytes() == text.size());
    CHECK(counter.held_bytes() < (size_t{1} << 20) + largest);  // counted as it went, not held whole
    const auto counts = counter.finish();
    CHECK(counts == whole);
    if (largest == 4096)
      CHECK(BpeTokenizer::train(counts, 400).merges() == BpeTokenizer::train(text, 400).merges());
  }
}

TEST_CASE("bpe: a trained tokenizer compresses and round-trips its text", "[bpe]") {
  const std::string text = repeat(kText, 20) + repeat(kChinese, 20);
  const BpeTokenizer tok = BpeTokenizer::train(text, 400);
  REQUIRE(tok.vocab_size() > 300);
  const auto ids = tok.encode(text);
  REQUIRE(tok.decode(ids) == text);
  REQUIRE(ids.size() * 3 < text.size());  // well under one token per byte
  const auto zh = tok.encode(kChinese);
  REQUIRE(zh.size() < kChinese.size());
  REQUIRE(tok.decode(zh) == kChinese);
  // Unseen text still round-trips.
  const std::string unseen = "Citizens of Rome, hear the verdict!";
  REQUIRE(tok.decode(tok.encode(unseen)) == unseen);
  REQUIRE(tok.encode(unseen).size() < unseen.size());
}

TEST_CASE("bpe: any byte string round-trips", "[bpe]") {
  const BpeTokenizer trained = BpeTokenizer::train(repeat(kText, 5) + repeat(kChinese + kEmoji, 5), 350);
  const BpeTokenizer bytes_only;
  for (const BpeTokenizer* tok : {&trained, &bytes_only}) {
    const std::vector<std::string> samples = {
        "",
        kChinese,
        kEmoji,
        std::string("nul\0inside", 10),
        "\xff\xfe\xc3(",           // invalid UTF-8
        "\xe4\xbd",                // truncated 你
        "\xed\xa0\x80 surrogate",  // encoded surrogate (invalid)
        "\xc0\xaf overlong",       // overlong '/'
        repeat("ab", 2000),        // long runs
        repeat(" ", 600) + "x",
        "\r\n\t\v\f mixed  \n whitespace \t",
    };
    for (const auto& s : samples) {
      INFO(s.size() << " bytes");
      REQUIRE(tok->decode(tok->encode(s)) == s);
    }
    std::mt19937 gen(9);
    for (int trial = 0; trial < 300; ++trial) {
      std::string s(gen() % 200, '\0');
      for (char& c : s) c = static_cast<char>(gen() % 256);
      REQUIRE(tok->decode(tok->encode(s)) == s);
    }
  }
}

TEST_CASE("bpe: the base tokenizer maps bytes to their values", "[bpe]") {
  const BpeTokenizer tok;
  REQUIRE(tok.vocab_size() == 256);
  REQUIRE(tok.encode("A\xff") == std::vector<int32_t>{65, 255});
}

TEST_CASE("bpe: training is deterministic", "[bpe]") {
  const std::string text = repeat(kText, 3) + kChinese;
  const BpeTokenizer a = BpeTokenizer::train(text, 320);
  const BpeTokenizer b = BpeTokenizer::train(text, 320);
  REQUIRE(a.merges() == b.merges());
  REQUIRE(a.to_json() == b.to_json());
}

TEST_CASE("bpe: decode and training reject bad arguments", "[bpe]") {
  const BpeTokenizer tok = BpeTokenizer::train("ab ab ab", 300);
  REQUIRE_THROWS_AS(tok.decode({97, tok.vocab_size()}), Error);
  REQUIRE_THROWS_WITH(tok.decode({97, -1}),
                      StartsWith("bpe decode: token id -1 at position 1 is outside [0, "));
  REQUIRE_THROWS_AS(BpeTokenizer::train("x", 255), ConfigError);
  REQUIRE_THROWS_WITH(BpeTokenizer::train("x", 255), Contains("vocab_size must be in [256,"));
  REQUIRE_THROWS_AS(BpeTokenizer::train("x", kBpeMaxVocab + 1), ConfigError);
}

TEST_CASE("bpe: tokens print readably", "[bpe]") {
  const BpeTokenizer tok(
      std::vector<BpeTokenizer::Merge>{{'\n', '\n'}, {0xe4, 0xbd}, {257, 0xa0}, {' ', 't'}});
  REQUIRE(tok.token_str(256) == "\\n\\n");
  REQUIRE(tok.token_str(257) == "\\xe4\\xbd");  // half a character
  REQUIRE(tok.token_str(258) == "你");
  REQUIRE(tok.token_str(259) == " t");
  REQUIRE(tok.token_str('\\') == "\\\\");
  REQUIRE(tok.token_str(0) == "\\x00");
  REQUIRE_THROWS_AS(tok.token_str(260), Error);
}

TEST_CASE("bpe: save and load round trip", "[bpe]") {
  const BpeTokenizer tok = BpeTokenizer::train(repeat(kText, 10) + repeat(kChinese, 10), 330);
  const std::string path = temp_path("tok.json");
  tok.save(path);
  REQUIRE(tfm_test::temporaries_beside(path).empty());
  const BpeTokenizer back = BpeTokenizer::load(path);
  REQUIRE(back.merges() == tok.merges());
  REQUIRE(back.vocab_size() == tok.vocab_size());
  REQUIRE(back.encode(kText) == tok.encode(kText));
  REQUIRE(back.to_json() == tok.to_json());
  REQUIRE_THAT(tok.to_json(), StartsWith("{\"type\": \"byte_bpe\", \"version\": 1, \"vocab_size\": 330,"));
  // No merges at all is a valid file too.
  REQUIRE(parse(BpeTokenizer().to_json()).vocab_size() == 256);
}

TEST_CASE("bpe: malformed tokenizer files are rejected with a clear message", "[bpe]") {
  std::string chain;  // each merge doubles the token: the 9th would be 512 bytes
  for (int k = 0; k < 9; ++k)
    chain +=
        (k ? ",[" : "[") + std::to_string(k ? 255 + k : 97) + "," + std::to_string(k ? 255 + k : 97) + "]";
  struct Case {
    const char* name;
    std::string text;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"empty", "", "invalid JSON"},
      {"not JSON", "merges: []", "invalid JSON"},
      {"not an object", "[]", "expected a JSON object, got array"},
      {"missing type", R"({"version":1,"merges":[]})", "missing \"type\""},
      {"missing version", R"({"type":"byte_bpe","merges":[]})", "missing \"version\""},
      {"missing merges", R"({"type":"byte_bpe","version":1})", "missing \"merges\""},
      {"wrong type", R"({"type":"wordpiece","version":1,"merges":[]})",
       "type must be \"byte_bpe\", got \"wordpiece\""},
      {"future version", R"({"type":"byte_bpe","version":2,"merges":[]})", "unsupported version 2"},
      {"version not a number", R"({"type":"byte_bpe","version":"1","merges":[]})",
       "version must be an integer"},
      {"unknown field", R"({"type":"byte_bpe","version":1,"merges":[],"vocab":{}})",
       "unknown field \"vocab\""},
      {"duplicate key", R"({"type":"byte_bpe","version":1,"merges":[],"merges":[]})",
       "duplicate JSON key \"merges\""},
      {"merges not an array", R"({"type":"byte_bpe","version":1,"merges":{}})", "merges must be an array"},
      {"merge not a pair", R"({"type":"byte_bpe","version":1,"merges":[[1,2,3]]})", "merge 0 must be a pair"},
      {"merge of strings", R"({"type":"byte_bpe","version":1,"merges":[["a","b"]]})",
       "merge 0 must be a pair"},
      {"negative id", R"({"type":"byte_bpe","version":1,"merges":[[-1,2]]})", "merge 0 must be a pair"},
      {"huge id", R"({"type":"byte_bpe","version":1,"merges":[[1,99999999999]]})", "merge 0 must be a pair"},
      {"id from the future", R"({"type":"byte_bpe","version":1,"merges":[[97,98],[257,1]]})",
       "merge 1 [257, 1] uses a token id outside [0, 257)"},
      {"repeated merge", R"({"type":"byte_bpe","version":1,"merges":[[97,98],[97,98]]})",
       "merge 1 [97, 98] repeats merge 0"},
      {"vocab_size mismatch", R"({"type":"byte_bpe","version":1,"vocab_size":300,"merges":[[97,98]]})",
       "vocab_size 300 does not match 256 + 1 merges = 257"},
      {"token too long", R"({"type":"byte_bpe","version":1,"merges":[)" + chain + "]}",
       "merge 8 [263, 263] makes a token of 512 bytes"},
      {"deep nesting", repeat("[", 5000), "nested deeper than 64"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    REQUIRE_THROWS_AS(parse(c.text), IoError);
    REQUIRE_THROWS_WITH(parse(c.text), StartsWith("tok.json: ") && Contains(c.fragment));
  }
  REQUIRE_THROWS_WITH(BpeTokenizer::load(temp_path("missing.json")), Contains("missing.json: cannot open"));
}
