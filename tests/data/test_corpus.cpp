// Corpora (corpus.h, docs/data.md): data.path as a directory, a glob or a list; text and JSON Lines,
// plain, .gz and .zst; documents joined by the end-of-text id; the validation split by whole
// documents; the cache's key over the files; every bad input named with its file and place.
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "tfm/data/corpus.h"
#include "tfm/data/dataset.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"

using namespace tfm;
namespace fs = std::filesystem;

namespace {

using Dir = tfm_test::TempDir;  // /tmp/tfm_test_<name>_<pid>/, removed at scope exit

void write_corpus_input(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// gzip through zlib (two members when `members` is 2: concatenated .gz files are one stream of text).
std::string gzip(const std::string& text, int members = 1) {
  std::string out;
  const size_t half = members == 2 ? text.size() / 2 : text.size();
  for (const std::string& part : {text.substr(0, half), text.substr(half)}) {
    if (part.empty() && !out.empty()) break;
    z_stream z{};
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string buf(deflateBound(&z, static_cast<uLong>(part.size())) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(part.data()));
    z.avail_in = static_cast<uInt>(part.size());
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
    buf.resize(z.total_out);
    deflateEnd(&z);
    out += buf;
    if (members == 1) break;
  }
  return out;
}

std::string zstd(const std::string& text) {
  std::string buf(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(buf.data(), buf.size(), text.data(), text.size(), 3);
  REQUIRE_FALSE(ZSTD_isError(n));
  buf.resize(n);
  return buf;
}

std::string jsonl_line(const std::string& field, const std::string& text) {
  return nlohmann::json{{"id", 1}, {field, text}}.dump() + "\n";
}

TokenCacheOptions options(const std::string& cache_dir, std::vector<std::string>* log = nullptr) {
  TokenCacheOptions o;
  o.dir = cache_dir;
  o.block_bytes = 64;  // many block edges inside every document
  o.threads = 2;
  if (log) o.log = [log](const std::string& line) { log->push_back(line); };
  return o;
}

std::vector<std::string> paths(const std::vector<CorpusFile>& files, const std::string& root) {
  std::vector<std::string> out;
  for (const CorpusFile& f : files)
    out.push_back(fs::path(f.path).lexically_normal().lexically_relative(root).string());
  return out;
}

bool corpus_logged(const std::vector<std::string>& log, const std::string& what) {
  for (const auto& l : log)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

// The ids of the documents' texts joined by `sep` (-1: none), as tok.encode of each would give.
std::vector<int32_t> joined(const Tokenizer& tok, const std::vector<std::string>& docs, int32_t sep) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0 && sep >= 0) ids.push_back(sep);
    const std::vector<int32_t> d = tok.encode(docs[i], "doc");
    ids.insert(ids.end(), d.begin(), d.end());
  }
  return ids;
}

std::string corpus_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Waits past the file-time tick so that a rewrite is seen as one.
void next_tick() {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

TEST_CASE("corpus: a directory is walked recursively and sorted, globs and lists expand in order",
          "[data][corpus]") {
  const Dir d("list");
  write_corpus_input(d.file("c/b.txt"), "b");
  write_corpus_input(d.file("c/a.txt"), "a");
  write_corpus_input(d.file("c/sub/z.jsonl"), jsonl_line("text", "z"));
  write_corpus_input(d.file("c/sub/deeper/y.txt.gz"), gzip("y"));
  write_corpus_input(d.file("c/.hidden.txt"), "hidden");
  write_corpus_input(d.file("c/.git/x.txt"), "in a hidden folder");
  write_corpus_input(d.file("c/notes.pdf"), "not a corpus file");
  write_corpus_input(d.file("g/one.txt"), "1");
  write_corpus_input(d.file("g/two.txt"), "2");
  write_corpus_input(d.file("g/skip.jsonl"), jsonl_line("text", "s"));

  CHECK(paths(list_corpus(d.file("c")), d.path) ==
        std::vector<std::string>{"c/a.txt", "c/b.txt", "c/sub/deeper/y.txt.gz", "c/sub/z.jsonl"});
  CHECK(paths(list_corpus(d.file("c/")), d.path).size() == 4);
  CHECK(paths(list_corpus(d.file("g/*.txt")), d.path) == std::vector<std::string>{"g/one.txt", "g/two.txt"});
  const std::string list =
      nlohmann::json::array({d.file("g/*.txt"), d.file("c/sub"), d.file("c/a.txt")}).dump();
  CHECK(paths(list_corpus(list), d.path) == std::vector<std::string>{"g/one.txt", "g/two.txt",
                                                                     "c/sub/deeper/y.txt.gz", "c/sub/z.jsonl",
                                                                     "c/a.txt"});
  CHECK_FALSE(is_single_file(list));
  CHECK(is_single_file(d.file("c/a.txt")));
  CHECK_FALSE(is_single_file(d.file("c")));

  // Cache names and homes: a file's or directory's name beside it; a glob's or list's by its hash.
  CHECK(corpus_name(d.file("c/")) == "c");
  CHECK(default_cache_dir(d.file("c/")) == d.file("c/.tfm-cache"));  // inside: it moves with the folder
  CHECK(default_cache_dir(d.file("g/*.txt")) == d.file("g/.tfm-cache"));
  CHECK(corpus_name(d.file("g/*.txt")).rfind("corpus-", 0) == 0);
  CHECK(corpus_name(list) != corpus_name(d.file("g/*.txt")));
  CHECK(default_cache_dir(list) == d.file("g/.tfm-cache"));

  CHECK_THAT(corpus_error_of([&] { list_corpus(d.file("g/*.none")); }), Catch::Contains("matches no file"));
  CHECK_THAT(corpus_error_of([&] { list_corpus(d.file("missing.txt")); }),
             Catch::Contains(d.file("missing.txt") + ": cannot open"));
  write_corpus_input(d.file("empty/readme.pdf"), "x");
  CHECK_THAT(corpus_error_of([&] { list_corpus(d.file("empty")); }),
             Catch::Contains("holds no corpus file") &&
                 Catch::Contains("left out 1 file (" + d.file("empty/readme.pdf")));
  const std::string twice = nlohmann::json::array({d.file("c/a.txt"), d.file("c")}).dump();
  CHECK_THAT(corpus_error_of([&] { list_corpus(twice); }), Catch::Contains("c/a.txt is named twice"));
  CHECK_THAT(corpus_error_of([&] { list_corpus("[\"a\", 3]"); }), Catch::Contains("data.path"));
  if (::geteuid() != 0) {  // root reads any file
    write_corpus_input(d.file("locked/x.txt"), "x");
    fs::permissions(d.file("locked/x.txt"), fs::perms::none);
    CHECK_THAT(corpus_error_of([&] { list_corpus(d.file("locked")); }),
               Catch::Contains("x.txt: cannot read it"));
  }
}

TEST_CASE("corpus: text, JSON Lines with a custom field, .gz and .zst give the same documents",
          "[data][corpus]") {
  const Dir d("formats");
  const std::vector<std::string> docs = {"First document, café.\n", "Second: 春眠不觉晓 and more text here",
                                         "third {\"not\": json} \"quoted\"\n\n", "fourth 😀 line"};
  // The same four documents in every form: two text files and a JSON Lines file of two records.
  const std::string lines = jsonl_line("body", docs[2]) + "\n  \n" + jsonl_line("body", docs[3]);
  for (const std::string form : {"plain", "gz", "zst"}) {
    INFO(form);
    const std::string root = d.file(form);
    const auto put = [&](const std::string& name, const std::string& text) {
      if (form == std::string("plain")) write_corpus_input(root + "/" + name, text);
      if (form == std::string("gz")) write_corpus_input(root + "/" + name + ".gz", gzip(text, 2));
      if (form == std::string("zst")) write_corpus_input(root + "/" + name + ".zst", zstd(text));
    };
    put("a.txt", docs[0]);
    put("b.txt", docs[1]);
    put("c.jsonl", lines);
    TokenCacheOptions o = options(d.file("cache_" + std::string(form)));
    o.text_field = "body";
    const TokenCache c = open_token_cache(root, Tokenizer::Kind::Char, o);
    REQUIRE(c.document_ends.size() == 4);
    REQUIRE(c.document_separator);  // more than one document: on by default
    const Tokenizer& tok = c.tokenizer;
    REQUIRE(tok.has_end_of_text());
    const int32_t eot = tok.end_of_text_id();
    CHECK(eot == tok.size() - 1);
    CHECK(c.tokens.to_vector() == joined(tok, docs, eot));
    // The separator appears exactly between documents, at each document's end.
    std::vector<int64_t> at;
    const std::vector<int32_t> ids = c.tokens.to_vector();
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == eot) at.push_back(static_cast<int64_t>(i));
    REQUIRE(at.size() == 3);
    for (int k = 0; k < 3; ++k) CHECK(at[k] == c.document_ends[k]);
    CHECK(c.document_ends[3] == c.tokens.size());
    CHECK(tok.decode(ids) == docs[0] + kEndOfText + docs[1] + kEndOfText + docs[2] + kEndOfText + docs[3]);
  }
  // Encoding text never produces the end-of-text id, even its spelling.
  TokenCacheOptions o = options(d.file("cache_byte"));
  o.text_field = "body";
  const TokenCache b = open_token_cache(d.file("gz"), Tokenizer::Kind::Byte, o);
  CHECK(b.tokenizer.size() == 257);
  const std::vector<int32_t> spelled = b.tokenizer.encode(kEndOfText, "t");
  CHECK(spelled.size() == std::string(kEndOfText).size());
  CHECK(b.tokens.to_vector() == joined(b.tokenizer, docs, 256));
}

TEST_CASE("corpus: a text file's byte order mark is dropped and its CRLF line ends read as LF",
          "[data][corpus]") {
  const Dir d("text_mode");
  // A CRLF across the edge of the 4 MiB blocks the files are read in, a lone CR, a CR ending the file.
  std::string big(kHashBlockBytes - 1, 'a');
  big += "\r\nb\rc\r";
  const std::string small = "\xEF\xBB\xBFline one\r\nline two\r\n\r\n";
  const std::vector<std::string> as_read = {std::string(kHashBlockBytes - 1, 'a') + "\nb\rc\r",
                                            "line one\nline two\n\n", "{\"text\": \"kept\\r\\n\"}\r\n"};
  for (const std::string form : {"plain", "gz", "zst"}) {
    INFO(form);
    const std::string root = d.file(form);
    const auto put = [&](const std::string& name, const std::string& text) {
      if (form == std::string("plain")) write_corpus_input(root + "/" + name, text);
      if (form == std::string("gz")) write_corpus_input(root + "/" + name + ".gz", gzip(text));
      if (form == std::string("zst")) write_corpus_input(root + "/" + name + ".zst", zstd(text));
    };
    put("a.txt", big);
    put("b.txt", small);
    put("c.txt", as_read[2]);      // CRLF ends the file; a JSON-looking .txt is text all the same
    put("d.txt", "\xEF\xBB\xBF");  // a byte order mark alone: an empty file, no document
    CorpusReader reader(list_corpus(root), CorpusOptions{});
    std::vector<std::string> docs;
    while (reader.next_document()) {
      docs.emplace_back();
      while (reader.read(docs.back())) {
      }
    }
    REQUIRE(docs.size() == 3);
    CHECK(docs[0] == as_read[0]);
    CHECK(docs[1] == as_read[1]);
    CHECK(docs[2] == "{\"text\": \"kept\\r\\n\"}\n");
  }
  // JSON Lines: a record's text is its JSON string, CR and all; the file's own CRLF ends lines.
  write_corpus_input(d.file("j/a.jsonl"), "\xEF\xBB\xBF" + nlohmann::json{{"text", "one\r\ntwo\r"}}.dump() +
                                              "\r\n" + jsonl_line("text", "three"));
  CorpusReader reader(list_corpus(d.file("j")), CorpusOptions{});
  std::vector<std::string> docs;
  while (reader.next_document()) {
    docs.emplace_back();
    while (reader.read(docs.back())) {
    }
  }
  CHECK(docs == std::vector<std::string>{"one\r\ntwo\r", "three"});
}

TEST_CASE("corpus: document_separator false concatenates, one document keeps the single-file tokens",
          "[data][corpus]") {
  const Dir d("separator");
  write_corpus_input(d.file("c/a.txt"), "alpha beta\n");
  write_corpus_input(d.file("c/b.txt"), "gamma delta\n");
  TokenCacheOptions o = options(d.file("cache"));
  o.document_separator = false;
  const TokenCache off = open_token_cache(d.file("c"), Tokenizer::Kind::Char, o);
  CHECK_FALSE(off.tokenizer.has_end_of_text());
  CHECK(off.tokenizer.decode(off.tokens.to_vector()) == "alpha beta\ngamma delta\n");
  CHECK(off.document_ends.size() == 2);
  // Turning it on rebuilds, with the reason.
  std::vector<std::string> log;
  o = options(d.file("cache"), &log);
  o.document_separator = true;
  const TokenCache on = open_token_cache(d.file("c"), Tokenizer::Kind::Char, o);
  CHECK(on.built);
  CHECK(corpus_logged(log, "data.document_separator changed (false then, true now)"));
  CHECK(on.tokenizer.decode(on.tokens.to_vector()) ==
        std::string("alpha beta\n") + kEndOfText + "gamma delta\n");

  // One file, default: the tokenizer and ids of the whole file, no end-of-text id.
  write_corpus_input(d.file("one.txt"), "just one file\n");
  const TokenCache one = open_token_cache(d.file("one.txt"), Tokenizer::Kind::Char, options(d.file("cache")));
  CHECK_FALSE(one.tokenizer.has_end_of_text());
  CHECK(one.tokenizer.to_json() ==
        Tokenizer::from_text(Tokenizer::Kind::Char, "just one file\n", "t").to_json());
  CHECK(one.tokens.to_vector() == one.tokenizer.encode("just one file\n", "t"));
  // The separator asked for on one document, then the default again: the cache of the first is rebuilt
  // for the second, never served to it (the default has no end-of-text id for one document).
  TokenCacheOptions asked = options(d.file("cache"));
  asked.document_separator = true;
  CHECK(open_token_cache(d.file("one.txt"), Tokenizer::Kind::Char, asked).tokenizer.has_end_of_text());
  log.clear();
  const TokenCache back =
      open_token_cache(d.file("one.txt"), Tokenizer::Kind::Char, options(d.file("cache"), &log));
  CHECK(back.built);
  CHECK(corpus_logged(log, "data.document_separator changed (true then, false, the default now)"));
  CHECK_FALSE(back.tokenizer.has_end_of_text());
  CHECK(back.tokenizer.to_json() == one.tokenizer.to_json());
  // ... and the default again reuses it.
  CHECK_FALSE(open_token_cache(d.file("one.txt"), Tokenizer::Kind::Char, options(d.file("cache"))).built);
  // A JSON Lines file of several records is several documents: separated (byte: decided by reading on
  // to the second record).
  write_corpus_input(d.file("recs.jsonl"), jsonl_line("text", "r1") + jsonl_line("text", "r2"));
  const TokenCache recs =
      open_token_cache(d.file("recs.jsonl"), Tokenizer::Kind::Byte, options(d.file("cache")));
  CHECK(recs.tokenizer.has_end_of_text());
  CHECK(recs.tokens.to_vector() == std::vector<int32_t>{'r', '1', 256, 'r', '2'});
  // A checkpoint's tokenizer decides for itself: without the id, no separator whatever the option says.
  TokenCacheOptions fixed = options(d.file("cache_fixed"));
  fixed.document_separator = true;
  const TokenCache f =
      open_token_cache(d.file("recs.jsonl"), Tokenizer::from_text(Tokenizer::Kind::Byte, "", "t"), fixed);
  CHECK(f.tokens.to_vector() == std::vector<int32_t>{'r', '1', 'r', '2'});
  // A base vocabulary (a new run's BPE file) gains it.
  fixed.extend_vocabulary = true;
  const TokenCache g =
      open_token_cache(d.file("recs.jsonl"), Tokenizer::from_text(Tokenizer::Kind::Byte, "", "t"), fixed);
  CHECK(g.tokenizer.has_end_of_text());
  CHECK(g.tokens.to_vector() == std::vector<int32_t>{'r', '1', 256, 'r', '2'});
  // ... and reopening it with the same base vocabulary reuses the cache.
  CHECK_FALSE(
      open_token_cache(d.file("recs.jsonl"), Tokenizer::from_text(Tokenizer::Kind::Byte, "", "t"), fixed)
          .built);
  // The tokenizer's JSON keeps the id (checkpoints).
  CHECK(Tokenizer::from_json(g.tokenizer.to_json()).end_of_text_id() == 256);
  CHECK(g.tokenizer.decode(256) == kEndOfText);
}

TEST_CASE("corpus: the validation split takes whole documents, the last ones", "[data][corpus]") {
  const Dir d("split");
  std::vector<std::string> docs;
  for (int i = 0; i < 10; ++i) {
    docs.push_back("document number " + std::to_string(i) + " " +
                   std::string(static_cast<size_t>(20 + 7 * i), 'a' + i));
    write_corpus_input(d.file("c/" + std::to_string(i) + ".txt"),
                       docs.back());  // "0.txt" .. "9.txt": sorted in order
  }
  const Dataset data = load_dataset(d.file("c"), "char", 0.2, 8, options(d.file("cache")));
  CHECK(data.documents == 10);
  CHECK(data.val_documents == 2);
  CHECK(data.split_warning.empty());  // 31% of the tokens for 0.2: within a factor of two
  const std::string eot = kEndOfText;
  CHECK(data.tokenizer.decode(data.val.to_vector()) == docs[8] + eot + docs[9]);
  std::string train;
  for (int i = 0; i < 8; ++i)
    train += docs[static_cast<size_t>(i)] + eot;  // ends with the separator after doc 7
  CHECK(data.tokenizer.decode(data.train.to_vector()) == train);

  // A fraction that leaves no document on one side is refused, naming the key.
  CHECK_THAT(corpus_error_of([&] { load_dataset(d.file("c"), "char", 0.95, 8, options(d.file("cache"))); }),
             Catch::Contains("data.val_fraction = 0.95 of 10 documents leaves no document to train on"));
  CHECK_THAT(corpus_error_of([&] { load_dataset(d.file("c"), "char", 1e-17, 8, options(d.file("cache"))); }),
             Catch::Contains("leaves no document to validate"));
  // Two documents: one validates, half of the tokens but the separator for 0.1, and the split says so.
  const Dir two("split_two");
  for (int i = 0; i < 2; ++i) write_corpus_input(two.file("c/" + std::to_string(i) + ".txt"), docs[0]);
  const Dataset halves = load_dataset(two.file("c"), "char", 0.1, 8, options(two.file("cache")));
  CHECK(halves.val_documents == 1);
  CHECK_THAT(halves.split_warning, Catch::Contains("1 of 2 documents validate, 49.4% of the tokens, for "
                                                   "data.val_fraction = 0.1"));
}

TEST_CASE("corpus: the cache is rebuilt when a file changes or is added, and reused otherwise",
          "[data][corpus]") {
  const Dir d("rebuild");
  write_corpus_input(d.file("c/a.txt"), "first file\n");
  write_corpus_input(d.file("c/b.jsonl"), jsonl_line("text", "a record") + jsonl_line("text", "another"));
  std::vector<std::string> log;
  const TokenCacheOptions o = options(d.file("cache"), &log);
  CHECK(open_token_cache(d.file("c"), Tokenizer::Kind::Char, o).built);
  CHECK(corpus_logged(log, "(first use)"));
  log.clear();
  CHECK_FALSE(open_token_cache(d.file("c"), Tokenizer::Kind::Char, o).built);
  CHECK(log.empty());

  SECTION("touched, the same bytes: reused") {
    next_tick();
    fs::last_write_time(d.file("c/a.txt"), fs::file_time_type::clock::now());
    CHECK_FALSE(open_token_cache(d.file("c"), Tokenizer::Kind::Char, o).built);
  }
  SECTION("rewritten with other bytes of the same size") {
    next_tick();
    write_corpus_input(d.file("c/a.txt"), "FIRST file\n");
    const TokenCache c = open_token_cache(d.file("c"), Tokenizer::Kind::Char, o);
    CHECK(c.built);
    CHECK(corpus_logged(log, "c/a.txt changed since it was tokenized (its bytes differ); rebuilding"));
    CHECK_THAT(c.tokenizer.decode(c.tokens.to_vector()), Catch::StartsWith("FIRST"));
  }
  SECTION("a file added") {
    write_corpus_input(d.file("c/sub/new.txt"), "new\n");
    const TokenCache c = open_token_cache(d.file("c"), Tokenizer::Kind::Char, o);
    CHECK(c.built);
    CHECK(corpus_logged(log, "the corpus's files changed since it was tokenized (added: "));
    CHECK(c.document_ends.size() == 4);
  }
  SECTION("a file removed") {
    fs::remove(d.file("c/a.txt"));
    CHECK(open_token_cache(d.file("c"), Tokenizer::Kind::Char, o).built);
    CHECK(corpus_logged(log, "removed: "));
  }
  SECTION("another text field") {
    write_corpus_input(d.file("c/b.jsonl"), nlohmann::json{{"text", "x"}, {"body", "y"}}.dump() + "\n");
    TokenCacheOptions other = o;
    CHECK(open_token_cache(d.file("c"), Tokenizer::Kind::Char, other).built);
    log.clear();
    other.text_field = "body";
    CHECK(open_token_cache(d.file("c"), Tokenizer::Kind::Char, other).built);
    CHECK(corpus_logged(log, "data.text_field changed (\"text\" then, \"body\" now)"));
  }
}

TEST_CASE("corpus: bad input names the file and the place", "[data][corpus]") {
  const Dir d("bad");
  const auto fails = [&](const std::string& spec, const std::string& message, TokenCacheOptions o) {
    INFO(spec);
    CHECK_THAT(corpus_error_of([&] { open_token_cache(spec, Tokenizer::Kind::Char, o); }),
               Catch::Contains(message));
  };
  const TokenCacheOptions o = options(d.file("cache"));

  write_corpus_input(d.file("utf8/a.txt"), "fine\n");
  write_corpus_input(d.file("utf8/b.txt"), std::string(100, 'x') + "\xff" + "tail");
  fails(d.file("utf8"), d.file("utf8/b.txt") + ": invalid UTF-8 at byte offset 100", o);
  write_corpus_input(d.file("utf8gz/b.txt.gz"), gzip(std::string(300, 'x') + "\xc3(" + "tail"));
  fails(d.file("utf8gz"), d.file("utf8gz/b.txt.gz") + ": invalid UTF-8 at byte offset 301", o);  // the "("

  const std::string good = jsonl_line("text", "good");
  write_corpus_input(d.file("notjson.jsonl"), good + "{\"text\": \"unterminated\n" + good);
  fails(d.file("notjson.jsonl"), d.file("notjson.jsonl") + ":2: not JSON", o);
  write_corpus_input(d.file("nofield.jsonl"), good + good + "{\"body\": \"x\", \"id\": 3}\n");
  // The fields the record has, and the key that names the one holding the text.
  fails(d.file("nofield.jsonl"),
        d.file("nofield.jsonl") +
            ":3: the record has no field \"text\" (its fields: \"body\", \"id\"); set data.text_field to the "
            "field that holds the text (data.on_bad_record = \"skip\" skips such records and counts them)",
        o);
  write_corpus_input(d.file("wide.jsonl"),
                     "{\"g\": 1, \"f\": 1, \"e\": 1, \"d\": 1, \"c\": 1, \"b\": 1, \"a\": 1}\n");
  fails(
      d.file("wide.jsonl"),
      ":1: the record has no field \"text\" (its fields: \"a\", \"b\", \"c\", \"d\", \"e\", and 2 more); set "
      "data.text_field",
      o);
  write_corpus_input(d.file("bare.jsonl"), "{}\n");
  fails(d.file("bare.jsonl"), ":1: the record has no field \"text\" (it has no fields); set data.text_field",
        o);
  write_corpus_input(d.file("number.jsonl"), "{\"text\": 42}\n" + good);
  fails(d.file("number.jsonl"),
        d.file("number.jsonl") + ":1: the field \"text\" (data.text_field) is number, not a string", o);
  write_corpus_input(d.file("array.jsonl"), "[1, 2]\n" + good);
  fails(d.file("array.jsonl"), d.file("array.jsonl") + ":1: not a JSON object", o);

  const std::string text = std::string(5000, 'q') + " some more text\n";
  const std::string gz = gzip(text), zs = zstd(text);
  write_corpus_input(d.file("cut.txt.gz"), gz.substr(0, gz.size() / 2));
  fails(d.file("cut.txt.gz"), d.file("cut.txt.gz") + ": truncated gzip data", o);
  write_corpus_input(d.file("cut.txt.zst"), zs.substr(0, zs.size() - 3));
  fails(d.file("cut.txt.zst"), d.file("cut.txt.zst") + ": truncated zstd data", o);
  write_corpus_input(d.file("garbage.txt.gz"), "this is not gzip at all");
  fails(d.file("garbage.txt.gz"), d.file("garbage.txt.gz") + ": not valid gzip data", o);

  // An empty corpus: no documents at all, or only empty ones.
  write_corpus_input(d.file("empty/a.txt"), "");
  write_corpus_input(d.file("empty/b.jsonl"), jsonl_line("text", "") + "\n");
  fails(d.file("empty"), "the corpus has no text (2 files, no document in any", o);
  TokenCacheOptions byte = o;
  CHECK_THAT(corpus_error_of([&] { open_token_cache(d.file("empty"), Tokenizer::Kind::Byte, byte); }),
             Catch::Contains("the corpus has no text"));

  SECTION("on_bad_record skip: a corpus whose every record was skipped says so, and the first why") {
    TokenCacheOptions skip = o;
    skip.skip_bad_records = true;
    write_corpus_input(d.file("body/a.jsonl"),
                       "{\"body\": \"x\", \"id\": 1}\n{\"body\": \"y\", \"id\": 2}\n");
    for (const Tokenizer::Kind kind : {Tokenizer::Kind::Char, Tokenizer::Kind::Byte})
      CHECK(corpus_error_of([&] { open_token_cache(d.file("body"), kind, skip); }) ==
            d.file("body") +
                ": the corpus has no text (1 file, no document in it): all 2 of its records were skipped as "
                "bad "
                "(data.on_bad_record = \"skip\"), the first: " +
                d.file("body/a.jsonl") +
                ":1: the record has no field \"text\" (its fields: \"body\", \"id\"); set data.text_field to "
                "the field that holds the text");
    write_corpus_input(d.file("body/a.jsonl"), "{\"body\": \"x\"}\n");
    CHECK_THAT(corpus_error_of([&] { open_token_cache(d.file("body"), Tokenizer::Kind::Char, skip); }),
               Catch::Contains("(1 file, no document in it): its one record was skipped as bad ("));
    write_corpus_input(d.file("body/b.jsonl"), jsonl_line("text", "") + "[1]\n" + jsonl_line("text", ""));
    CHECK_THAT(corpus_error_of([&] { open_token_cache(d.file("body"), Tokenizer::Kind::Char, skip); }),
               Catch::Contains("(2 files, no document in any): 2 of its 4 records were skipped as bad "
                               "(data.on_bad_record = \"skip\") and the others' text is empty, the first: " +
                               d.file("body/a.jsonl") + ":1: the record has no field"));
  }
  SECTION("on_bad_record skip: skipped, counted and reported") {
    write_corpus_input(d.file("mixed.jsonl"),
                       good + "not json\n" + "{\"text\": 1}\n" + jsonl_line("text", "kept") + "{}\n");
    std::vector<std::string> log;
    TokenCacheOptions skip = options(d.file("cache"), &log);
    skip.skip_bad_records = true;
    const TokenCache c = open_token_cache(d.file("mixed.jsonl"), Tokenizer::Kind::Char, skip);
    CHECK(c.document_ends.size() == 2);
    CHECK(c.tokenizer.decode(c.tokens.to_vector()) == std::string("good") + kEndOfText + "kept");
    CHECK(corpus_logged(log, "skipped 3 bad records (data.on_bad_record = \"skip\"), the first: " +
                                 d.file("mixed.jsonl") + ":2: not JSON"));
    CHECK(corpus_logged(log, d.file("mixed.jsonl") + ":5: the record has no field"));
    // Back to "error": rebuilt, so the error is seen.
    fails(d.file("mixed.jsonl"), d.file("mixed.jsonl") + ":2: not JSON", o);
  }
}

TEST_CASE("corpus: a plain single file keeps the cache's ids and split of before corpora", "[data][corpus]") {
  const Dir d("single");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of the only document\n";
  write_corpus_input(d.file("one.txt"), text);
  const Dataset data = load_dataset(d.file("one.txt"), "char", 0.1, 8, options(d.file("cache")));
  const Tokenizer tok = Tokenizer::from_text(Tokenizer::Kind::Char, text, "t");
  const std::vector<int32_t> ids = tok.encode(text, "t");
  const auto n_train = static_cast<int64_t>(static_cast<double>(ids.size()) * 0.9);
  CHECK(data.tokenizer.to_json() == tok.to_json());
  CHECK(data.documents == 1);
  CHECK(data.val_documents == 0);
  CHECK(data.split_warning.empty());
  CHECK(data.train.to_vector() == std::vector<int32_t>(ids.begin(), ids.begin() + n_train));
  CHECK(data.val.to_vector() == std::vector<int32_t>(ids.begin() + n_train, ids.end()));
}

TEST_CASE("corpus: a file compressed in a format tfm does not read is refused, naming the format",
          "[data][corpus]") {
  const Dir d("packed");
  const TokenCacheOptions o = options(d.file("cache"));
  const auto error_of = [&](const std::string& spec) {
    return corpus_error_of([&] { open_token_cache(spec, Tokenizer::Kind::Byte, o); });
  };
  const std::string tail(64, 'x');
  const std::vector<std::pair<std::string, std::string>> packed = {
      {"a.txt.xz", std::string("\xFD\x37\x7A\x58\x5A\x00", 6) + tail},
      {"a.txt.bz2", "BZh91AY&SY" + tail},
      {"a.txt.lz4", std::string("\x04\x22\x4D\x18", 4) + tail},
      {"a.zip", std::string("PK\x03\x04", 4) + tail},
      {"a.7z", std::string("\x37\x7A\xBC\xAF\x27\x1C", 6) + tail}};
  for (const auto& [name, bytes] : packed) {
    INFO(name);
    write_corpus_input(d.file(name), bytes);
    const std::string e = error_of(d.file(name));
    CHECK_THAT(e, Catch::StartsWith(d.file(name) + ": is "));
    CHECK_THAT(e, Catch::Contains("which tfm does not read (it would train on the compressed bytes)"));
    CHECK_THAT(e, Catch::Contains("or recompress the text as .gz or .zst"));
  }
  CHECK_THAT(error_of(d.file("a.txt.xz")),
             Catch::Contains(": is xz-compressed") && Catch::Contains("(unxz)"));
  CHECK_THAT(error_of(d.file("a.txt.bz2")), Catch::Contains(": is bzip2-compressed"));
  CHECK_THAT(error_of(d.file("a.zip")),
             Catch::Contains(": is a zip archive") && Catch::Contains("extract it"));
  // Text that merely begins like a magic is text.
  write_corpus_input(d.file("bzh.txt"), "BZh9 is how a bzip2 file begins\n");
  CHECK(open_token_cache(d.file("bzh.txt"), Tokenizer::Kind::Byte, o).tokens.size() == 32);

  // gzip and zstd under another name: renaming it is the fix, and then it reads.
  write_corpus_input(d.file("g.txt"), gzip("gzipped text\n"));
  CHECK_THAT(
      error_of(d.file("g.txt")),
      Catch::Contains(d.file("g.txt") + ": holds gzip-compressed data, but its name does not end in .gz") &&
          Catch::Contains("rename it to end in .gz"));
  write_corpus_input(d.file("z.jsonl"), zstd(jsonl_line("text", "zstd text")));
  CHECK_THAT(error_of(d.file("z.jsonl")), Catch::Contains("rename it to end in .zst"));
  write_corpus_input(d.file("z.txt.gz"), zstd("zstd text"));
  CHECK_THAT(error_of(d.file("z.txt.gz")),
             Catch::Contains("zstd-compressed data, but its name does not end in .zst"));
  fs::rename(d.file("g.txt"), d.file("g.txt.gz"));
  CHECK(open_token_cache(d.file("g.txt.gz"), Tokenizer::Kind::Byte, o).tokens.size() == 13);

  // A walk: a .txt holding xz is refused as a named file is; a .txt.xz is left out, and said.
  write_corpus_input(d.file("walk/a.txt"), "plain text\n");
  write_corpus_input(d.file("walk/b.txt.xz"), packed[0].second);
  write_corpus_input(d.file("walk/c.jsonl.bz2"), packed[1].second);
  std::vector<std::string> notes;
  CHECK(paths(list_corpus(d.file("walk"), &notes), d.path) == std::vector<std::string>{"walk/a.txt"});
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == d.file("walk") + ": left out 2 files (" + d.file("walk/b.txt.xz") + ", " +
                        d.file("walk/c.jsonl.bz2") +
                        "), compressed in a format tfm does not read: decompress them, or recompress them as "
                        ".gz or .zst, to train on them");
  const Dataset data = load_dataset(d.file("walk"), "byte", 0.5, 2, o);
  CHECK(data.warnings() == notes);  // said at every start, as skipped records are
  fs::remove(d.file("walk/a.txt"));
  CHECK_THAT(corpus_error_of([&] { list_corpus(d.file("walk")); }),
             Catch::Contains("holds no corpus file") && Catch::Contains("left out 2 files"));
  write_corpus_input(d.file("walk/a.txt"), packed[0].second);
  CHECK_THAT(error_of(d.file("walk")), Catch::Contains(d.file("walk/a.txt") + ": is xz-compressed"));
}

