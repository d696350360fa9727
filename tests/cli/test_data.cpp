// tfm data prepare and the token cache end to end (docs/data.md): the command's counts, a resumed run on a
// cached corpus bit-identical to a run that tokenized at its start, a damaged cache rebuilt by eval.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;
using tfm_test::read_file;
using tfm_test::run_tfm;
using tfm_test::TempDir;

// metrics.jsonl without its timing fields: what must be bit-identical between two runs.
std::vector<nlohmann::json> metrics(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* timing : {"elapsed_s", "training_s", "ms_per_step", "tokens_per_s", "mfu"})
      j.erase(timing);
    out.push_back(j);
  }
  return out;
}

// A corpus of its own (tests/data's tiny Shakespeare twice), so the caches here are this test's.
std::string corpus(const TempDir& tmp) {
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  REQUIRE(text.size() > 1000);
  const std::string path = tmp.path + "/text.txt";
  std::ofstream(path, std::ios::binary) << text << text;
  return path;
}

// The one cache file in a data.cache_dir whose name starts with `name` and ends with `kind` ("" when
// there is not exactly one): a cache folder set by the user names files `NAME-<hash of where>.KIND`.
std::string cache_in(const std::string& dir, const std::string& name, const std::string& kind) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.rfind(name + "-", 0) == 0 && f.size() == name.size() + 9 + kind.size() &&
        f.compare(f.size() - kind.size(), kind.size(), kind) == 0)
      found.push_back(it->path().string());
  }
  return found.size() == 1 ? found[0] : "";
}

}  // namespace

TEST_CASE("data prepare: builds the cache once, prints the counts, rebuilds when asked", "[cli][data]") {
  const TempDir tmp("data_prepare");
  const std::string text = corpus(tmp);
  const std::string args = "data prepare --config configs/tiny.json --set data.path=" + text;
  CliRun r = run_tfm(args);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("first use"));
  CHECK_THAT(r.out,
             Catch::Contains("16000 tokens (char tokenizer, vocabulary 56, uint16 ids): 1.000 bytes/token"));
  CHECK_THAT(r.out, Catch::Contains("tokenized in"));
  CHECK_THAT(r.out, Catch::Contains("14400 train / 1600 val tokens"));
  CHECK(fs::exists(tmp.path + "/.tfm-cache/text.txt.char.tokens"));
  CHECK_THAT(r.out, !Catch::Contains("warning"));
  // A split too short for one sequence is counted, and said to be one `tfm train` refuses.
  r = run_tfm(args + " --set train.seq_len=2000 --set model.max_seq_len=2000");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("warning: the validation split has 1600 tokens, and one sequence of "
                                    "train.seq_len = 2000 needs 2002: `tfm train` refuses this config"));
  CHECK_THAT(r.out, !Catch::Contains("the training split"));

  r = run_tfm(args);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("is up to date"));
  CHECK_THAT(r.out, !Catch::Contains("tokenizing"));
  r = run_tfm(args + " --rebuild --set data.tokenizer=byte --set data.cache_dir=" + tmp.path + "/c");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("rebuilding it as asked"));
  CHECK_FALSE(cache_in(tmp.path + "/c", "text.txt", ".byte.tokens").empty());

  // Saved on Windows: bytes/token counts the text as read (LF line ends), and the size on disk is said.
  std::string windows;
  for (const char ch : read_file(text)) windows += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  std::ofstream(tmp.path + "/windows.txt", std::ios::binary) << windows;
  r = run_tfm("data prepare --config configs/tiny.json --set data.path=" + tmp.path + "/windows.txt");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("windows.txt: 16000 bytes of text (" + std::to_string(windows.size()) +
                                    " on disk) -> 16000 tokens (char tokenizer, vocabulary 56, uint16 ids): "
                                    "1.000 bytes/token"));

  r = run_tfm("data prepare --config configs/eng_fra_d2l.json");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("the token cache is for text corpora"));
  r = run_tfm("data prepare --config configs/tiny.json --set data.path=" + tmp.path + "/missing.txt");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(tmp.path + "/missing.txt: cannot open"));
}

