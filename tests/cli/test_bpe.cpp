// BPE through the tokenizer plumbing and the CLI: tfm tokenizer train -> data.tokenizer = "bpe" ->
// train 20 steps -> sample; checkpoints keep the merges; any byte string (Chinese, invalid UTF-8)
// round-trips through tfm::Tokenizer.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
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