TEST_CASE("corpus: a walk takes corpus names in any case, reads .text, and says what it left out, .md too",
          "[data][corpus]") {
  const Dir d("names");
  const std::string m = d.file("mixed");
  write_corpus_input(m + "/one.txt", "one\n");
  write_corpus_input(m + "/TWO.TXT", "two\n");
  write_corpus_input(m + "/three.md", "# three\n");
  write_corpus_input(m + "/five.text", "five\n");
  write_corpus_input(m + "/Six.JSONL.GZ", gzip(jsonl_line("text", "six")));
  write_corpus_input(m + "/seven.Txt.Zst", zstd("seven\n"));
  write_corpus_input(m + "/sub/eight.MD", "eight\n");
  write_corpus_input(m + "/four.json", "{\"text\": \"four\"}\n");
  write_corpus_input(m + "/sub/photo.png", "\x89PNG");
  write_corpus_input(m + "/nine.TXT.XZ", std::string("\xFD\x37\x7A\x58\x5A\x00", 6) + "xz");
  write_corpus_input(m + "/.hidden.json", "hidden: not said");
  std::vector<std::string> notes;
  CHECK(paths(list_corpus(m, &notes), d.path) ==
        std::vector<std::string>{"mixed/Six.JSONL.GZ", "mixed/TWO.TXT", "mixed/five.text", "mixed/one.txt",
                                 "mixed/seven.Txt.Zst"});
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] == m + ": left out 1 file (" + m +
                        "/nine.TXT.XZ), compressed in a format tfm does not read: decompress them, or "
                        "recompress them as .gz or .zst, to train on them");
  CHECK(notes[1] ==
        m + ": left out 4 files (" + m + "/four.json, " + m + "/sub/eight.MD, " + m + "/sub/photo.png, " + m +
            "/three.md), not named as corpus files (.txt, .text or .jsonl, plain, .gz "
            "or .zst, in any case): a file data.path names (alone, in a list or by a glob) is read "
            "whatever its name");
  // Each is read by its name in any case: the .GZ decompressed, the .JSONL's record's text.
  const Dataset data = load_dataset(m, "char", 0.2, 2, options(d.file("cache")));
  CHECK(data.documents == 5);
  CHECK(data.warnings() == notes);  // said at every start
  CHECK(data.tokenizer.decode(data.train.to_vector()) == std::string("six") + kEndOfText + "two\n" +
                                                             kEndOfText + "five\n" + kEndOfText + "one\n" +
                                                             kEndOfText);
  CHECK(data.tokenizer.decode(data.val.to_vector()) == "seven\n");  // the last of 5 documents validates
  // A file named in data.path: its name's case does not matter either.
  CHECK(
      open_token_cache(m + "/Six.JSONL.GZ", Tokenizer::Kind::Byte, options(d.file("cache"))).tokens.size() ==
      3);

  // Thousands of such names: a count and the first five, never a list of them all.
  for (int i = 0; i < 300; ++i) write_corpus_input(m + "/many/" + std::to_string(1000 + i) + ".csv", "x");
  notes.clear();
  list_corpus(m, &notes);
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[1], Catch::Contains(": left out 304 files (") &&
                           Catch::Contains("/many/1003.csv, ...), not named as corpus files"));
  CHECK(notes[1].size() < 500);
  // A folder of other names only is refused, and the error says what it saw.
  CHECK_THAT(corpus_error_of([&] { list_corpus(m + "/many"); }),
             Catch::Contains("holds no corpus file (.txt, .text or .jsonl, plain, .gz or .zst, in any "
                             "case; hidden entries skipped)") &&
                 Catch::Contains("left out 300 files ("));
}

