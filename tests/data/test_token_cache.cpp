// The token cache (docs/data.md): streaming tokenization gives exactly the whole text's ids for the char,
// byte and BPE tokenizers; a changed source or tokenizer invalidates the cache; a truncated or corrupt
// cache is named and rebuilt, never trusted.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "tfm/data/bpe.h"
#include "tfm/data/dataset.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"

using namespace tfm;
namespace fs = std::filesystem;

namespace {

using TokenCacheDir = tfm_test::TempDir;  // /tmp/tfm_test_<name>_<pid>/, removed at scope exit

void write_cache_input(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Varied text with what stresses the cuts: multi-byte characters (2, 3 and 4 bytes), newlines,
// punctuation, apostrophes, whitespace runs, letter runs longer than BPE's 256-byte chunk limit.
std::string varied_text(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> words = {"the",   "king", "Romeo", "and",  "thou'rt", "we'll",
                                          "don't", "café", "naïve", "春眠", "不觉晓",  "😀",
                                          "x1",    "2024", "--",    "...",  "?!",      "\xc3\xa9t\xc3\xa9",
                                          "Ωμέγα", "don",  "'s"};
  const std::vector<std::string> gaps = {" ", " ", " ", "\n", ", ", ". ", "\n\n", "   ", "\t", " \n "};
  std::string t;
  while (t.size() < bytes) {
    const uint32_t r = rng() % 200;
    if (r == 0)
      t += std::string(300 + rng() % 300, 'a');  // a letter run past the chunk limit
    else if (r == 1)
      t += std::string(270 + rng() % 20, ' ');  // a whitespace run past it
    else
      t += words[rng() % words.size()];
    t += gaps[rng() % gaps.size()];
  }
  return t;
}

TokenCacheOptions small_blocks(const std::string& dir, std::vector<std::string>* log = nullptr) {
  TokenCacheOptions o;
  o.dir = dir;
  o.block_bytes = 4096;  // many block edges in a small file
  o.threads = 3;         // pieces inside each block, encoded in parallel
  if (log) o.log = [log](const std::string& line) { log->push_back(line); };
  return o;
}

bool logged(const std::vector<std::string>& log, const std::string& what) {
  for (const auto& l : log)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("token cache: pretokenize_cut cuts where the chunks of the pieces are the whole's",
          "[data][cache]") {
  const std::string text = varied_text(60000, 1);
  const std::vector<std::string_view> whole = pretokenize(text);
  std::mt19937 rng(2);
  int cuts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t p = pretokenize_cut(text, rng() % text.size());
    if (p == 0) continue;
    ++cuts;
    std::vector<std::string_view> pieces = pretokenize(std::string_view(text).substr(0, p));
    for (std::string_view c : pretokenize(std::string_view(text).substr(p))) pieces.push_back(c);
    REQUIRE(pieces.size() == whole.size());
    for (size_t i = 0; i < whole.size(); ++i) REQUIRE(pieces[i] == whole[i]);
  }
  CHECK(cuts > 250);
  CHECK(pretokenize_cut("   ", 2) == 0);
}

TEST_CASE("token cache: round-trips the tokens of char, byte and BPE exactly", "[data][cache]") {
  const TokenCacheDir dir("roundtrip");
  const std::string text = varied_text(200000, 3);
  const std::string src = dir.file("corpus.txt");
  write_cache_input(src, text);
  const std::string cache_dir = dir.file("cache");

  SECTION("char: the file's own vocabulary, uint16") {
    const Tokenizer expected = Tokenizer::from_text(Tokenizer::Kind::Char, text, src);
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Char, small_blocks(cache_dir));
    CHECK(c.built);
    CHECK(c.tokenizer.symbols() == expected.symbols());
    CHECK(c.tokens.width() == 2);
    CHECK(c.tokens.to_vector() == expected.encode(text, src));
    CHECK(c.path == token_cache_path(src, cache_dir, Tokenizer::Kind::Char));
    // Mapped again, not rebuilt; a checkpoint's copy of the vocabulary finds the same cache.
    const TokenCache again = open_token_cache(src, Tokenizer::Kind::Char, small_blocks(cache_dir));
    CHECK_FALSE(again.built);
    CHECK(again.tokens.to_vector() == expected.encode(text, src));
    CHECK_FALSE(open_token_cache(src, expected, small_blocks(cache_dir)).built);
  }
  SECTION("byte") {
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Byte, small_blocks(cache_dir));
    std::vector<int32_t> expected(text.begin(), text.end());
    for (int32_t& b : expected) b = static_cast<uint8_t>(b);
    CHECK(c.tokens.to_vector() == expected);
    CHECK(c.tokenizer.size() == 256);
  }
  SECTION("bpe, encoded in parallel pieces") {
    const Tokenizer bpe(BpeTokenizer::train(text.substr(0, 50000), 400));
    const TokenCache c = open_token_cache(src, bpe, small_blocks(cache_dir));
    const std::vector<int32_t> expected = bpe.encode(text, src);
    CHECK(c.tokens.size() == static_cast<int64_t>(expected.size()));
    CHECK(c.tokens.to_vector() == expected);
    // And with the default blocks (one block, two threads).
    TokenCacheOptions o;
    o.dir = dir.file("cache2");
    o.threads = 2;
    CHECK(open_token_cache(src, bpe, o).tokens.to_vector() == expected);
  }
}

