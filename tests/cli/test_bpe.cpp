// BPE through the tokenizer plumbing and the CLI: tfm tokenizer train -> data.tokenizer = "bpe" ->
// train 20 steps -> sample; checkpoints keep the merges; any byte string (Chinese, invalid UTF-8)
// round-trips through tfm::Tokenizer.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "tfm/data/bpe.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/checkpoint.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;
using tfm_test::run_shell;
using tfm_test::run_tfm;
using tfm_test::TempDir;

}  // namespace

TEST_CASE("bpe cli: tokenizer train reads its corpus as data.path is read: gzip, JSON Lines, a folder",
          "[bpe][cli]") {
  TempDir tmp("bpe_corpus");
  const std::string text =
      tfm_test::read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  const size_t cut = text.find('\n', text.size() / 2);
  REQUIRE(cut != std::string::npos);
  const std::string first = text.substr(0, cut), second = text.substr(cut + 1);
  std::ofstream(tmp.path + "/plain.txt") << text;
  fs::create_directories(tmp.path + "/folder");
  std::ofstream(tmp.path + "/folder/a.txt") << first;  // documents are joined by a newline
  std::ofstream(tmp.path + "/folder/b.txt") << second;
  std::ofstream(tmp.path + "/records.jsonl") << nlohmann::json{{"content", first}}.dump() << "\n"
                                             << nlohmann::json{{"content", second}}.dump() << "\n";
  REQUIRE(run_shell("gzip -c " + tmp.path + "/plain.txt > " + tmp.path + "/plain.txt.gz").status == 0);
  const auto learn = [&](const std::string& data, const std::string& name) {
    const CliRun r =
        run_tfm("tokenizer train --vocab-size 300 --data " + data + " --out " + tmp.path + "/" + name);
    INFO(r.out);
    CHECK(r.status == 0);
    return tfm_test::read_file(tmp.path + "/" + name);
  };
  const std::string plain = learn(tmp.path + "/plain.txt", "plain.json");
  CHECK(learn(tmp.path + "/plain.txt.gz", "gz.json") == plain);  // the text, not the compressed bytes
  CHECK(learn(tmp.path + "/folder", "folder.json") == plain);
  CHECK(learn(tmp.path + "/records.jsonl --text-field content", "jsonl.json") == plain);  // not the JSON
}

TEST_CASE(
    "bpe cli: tokenizer train, train 20 steps with data.tokenizer = bpe, resume-safe checkpoint, sample",
    "[bpe][cli]") {
  TempDir tmp("bpe_e2e");
  const std::string tok = tmp.path + "/tok.json", run = tmp.path + "/run";
  CliRun r = run_tfm("tokenizer train --data tests/data/tiny_shakespeare.txt --vocab-size 400 --out " + tok);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("vocabulary 400") && Catch::Contains("bytes/token"));
  r = run_tfm("train --config configs/tiny.json --out " + run +
              " --set 'data.tokenizer=\"bpe\"' --set "
              "'data.tokenizer_path=\"" +
              tok + "\"' --set train.max_steps=20");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("bpe tokenizer, vocabulary 400"));
  // The checkpoint holds the merges: it loads without the tokenizer file.
  fs::remove(tok);
  const tfm::Checkpoint ck = tfm::load_checkpoint(run + "/last.ckpt");
  CHECK(ck.tokenizer.kind() == tfm::Tokenizer::Kind::Bpe);
  CHECK(ck.tokenizer.size() == 400);
  r = run_tfm("sample --run " + run + " --prompt 'ROMEO:' --max-new-tokens 10 --seed 3");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.rfind("tfm: read " + run + "/", 0) == 0);  // stderr names the checkpoint, then the text
  CHECK(r.out.find(")\nROMEO:") != std::string::npos);
  r = run_tfm("eval --run " + run + " --batches 2");
  CHECK(r.status == 0);

  // Missing or absent tokenizer file: status 2 naming the key.
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path +
              "/r2 --set 'data.tokenizer=\"bpe\"' --set "
              "'data.tokenizer_path=\"" +
              tok + "\"'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("data.tokenizer_path"));
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path + "/r3 --set 'data.tokenizer=\"bpe\"'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("data.tokenizer_path"));
}

TEST_CASE(
    "bpe cli: tokenizer train's bad JSON Lines record names its own flags, --text-field and "
    "--skip-bad-records",
    "[bpe][cli]") {
  TempDir tmp("bpe_bad_record");
  const std::string text =
      tfm_test::read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt").substr(0, 3000);
  std::ofstream(tmp.path + "/r.jsonl") << nlohmann::json{{"text", text}}.dump() << "\n"
                                       << "{\"text\": 3}\n";
  const std::string args =
      "tokenizer train --vocab-size 260 --data " + tmp.path + "/r.jsonl --out " + tmp.path + "/tok.json";
  CliRun r = run_tfm(args);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(tmp.path + "/r.jsonl:2: the field \"text\" (--text-field) is number") &&
                        Catch::Contains("(--skip-bad-records skips such records and counts them)"));
  CHECK_THAT(r.out, !Catch::Contains("data.on_bad_record") && !Catch::Contains("data.text_field"));
  r = run_tfm(args + " --skip-bad-records");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("skipped 1 bad record (--skip-bad-records), the first: " + tmp.path +
                                    "/r.jsonl:2"));
  CHECK(fs::exists(tmp.path + "/tok.json"));
}