TEST_CASE("corpus: a walk reads a file reached twice through links once, follows folder links, says so",
          "[data][corpus]") {
  const Dir d("links");
  write_corpus_input(d.file("c/a.txt"), "alpha text\n");
  write_corpus_input(d.file("c/b.txt"), "beta text\n");
  write_corpus_input(d.file("elsewhere/o.txt"), "other text\n");
  fs::create_symlink("a.txt", d.file("c/link_a.txt"));                 // a file link beside its target
  fs::create_symlink("link_a.txt", d.file("c/0_link.txt"));            // sorts before its target
  fs::create_hard_link(d.file("c/b.txt"), d.file("c/z_hard.txt"));     // a hard link: the same inode
  fs::create_directory_symlink("../elsewhere", d.file("c/more"));      // a folder link: followed
  fs::create_directory_symlink(".", d.file("c/more/loop"));            // leads back up: not followed
  fs::create_symlink(d.file("nowhere/x.pdf"), d.file("c/notes.pdf"));  // dangling, not a corpus name
  std::vector<std::string> notes;
  CHECK(paths(list_corpus(d.file("c"), &notes), d.path) ==
        std::vector<std::string>{"c/a.txt", "c/b.txt", "c/more/o.txt"});
  const std::string c = d.file("c");
  REQUIRE(notes.size() == 3);
  CHECK(notes[0] == c + ": did not follow 1 folder (" + c + "/more/loop = " + d.file("elsewhere") +
                        "), reached through a link, that the walk was already inside (a loop of links)");
  CHECK(notes[1] == c + ": left out 1 link (" + c + "/notes.pdf -> " + d.file("nowhere/x.pdf") +
                        ") whose target does not exist (not named as corpus files)");
  CHECK(notes[2] == c + ": left out 3 files (" + c + "/0_link.txt (the same file as " + c + "/a.txt), " + c +
                        "/link_a.txt (the same file as " + c + "/a.txt), " + c +
                        "/z_hard.txt (the same file as " + c +
                        "/b.txt)), reached a second time through a link (symbolic or hard): each file is "
                        "read once");
  // The run says it at every start; the hard link is not a second document (it was the validation one).
  const Dataset data = load_dataset(c, "char", 0.3, 2, options(d.file("cache")));
  CHECK(data.documents == 3);
  CHECK(data.warnings() == notes);
  CHECK(data.tokenizer.decode(data.val.to_vector()) == "other text\n");

  // Two entries the user wrote that are one file: named twice, both ways of naming it said.
  const std::string twice = nlohmann::json::array({d.file("c/a.txt"), d.file("c/link_a.txt")}).dump();
  CHECK_THAT(corpus_error_of([&] { list_corpus(twice); }),
             Catch::Contains("data.path: " + d.file("c/link_a.txt") + " is named twice (as " +
                             d.file("c/a.txt") + " too, the same file)"));
  const std::string hard = nlohmann::json::array({d.file("c/b.txt"), d.file("c/z_hard.txt")}).dump();
  CHECK_THAT(corpus_error_of([&] { list_corpus(hard); }), Catch::Contains("z_hard.txt is named twice"));
  // A glob is one entry: a file and a link to it are read once.
  notes.clear();
  CHECK(paths(list_corpus(d.file("c/*.txt"), &notes), d.path) ==
        std::vector<std::string>{"c/a.txt", "c/b.txt"});
  CHECK(notes.size() == 1);

  // A link named as a corpus file whose target is gone: the corpus is missing data, an error naming it.
  fs::create_symlink(d.file("nowhere/gone.txt"), d.file("c/gone.txt"));
  const std::string gone = c + "/gone.txt: is a symbolic link to " + d.file("nowhere/gone.txt") +
                           ", which does not exist (data.path entry " + c +
                           "): a file of the corpus is missing; restore its target or remove the link";
  CHECK_THAT(corpus_error_of([&] { list_corpus(c); }), Catch::Contains(gone));
  CHECK_THAT(corpus_error_of([&] { list_corpus(c + "/gone.txt"); }),
             Catch::Contains(c + "/gone.txt: is a symbolic link to"));
}