TEST_CASE("token cache: a vocabulary past 65536 symbols is stored as uint32", "[data][cache]") {
  const TokenCacheDir dir("wide");
  std::string text;
  for (uint32_t cp = 0x4E00; cp < 0x4E00 + 20000; ++cp) append_utf8(text, cp);    // CJK
  for (uint32_t cp = 0x20000; cp < 0x20000 + 50000; ++cp) append_utf8(text, cp);  // CJK extension B
  text += "\nthe end\n";
  const std::string src = dir.file("wide.txt");
  write_cache_input(src, text);
  const TokenCache c = open_token_cache(src, Tokenizer::Kind::Char, small_blocks(dir.file("cache")));
  const Tokenizer expected = Tokenizer::from_text(Tokenizer::Kind::Char, text, src);
  REQUIRE(expected.size() > 65536);
  CHECK(c.tokens.width() == 4);
  CHECK(c.tokens.to_vector() == expected.encode(text, src));
}

TEST_CASE("token cache: a changed source or tokenizer invalidates it, with the reason", "[data][cache]") {
  const TokenCacheDir dir("invalidate");
  const std::string src = dir.file("corpus.txt");
  std::string text = varied_text(30000, 4);
  write_cache_input(src, text);
  std::vector<std::string> log;
  const TokenCacheOptions o = small_blocks(dir.file("cache"), &log);
  REQUIRE(open_token_cache(src, Tokenizer::Kind::Char, o).built);
  CHECK(logged(log, "first use"));

  SECTION("the source grew") {
    text += "more text\n";
    write_cache_input(src, text);
    log.clear();
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Char, o);
    CHECK(c.built);
    CHECK(logged(log, "changed since it was tokenized"));
    CHECK(c.tokens.to_vector() == Tokenizer::from_text(Tokenizer::Kind::Char, text, src).encode(text, src));
  }
  SECTION("the same size, other bytes") {
    text[100] = text[100] == 'z' ? 'y' : 'z';
    write_cache_input(src, text);
    log.clear();
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Char, o);
    CHECK(c.built);
    CHECK(logged(log, "its bytes differ"));
    CHECK(c.tokens.to_vector() == Tokenizer::from_text(Tokenizer::Kind::Char, text, src).encode(text, src));
  }
  SECTION("touched, the same bytes: still valid") {
    fs::last_write_time(src, fs::last_write_time(src) + std::chrono::hours(1));
    log.clear();
    CHECK_FALSE(open_token_cache(src, Tokenizer::Kind::Char, o).built);
    CHECK(log.empty());
  }
  SECTION("another tokenizer") {
    // Two BPE vocabularies keep a cache each: alternating runs do not rebuild each other's.
    const Tokenizer a(BpeTokenizer::train(text, 300)), b(BpeTokenizer::train(text, 280));
    REQUIRE(open_token_cache(src, a, o).built);
    CHECK_FALSE(open_token_cache(src, a, o).built);
    log.clear();
    const TokenCache c = open_token_cache(src, b, o);
    CHECK(c.built);
    CHECK(logged(log, "first use"));
    CHECK(c.tokens.to_vector() == b.encode(text, src));
    const TokenCache a_again = open_token_cache(src, a, o);
    CHECK_FALSE(a_again.built);
    CHECK(a_again.path != c.path);
    CHECK(a_again.path == token_cache_path(src, o.dir, Tokenizer::Kind::Bpe, &a));
    CHECK_THAT(a_again.path, Catch::Matches(".*\\.bpe-[0-9a-f]{12}\\.tokens"));
    // A run's char vocabulary that is not the file's own (here: one more symbol) gets its own ids.
    std::vector<uint32_t> symbols = Tokenizer::from_text(Tokenizer::Kind::Char, text, src).symbols();
    symbols.insert(symbols.begin(), 1);  // U+0001, shifts every id by one
    const Tokenizer wider(Tokenizer::Kind::Char, symbols);
    log.clear();
    const TokenCache w = open_token_cache(src, wider, o);
    CHECK(w.built);
    CHECK(logged(log, "the tokenizer changed"));
    CHECK(w.tokens.to_vector() == wider.encode(text, src));
    // ... and the file's own vocabulary is not taken from that cache.
    log.clear();
    CHECK(open_token_cache(src, Tokenizer::Kind::Char, o).built);
    CHECK(logged(log, "another vocabulary"));
  }
}

