// tfm tokenizer encode / decode: GPT-2's ids of a text (as js-tiktoken's gpt2 gives them), the text of
// ids, a run's own tokenizer, and the refusals of bad flags and ids.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "cli_run.h"

namespace {

using tfm_test::CliRun;
using tfm_test::run_tfm;
using tfm_test::TempDir;

const std::string kTokenizerIoGpt2 = "--config configs/tiny.json --set data.tokenizer=gpt2 ";

}  // namespace

TEST_CASE("tokenizer cli: encode and decode with GPT-2's tokenizer", "[tokenizer][cli]") {
  CliRun r = run_tfm("tokenizer encode " + kTokenizerIoGpt2 + "--text \"Hello world, it's 2024\"");
  INFO(r.out);
  REQUIRE(r.status == 0);
  // js-tiktoken's gpt2: "Hello", " world", ",", " it", "'s", " 2024"
  CHECK(r.out == "[15496,995,11,340,338,48609]\n");
  r = run_tfm("tokenizer decode " + kTokenizerIoGpt2 + "--ids '[15496, 995, 50256, 11]'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out == "Hello world<|endoftext|>,");

  TempDir tmp("tokenizer_io");
  const std::string text = tmp.file("text.txt"), ids = tmp.file("ids.json");
  std::ofstream(text, std::ios::binary) << "naïve café\n\n  中文 👍🏽\t";
  // The ids to a file, --stats's line (stderr) to the output.
  r = tfm_test::run_shell("(" + tfm_test::tfm_command() + " tokenizer encode " + kTokenizerIoGpt2 +
                          "--file " + text + " --stats > " + ids + ")");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tokens (gpt2 tokenizer, vocabulary 50257)") && Catch::Contains("MB/s"));
  r = run_tfm("tokenizer decode " + kTokenizerIoGpt2 + "--file " + ids);
  REQUIRE(r.status == 0);
  CHECK(r.out == "naïve café\n\n  中文 👍🏽\t");
}

TEST_CASE("tokenizer cli: a char config's vocabulary, and bad input refused with exit 2",
          "[tokenizer][cli]") {
  // stdout alone: the first test to read tiny Shakespeare tokenizes it, saying so on stderr.
  CliRun r =
      tfm_test::run_shell("{ " + tfm_test::tfm_command() +
                          " tokenizer encode --config configs/tiny.json --text 'First' 2>/dev/null; }");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.front() == '[');
  r = run_tfm("tokenizer encode --config configs/tiny.json --text '中'");  // not in tiny Shakespeare
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("is not in the vocabulary"));
  r = run_tfm("tokenizer encode " + kTokenizerIoGpt2 + "--text a --file b");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text, --file: give exactly one of them"));
  // An empty text is given, and said to be empty (not "give exactly one of them").
  r = run_tfm("tokenizer encode --run runs/none --text ''");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text: the text is empty; give the text to encode"));
  r = run_tfm("tokenizer encode " + kTokenizerIoGpt2 + "--text \"\"");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text: the text is empty") && !Catch::Contains("exactly one"));
  r = run_tfm("tokenizer decode " + kTokenizerIoGpt2 + "--ids ''");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--ids: expected a JSON array of token ids"));
  r = run_tfm("tokenizer encode " + kTokenizerIoGpt2 + "--side target --text a");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--side target: configs/tiny.json trains train.objective \"causal_lm\""));
  r = run_tfm("tokenizer encode " + kTokenizerIoGpt2 + "--side left --text a");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--side") && Catch::Contains("source") && Catch::Contains("target"));
  r = run_tfm("tokenizer encode --text a");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--config, --run: give exactly one of them"));
  r = run_tfm("tokenizer decode " + kTokenizerIoGpt2 + "--ids '[1, 50257]'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("--ids: entry 1 (counted from 0) is 50257, expected an integer in [0, 50257)"));
  r = run_tfm("tokenizer decode " + kTokenizerIoGpt2 + "--ids '[1,'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--ids: expected a JSON array of token ids"));
  r = run_tfm(
      "tokenizer encode --config configs/tiny.json --set data.tokenizer=gpt2 "
      "--set data.tokenizer_path=/nonexistent/tok --text a");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("data.tokenizer_path: /nonexistent/tok: no such file or directory"));
}