TEST_CASE("corpus: data.path \".\" is named after its folder, and a walk leaves tfm's runs out",
          "[data][corpus]") {
  const Dir d("dot");
  write_corpus_input(d.file("w/a.txt"), "the corpus\n");
  write_corpus_input(d.file("w/runs/a/config.json"), "{}");
  write_corpus_input(d.file("w/runs/a/metrics.jsonl"), "{\"step\": 1}\n");
  write_corpus_input(d.file("w/runs/b/config.json"), "{}");
  write_corpus_input(d.file("w/runs/b/best.ckpt"), "x");
  write_corpus_input(d.file("w/runs/b/notes.txt"), "in a run folder");
  write_corpus_input(d.file("w/runs/s/sweep.jsonl"), "{\"point\": 1}\n");
  write_corpus_input(d.file("w/data/config.json"), "{}");  // a config alone is no run
  write_corpus_input(d.file("w/data/x.jsonl"), jsonl_line("text", "kept"));
  for (const std::string& spec :
       {d.file("w") + "/.", d.file("w") + "/./", d.file("w/data/.."), d.file("w")}) {
    INFO(spec);
    CHECK(corpus_name(spec) == "w");
    std::vector<std::string> notes;
    CHECK(paths(list_corpus(spec, &notes), d.file("w")) == std::vector<std::string>{"a.txt", "data/x.jsonl"});
    REQUIRE(notes.size() == 2);  // the tfm outputs, then the config alone: not a corpus file's name
    CHECK_THAT(notes[0], Catch::Contains(": left out 3 tfm outputs (") && Catch::Contains("runs/a, ") &&
                             Catch::Contains("runs/s/sweep.jsonl): a run's folder "
                                             "(config.json with metrics.jsonl, "
                                             "train.log or a checkpoint)"));
  }
  // The cache of "w/." is w's, never the hidden ".char.tokens".
  const TokenCache c = open_token_cache(d.file("w") + "/.", Tokenizer::Kind::Char, options(d.file("cache")));
  CHECK_THAT(c.path, Catch::Contains("/w.char.tokens") || Catch::Contains("/w-"));
  CHECK_THAT(c.path, !Catch::Contains("/.char.tokens"));
}