TEST_CASE("token cache: a truncated or corrupt cache is named and rebuilt, never trusted", "[data][cache]") {
  const TokenCacheDir dir("corrupt");
  const std::string src = dir.file("corpus.txt");
  const std::string text = varied_text(30000, 5);
  write_cache_input(src, text);
  std::vector<std::string> log;
  const TokenCacheOptions o = small_blocks(dir.file("cache"), &log);
  const std::string cache = open_token_cache(src, Tokenizer::Kind::Byte, o).path;
  const std::string good = read(cache);
  std::vector<int32_t> expected(text.begin(), text.end());
  for (int32_t& b : expected) b = static_cast<uint8_t>(b);

  const auto damaged = [&](const std::string& bytes, const std::string& why) {
    INFO(why);
    write_cache_input(cache, bytes);
    log.clear();
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Byte, o);
    CHECK(c.built);
    CHECK(logged(log, cache));
    CHECK(logged(log, why));
    CHECK(c.tokens.to_vector() == expected);
    CHECK(read(cache) == good);
  };
  damaged(good.substr(0, good.size() - 3), "truncated");
  damaged(good.substr(0, 50), "shorter than its 96-byte header");
  damaged(good + "x", "too long");
  damaged(std::string(200, 'x'), "bad magic");
  std::string flipped = good;
  flipped[good.size() - 1000] ^= 0x01;  // one token
  damaged(flipped, "its tokens fail their checksum");
  flipped = good;
  flipped[20] ^= 0x01;  // the token count
  damaged(flipped, "header");
  flipped = good;
  flipped[120] ^= 0x01;  // inside the JSON
  damaged(flipped, "its header fails its checksum");

  // Once hashed in full (a second after it was written), a start skips hashing the ids while the file
  // is unchanged; a write in place (same size) is still caught.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  CHECK_FALSE(open_token_cache(src, Tokenizer::Kind::Byte, o).built);
  REQUIRE(fs::exists(cache + ".checked"));
  CHECK_FALSE(open_token_cache(src, Tokenizer::Kind::Byte, o).built);
  flipped = good;
  flipped[good.size() - 10] ^= 0x01;
  {
    std::fstream f(cache, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(good.size() - 10));
    f.put(flipped[good.size() - 10]);
  }
  log.clear();
  CHECK(open_token_cache(src, Tokenizer::Kind::Byte, o).built);
  CHECK(logged(log, "its tokens fail their checksum"));
}

