// BPE through the tokenizer plumbing and the CLI: tfm tokenizer train -> data.tokenizer = "bpe" ->
// train 20 steps -> sample; checkpoints keep the merges; any byte string (Chinese, invalid UTF-8)
// round-trips through tfm::Tokenizer.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli_run.h"
#include "tfm/bpe.h"
#include "tfm/checkpoint.h"
#include "tfm/data.h"
#include "tfm/error.h"
#include "tfm/file_io.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;
using tfm_test::run_shell;
using tfm_test::run_tfm;
using tfm_test::TempDir;

}  // namespace

TEST_CASE("bpe tokenizer: Chinese and arbitrary bytes round-trip through tfm::Tokenizer and its JSON",
          "[bpe][data]") {
  const std::string zh =
      "\xe5\xba\x8a\xe5\x89\x8d\xe6\x98\x8e\xe6\x9c\x88\xe5\x85\x89\xef\xbc\x8c"
      "\xe7\x96\x91\xe6\x98\xaf\xe5\x9c\xb0\xe4\xb8\x8a\xe9\x9c\x9c\xe3\x80\x82";  // 床前明月光，疑是地上霜。
  std::string text;
  for (int i = 0; i < 20; ++i) text += zh + " Hello, world! " + std::to_string(i) + "\n";
  const tfm::Tokenizer tok(tfm::BpeTokenizer::train(text, 300));
  CHECK(tok.kind() == tfm::Tokenizer::Kind::Bpe);
  CHECK(tok.kind_name() == "bpe");
  CHECK(tok.size() > 256);  // stops early when no pair occurs twice
  CHECK(tok.size() <= 300);
  const std::vector<int32_t> ids = tok.encode(zh, "zh");
  CHECK(ids.size() < zh.size());  // merges learned on the Chinese text apply
  CHECK(tok.decode(ids) == zh);
  const std::string odd =
      std::string("\xff\xfe\x00 caf\xc3\xa9 \xe5\xba", 12);  // invalid UTF-8, NUL, cut char
  CHECK(tok.decode(tok.encode(odd, "odd")) == odd);
  std::string pieces;  // token by token (as sample streams it) gives the same bytes
  for (int32_t id : ids) pieces += tok.decode(id);
  CHECK(pieces == zh);

  const tfm::Tokenizer back = tfm::Tokenizer::from_json(tok.to_json());
  CHECK(back.size() == tok.size());
  CHECK(back.encode(text, "text") == tok.encode(text, "text"));
  // A merge referring to a token that does not exist yet is refused.
  CHECK_THROWS_AS(tfm::Tokenizer::from_json({{"kind", "bpe"}, {"merges", {{1, 999}}}}), tfm::IoError);
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
  CHECK(r.out.rfind("ROMEO:", 0) == 0);
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