TEST_CASE("corpus: a corpus moved or copied with its default cache keeps the cache", "[data][corpus]") {
  const Dir d("move");
  write_corpus_input(d.file("one/c/a.txt"), "first file\n");
  write_corpus_input(d.file("one/c/sub/b.jsonl"),
                     jsonl_line("text", "a record") + jsonl_line("text", "another"));
  write_corpus_input(d.file("one/big.txt"), "a single file corpus\n");
  std::vector<std::string> log;
  const TokenCacheOptions o = options("", &log);  // the default cache: beside a file, inside a folder
  const TokenCache first = open_token_cache(d.file("one/c"), Tokenizer::Kind::Char, o);
  CHECK(first.built);
  CHECK(first.path == d.file("one/c/.tfm-cache/c.char.tokens"));
  CHECK(open_token_cache(d.file("one/big.txt"), Tokenizer::Kind::Char, o).path ==
        d.file("one/.tfm-cache/big.txt.char.tokens"));

  // The folder moved elsewhere: its cache went with it and is used as is.
  fs::create_directories(d.file("two"));
  fs::rename(d.file("one/c"), d.file("two/c"));
  log.clear();
  const TokenCache moved = open_token_cache(d.file("two/c"), Tokenizer::Kind::Char, o);
  INFO((log.empty() ? "" : log[0]));
  CHECK_FALSE(moved.built);
  CHECK(moved.path == d.file("two/c/.tfm-cache/c.char.tokens"));
  CHECK(moved.tokens.to_vector() == first.tokens.to_vector());
  // Copied (new file times: the files' bytes are hashed again, and are the same).
  fs::create_directories(d.file("three"));
  fs::copy(d.file("two/c"), d.file("three/c"), fs::copy_options::recursive);
  CHECK_FALSE(open_token_cache(d.file("three/c"), Tokenizer::Kind::Char, o).built);
  // A file with its .tfm-cache folder, moved together.
  fs::create_directories(d.file("four"));
  fs::rename(d.file("one/big.txt"), d.file("four/big.txt"));
  fs::rename(d.file("one/.tfm-cache"), d.file("four/.tfm-cache"));
  CHECK_FALSE(open_token_cache(d.file("four/big.txt"), Tokenizer::Kind::Char, o).built);
  // Every other reason still rebuilds, naming files by where they are now.
  write_corpus_input(d.file("two/c/new.txt"), "new\n");
  log.clear();
  CHECK(open_token_cache(d.file("two/c"), Tokenizer::Kind::Char, o).built);
  CHECK(corpus_logged(
      log, "the corpus's files changed since it was tokenized (added: " + d.file("two/c/new.txt") + ")"));
  fs::remove(d.file("three/c/a.txt"));
  log.clear();
  CHECK(open_token_cache(d.file("three/c"), Tokenizer::Kind::Char, o).built);
  CHECK(corpus_logged(log, "(removed: " + d.file("three/c/a.txt") + ")"));
}