TEST_CASE("token cache: its hash is XXH3-64, and a cache of another format version is rebuilt",
          "[data][cache]") {
  // XXH3-64 (seed 0) of "" and of "abc", xxHash's reference values.
  CHECK(hash64("", 0) == 0x2D06800538D394C2ull);
  CHECK(hash64("abc", 3) == 0x78AF5F94892F3950ull);

  const TokenCacheDir dir("format");
  const std::string src = dir.file("corpus.txt");
  const std::string text = varied_text(20000, 9);
  write_cache_input(src, text);
  std::vector<std::string> log;
  const TokenCacheOptions o = small_blocks(dir.file("cache"), &log);
  const TokenCache first = open_token_cache(src, Tokenizer::Kind::Char, o);
  const std::vector<int32_t> expected = first.tokens.to_vector();
  const std::string good = read(first.path);
  REQUIRE(good.substr(0, 8) == "TFMTOKS5");
  for (const char version : {'4', '6'}) {
    INFO("format " << version);
    // The header of an older (or newer) tfm: the same layout, its magic's version another, its hashes
    // left as they are (an older tfm's would be XXH64's): it is refused on the version alone.
    std::string other = good;
    other[7] = version;
    write_cache_input(first.path, other);
    log.clear();
    const TokenCache c = open_token_cache(src, Tokenizer::Kind::Char, o);
    CHECK(c.built);
    CHECK(logged(log,
                 std::string("written in cache format ") + version + "; this tfm reads and writes format 5"));
    CHECK_FALSE(logged(log, "not trusted"));  // not corrupt: only older
    CHECK(c.tokens.to_vector() == expected);
    CHECK(read(first.path) == good);
  }
}

TEST_CASE("token cache: errors name the file, at the same offsets as a whole-file read", "[data][cache]") {
  const TokenCacheDir dir("errors");
  const std::string src = dir.file("bad.txt");
  // Invalid bytes at and around block edges: the first one is reported, at its file offset.
  for (size_t at : {size_t{4095}, size_t{4096}, size_t{4097}, size_t{9000}}) {
    std::string text = varied_text(12000, 6);
    text[at] = static_cast<char>(0xFF);
    write_cache_input(src, text);
    std::string whole_error;
    try {
      decode_utf8(text, src);
    } catch (const IoError& e) {
      whole_error = e.what();
    }
    REQUIRE_FALSE(whole_error.empty());
    CHECK_THROWS_WITH(open_token_cache(src, Tokenizer::Kind::Char, small_blocks(dir.file("cache"))),
                      whole_error);
  }
  // A character the run's vocabulary lacks: named with its character index in the file.
  const std::string text = std::string(5000, 'a') + "b";
  write_cache_input(src, text);
  const Tokenizer only_a(Tokenizer::Kind::Char, {'a'});
  CHECK_THROWS_WITH(open_token_cache(src, only_a, small_blocks(dir.file("cache"))),
                    Catch::Contains("character 'b'") && Catch::Contains("at character 5000"));
  CHECK_THROWS_WITH(open_token_cache(dir.file("missing.txt"), Tokenizer::Kind::Char, {}),
                    Catch::StartsWith(dir.file("missing.txt") + ": cannot open"));
  // An unwritable cache directory names data.cache_dir.
  write_cache_input(src, text);
  TokenCacheOptions o;
  o.dir = src + "/cache";  // below a regular file
  CHECK_THROWS_WITH(open_token_cache(src, Tokenizer::Kind::Char, o),
                    Catch::StartsWith("data.cache_dir: cannot create"));
}

TEST_CASE("token cache: spans read windows of the mapping, and batches equal those of the vector",
          "[data][cache]") {
  const TokenCacheDir dir("spans");
  const std::string src = dir.file("corpus.txt");
  const std::string text = varied_text(20000, 7);
  write_cache_input(src, text);
  TokenCacheOptions o;
  o.dir = dir.file("cache");
  const Dataset d = load_dataset(src, "char", 0.1, 16, o);
  const std::vector<int32_t> all = Tokenizer::from_text(Tokenizer::Kind::Char, text, src).encode(text, src);
  const int64_t n_train = static_cast<int64_t>(static_cast<double>(all.size()) * 0.9);
  const std::vector<int32_t> train(all.begin(), all.begin() + n_train), val(all.begin() + n_train, all.end());
  CHECK(d.train.to_vector() == train);
  CHECK(d.val.to_vector() == val);
  CHECK(d.cache_path == token_cache_path(src, o.dir, Tokenizer::Kind::Char));
  BatchSampler a(11), b(11);
  std::vector<int32_t> xa, ya, xb, yb;
  for (int i = 0; i < 5; ++i) {
    a.sample(d.train, 4, 16, xa, ya);
    b.sample(train, 4, 16, xb, yb);
    CHECK(xa == xb);
    CHECK(ya == yb);
  }
  const TokenSpan s = TokenSpan::of({5, 6, 7, 8});
  CHECK(s.slice(1, 3).to_vector() == std::vector<int32_t>{6, 7});
  CHECK(s[3] == 8);
  CHECK(default_cache_dir("data/x.txt") == "data/.tfm-cache");
  CHECK(default_cache_dir("x.txt") == ".tfm-cache");
}