TEST_CASE("data: a resumed run on a cached corpus is bit-identical to a run that tokenized at its start",
          "[cli][data]") {
  const TempDir tmp("data_resume");
  const std::string text = corpus(tmp);
  const std::string base =
      "--config configs/tiny.json --set data.path=" + text + " --set train.eval_interval=10";

  // A: tokenizes at its start (its own cache directory), 20 steps in one go.
  CliRun r = run_tfm("train " + base + " --set data.cache_dir=" + tmp.path +
                     "/a_cache --set train.max_steps=20 --out " + tmp.path + "/a");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tokenized now"));

  // B: the cache prepared ahead, 10 steps, then resumed to 20: every start maps the cache.
  const std::string b_cache = " --set data.cache_dir=" + tmp.path + "/b_cache";
  REQUIRE(run_tfm("data prepare " + base + b_cache).status == 0);
  r = run_tfm("train " + base + b_cache + " --set train.max_steps=10 --out " + tmp.path + "/b");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("cached, opened in"));
  CHECK_THAT(r.out, !Catch::Contains("tokenizing"));
  r = run_tfm("train --resume " + tmp.path + "/b --set train.max_steps=20");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("cached, opened in"));

  const auto a = metrics(tmp.path + "/a"), b = metrics(tmp.path + "/b");
  REQUIRE(a.size() == 2);
  CHECK(a == b);

  // A damaged cache is named and rebuilt by whoever opens it next; the numbers do not move.
  const std::string cache = cache_in(tmp.path + "/b_cache", "text.txt", ".char.tokens");
  REQUIRE_FALSE(cache.empty());
  const std::string good = read_file(cache);
  std::ofstream(cache, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 100);
  const CliRun e1 = run_tfm("eval --run " + tmp.path + "/a --batches 2");
  const CliRun e2 = run_tfm("eval --run " + tmp.path + "/b --batches 2");
  INFO(e2.out);
  CHECK(e2.status == 0);
  CHECK_THAT(e2.out, Catch::Contains(cache + " (truncated"));
  CHECK(read_file(cache) == good);
  const auto loss = [](const std::string& out) { return out.substr(out.find("val loss"), 16); };
  CHECK(loss(e1.out) == loss(e2.out));
}

TEST_CASE("data prepare: a .bz2 or .xz corpus is refused, not trained on as compressed bytes",
          "[cli][data]") {
  const TempDir tmp("data_packed");
  std::ofstream(tmp.path + "/x.txt.bz2", std::ios::binary) << "BZh91AY&SY" << std::string(200, '\x7f');
  CliRun r = run_tfm("data prepare --config configs/tiny.json --set data.tokenizer=byte --set data.path=" +
                     tmp.path + "/x.txt.bz2");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(tmp.path + "/x.txt.bz2: is bzip2-compressed, which tfm does not read") &&
                        Catch::Contains("decompress it (bunzip2)"));
  CHECK_THAT(r.out, !Catch::Contains("bytes/token"));
  CHECK_FALSE(fs::exists(tmp.path + "/.tfm-cache/x.txt.bz2.byte.tokens"));
  // tokenizer train reads its --data the same way.
  r = run_tfm("tokenizer train --vocab-size 260 --data " + tmp.path + "/x.txt.bz2 --out " + tmp.path +
              "/t.json");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("x.txt.bz2: is bzip2-compressed"));
}