TEST_CASE("corpus: two corpora of one name in a shared data.cache_dir keep a cache each", "[data][corpus]") {
  const Dir d("shared");
  write_corpus_input(d.file("x/train.jsonl"),
                     jsonl_line("text", "the first corpus") + jsonl_line("text", "two"));
  write_corpus_input(d.file("y/train.jsonl"),
                     jsonl_line("text", "another one") + jsonl_line("text", "three"));
  const TokenCacheOptions shared = options(d.file("shared_cache"));
  const TokenCache x = open_token_cache(d.file("x/train.jsonl"), Tokenizer::Kind::Char, shared);
  const TokenCache y = open_token_cache(d.file("y/train.jsonl"), Tokenizer::Kind::Char, shared);
  CHECK(x.built);
  CHECK(y.built);
  CHECK(x.path != y.path);
  // train.jsonl-<8 hex digits of where the corpus is>.char.tokens
  CHECK_THAT(x.path,
             Catch::StartsWith(d.file("shared_cache/train.jsonl-")) && Catch::EndsWith(".char.tokens"));
  CHECK(fs::path(x.path).filename().string().size() ==
        std::string("train.jsonl-12345678.char.tokens").size());
  // Alternating between them rebuilds neither.
  for (int round = 0; round < 2; ++round) {
    CHECK_FALSE(open_token_cache(d.file("x/train.jsonl"), Tokenizer::Kind::Char, shared).built);
    CHECK_FALSE(open_token_cache(d.file("y/train.jsonl"), Tokenizer::Kind::Char, shared).built);
  }
  // The same corpus spelled another way is the same cache; the default folder keeps the plain name.
  CHECK(token_cache_path(d.file("x/../x/train.jsonl"), d.file("shared_cache"), Tokenizer::Kind::Char) ==
        x.path);
  CHECK(token_cache_path(d.file("x/train.jsonl"), d.file("x/.tfm-cache"), Tokenizer::Kind::Char) ==
        d.file("x/.tfm-cache/train.jsonl.char.tokens"));
}