TEST_CASE("token cache: a link planted at its stamp's name is never written through", "[data][cache]") {
  const TokenCacheDir dir("stamp_link");
  const std::string src = dir.file("corpus.txt"), victim = dir.file("victim");
  write_cache_input(src, varied_text(20000, 8));
  write_cache_input(victim, "precious\n");
  const TokenCacheOptions o = small_blocks(dir.file("cache"));
  const std::string cache = open_token_cache(src, Tokenizer::Kind::Byte, o).path;
  fs::create_symlink(victim, cache + ".checked");
  // A second after the build the ids are hashed in full and the stamp would be written: refused at
  // the link, so every start hashes them instead.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  CHECK_FALSE(open_token_cache(src, Tokenizer::Kind::Byte, o).built);
  CHECK_FALSE(open_token_cache(src, Tokenizer::Kind::Byte, o).built);
  CHECK(read(victim) == "precious\n");
  CHECK(fs::is_symlink(cache + ".checked"));
}

// Ctrl-C during a first use's tokenization (minutes on a large corpus) stops it between blocks: the
// half-written cache is dropped unnamed, so no cache and no temporary is left and the next start
// tokenizes afresh.
TEST_CASE("token cache: a stop request abandons a build, leaving no cache or temporary", "[data][cache]") {
  const TokenCacheDir dir("stop");
  const std::string src = dir.file("corpus.txt");
  write_cache_input(src, varied_text(size_t{3} << 20, 9));  // 3 MB: ~0.5 s of GPT-2 BPE on 2 cores
  const Tokenizer gpt2 = Tokenizer::load_gpt2("");
  std::atomic<bool> stop{false};
  TokenCacheOptions o;
  o.dir = dir.file("cache");
  o.block_bytes = 64 << 10;  // a check every 64 KiB
  o.stop = &stop;
  const std::string cache = token_cache_path(src, o.dir, Tokenizer::Kind::Gpt2, &gpt2);
  const auto nothing_left = [&] {
    CHECK_FALSE(fs::exists(cache));
    CHECK(tfm_test::temporaries_beside(cache).empty());
  };

  SECTION("set by another thread while it tokenizes") {
    std::thread setter;
    // Called once the build is decided, just before it starts.
    o.log = [&](const std::string& line) {
      if (line.find("tokenizing") == std::string::npos) return;
      setter = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        stop = true;
      });
    };
    try {
      open_token_cache(src, gpt2, o);
      FAIL("the build was not stopped");
    } catch (const Interrupted& e) {
      CHECK_THAT(e.what(), Catch::Contains("data.path " + src) && Catch::Contains(cache) &&
                               Catch::Contains("the cache is not written"));
    }
    setter.join();
    nothing_left();
    // Without a stop, the next start builds it whole.
    stop = false;
    o.log = nullptr;
    const TokenCache c = open_token_cache(src, gpt2, o);
    CHECK(c.built);
    CHECK(c.tokens.size() > 0);
  }
  SECTION("set before a char vocabulary's pass") {
    stop = true;
    CHECK_THROWS_AS(open_token_cache(src, Tokenizer::Kind::Char, o), Interrupted);
    CHECK_FALSE(fs::exists(token_cache_path(src, o.dir, Tokenizer::Kind::Char)));
    CHECK(tfm_test::temporaries_beside(token_cache_path(src, o.dir, Tokenizer::Kind::Char)).empty());
    nothing_left();
  }
}