TEST_CASE(
    "data prepare: a split too short for train.seq_len warns with every tokenizer, and train refuses it",
    "[cli][data]") {
  const TempDir tmp("data_short");
  std::ofstream(tmp.path + "/small.txt", std::ios::binary) << "Hello there, small world.\n";
  const std::string args = "--config configs/tiny.json --set data.path=" + tmp.path + "/small.txt";
  for (const std::string tokenizer : {"gpt2", "byte", "char"}) {
    INFO(tokenizer);
    const CliRun r = run_tfm("data prepare " + args + " --set data.tokenizer=" + tokenizer);
    INFO(r.out);
    CHECK(r.status == 0);
    // The config's train.seq_len (32), not the 0 prepare used to check with ("train.seq_len + 2 = 2").
    CHECK_THAT(r.out,
               Catch::Contains("split has ") &&
                   Catch::Contains("one sequence of train.seq_len = 32 needs 34: `tfm train` refuses"));
    CHECK_THAT(r.out, !Catch::Contains("= 2 ("));
  }
  const CliRun r = run_tfm("data prepare " + args + " --set data.tokenizer=gpt2");
  CHECK_THAT(r.out, Catch::Contains("warning: the validation split has 1 token, and one sequence"));
  const CliRun t = run_tfm("train " + args + " --set data.tokenizer=gpt2 --out " + tmp.path + "/run");
  INFO(t.out);
  CHECK(t.status == 2);
  CHECK_THAT(t.out, Catch::Contains("the training split has 6 tokens") &&
                        Catch::Contains("one sequence needs train.seq_len + 2 = 34"));
  CHECK_FALSE(fs::exists(tmp.path + "/run/last.ckpt"));
}

TEST_CASE("data prepare: a file linked twice in a folder is read once, and the warning says so",
          "[cli][data]") {
  const TempDir tmp("data_links");
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  fs::create_directories(tmp.path + "/c");
  std::ofstream(tmp.path + "/c/a.txt", std::ios::binary) << text;
  fs::create_symlink("a.txt", tmp.path + "/c/sub_a.txt");
  const CliRun r = run_tfm("data prepare --config configs/tiny.json --set data.path=" + tmp.path + "/c");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("named twice"));
  CHECK_THAT(r.out, Catch::Contains("warning: " + tmp.path + "/c: left out 1 file (" + tmp.path +
                                    "/c/sub_a.txt (the same file as " + tmp.path +
                                    "/c/a.txt)), reached a second "
                                    "time through a link"));
  CHECK_THAT(r.out, !Catch::Contains("documents:"));  // one document
}

TEST_CASE("data prepare: data.path=. reads the folder it runs in, not the runs kept there", "[cli][data]") {
  const TempDir tmp("data_dot");
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  std::ofstream(tmp.path + "/a.txt", std::ios::binary) << text;
  const CliRun t = run_tfm("train --config configs/tiny.json --set data.path=" + tmp.path +
                           "/a.txt --set train.max_steps=1 --out " + tmp.path + "/runs/a");
  REQUIRE(t.status == 0);
  const CliRun r = run_shell("cd " + tmp.path + " && " + tfm_test::tfm_command() + " data prepare --config " +
                             TFM_SOURCE_DIR + "/configs/tiny.json --set data.path=.");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("metrics.jsonl:1"));
  CHECK_THAT(r.out, Catch::Contains("warning: .: left out 1 tfm output (./runs/a): a run's folder"));
  const std::string name = fs::path(tmp.path).filename().string();
  CHECK_THAT(r.out, Catch::Contains(".tfm-cache/" + name + ".char.tokens"));
  CHECK_FALSE(fs::exists(tmp.path + "/.tfm-cache/.char.tokens"));
}

TEST_CASE("data prepare: a folder's corpus names are read in any case, and the other names are said",
          "[cli][data]") {
  const TempDir tmp("data_names");
  const std::string text = read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  const std::string dir = tmp.path + "/mixed_dir";
  fs::create_directories(dir);
  for (const char* name : {"one.txt", "TWO.TXT", "three.md", "four.json", "five.text"})
    std::ofstream(dir + "/" + name, std::ios::binary) << text.substr(0, 3000);
  const std::string args = "--config configs/tiny.json --set data.path=" + dir;
  const std::string said =
      dir + ": left out 2 files (" + dir + "/four.json, " + dir + "/three.md), not named as corpus files";
  const CliRun r = run_tfm("data prepare " + args);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("documents: 3, joined by <|endoftext|>"));
  CHECK_THAT(r.out, Catch::Contains("warning: " + said));
  // A run says it in its log, at every start.
  const CliRun t = run_tfm("train " + args + " --set train.max_steps=1 --out " + tmp.path + "/run");
  INFO(t.out);
  CHECK(t.status == 0);
  CHECK_THAT(read_file(tmp.path + "/run/train.log"), Catch::Contains(said));
}
