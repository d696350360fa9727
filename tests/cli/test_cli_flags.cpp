// Every numeric flag of the command line is range- and type-checked like a config key: a bad value
// exits 2 with a message that names the flag and the allowed range.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli_run.h"

TEST_CASE("cli flags: bad numeric values exit 2 naming the flag and the range", "[cli][flags]") {
  const std::string dir = tfm_test::scratch_path("flags", "run");
  tfm_test::CliRun r =
      tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + " --set train.max_steps=2");
  REQUIRE(r.status == 0);
  struct Case {
    std::string args, fragment;
  };
  const std::string run = " --run " + dir;
  const std::vector<Case> cases = {
      {"eval" + run + " --batches 0", "--batches: expected an integer in [1, 1000000000], got \"0\""},
      {"eval" + run + " --batches -5", "--batches: expected an integer in [1, "},
      {"eval" + run + " --batches 2.5", "--batches: expected an integer in [1, "},
      {"eval" + run + " --batches lots", "--batches: expected an integer in [1, "},
      {"sample" + run + " --max-new-tokens -1", "--max-new-tokens: expected an integer in [0, 1000000000]"},
      {"sample" + run + " --max-new-tokens 1e12", "--max-new-tokens: expected an integer in [0, "},
      {"sample" + run + " --temperature -0.5", "--temperature: expected a number in [0, 100], got \"-0.5\""},
      {"sample" + run + " --temperature nan", "--temperature: expected a number in [0, 100]"},
      {"sample" + run + " --temperature inf", "--temperature: expected a number in [0, 100]"},
      {"sample" + run + " --top-k -1", "--top-k: expected an integer >= 0, got \"-1\""},
      {"sample" + run + " --top-k 2.5", "--top-k: expected an integer >= 0, got \"2.5\""},
      {"sample" + run + " --top-k 99999999999999999999", "--top-k: expected an integer >= 0, got \"9999"},
      {"sample" + run + " --seed -3", "--seed: expected an integer in [0, 9223372036854775807]"},
      {"info --config configs/tiny.json --vocab-size 0", "--vocab-size: expected an integer in [1, "},
      {"tokenizer train --data x --out y --vocab-size 255",
       "--vocab-size: expected an integer in [256, 1048576]"},
      {"bench gemm --threads -1", "--threads: expected an integer in [0, 1024]"},
      {"bench gemm --n 8", "--n: expected an integer in [16, 8192]"},
      {"bench gemm --seconds 0", "--seconds: expected a number in [0.01, 60]"},
      {"translate --run x --length-penalty -1", "--length-penalty: expected a number in [0, 10], got \"-1\""},
  };
  for (const Case& c : cases) {
    r = tfm_test::run_tfm(c.args);
    INFO("tfm " << c.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(c.fragment));
  }
  // The edges of each range are accepted.
  CHECK(tfm_test::run_tfm("eval" + run + " --batches 1").status == 0);
  CHECK(tfm_test::run_tfm("sample" + run + " --max-new-tokens 0 --top-k 56 --temperature 0").status == 0);
  // A top-k past the vocabulary (56 tokens) keeps every token, as Hugging Face's and llama.cpp's do.
  CHECK(tfm_test::run_tfm("sample" + run + " --max-new-tokens 2 --top-k 57").status == 0);
  CHECK(tfm_test::run_tfm("sample" + run + " --max-new-tokens 2 --top-k 9223372036854775807").status == 0);
}

TEST_CASE("cli flags: a mistyped command or flag is named as tfm's own error, with what was meant",
          "[cli][flags]") {
  struct Case {
    std::string args;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"trian",
       {"tfm: error: tfm: unknown command \"trian\" (did you mean train?); the commands: train, ",
        "`tfm --help` shows its usage, with examples"}},
      {"bench gemmm", {"tfm: error: tfm bench: unknown command \"gemmm\" (did you mean gemm?)"}},
      // A mistyped command after an unknown flag is not taken for the flag's value.
      {"--foo trian",
       {"tfm: error: tfm: unknown command \"trian\" (did you mean train?)", "--foo is not a flag of tfm"}},
      // A flag given twice is named once.
      {"sample --run x --temp 0.5 --temp 0.7",
       {"tfm: error: tfm sample: --temp is not a flag of tfm sample (did you mean --temperature?)\n"}},
      {"frobnicate", {"tfm: error: tfm: unknown command \"frobnicate\"; the commands: "}},
      {"sample --run x --promt hi",
       {"tfm: error: tfm sample: ", "--promt is not a flag of tfm sample (did you mean --prompt?)",
        "`tfm sample --help` shows its usage, with examples"}},
      {"train --config", {"tfm: error: tfm train: --config: 1 required FILE missing"}},
      {"config --keys --config configs/tiny.json", {"tfm: error: tfm config: --config excludes --keys"}},
      {"sample --run x --max-new-tokens 5 --max-new-tokens 3",
       {"tfm: error: tfm sample: --max-new-tokens: given 2 times; it takes one value"}},
      // The unknown flag first; the value after it is its own, not a second thing not expected.
      {"sample --run x --temp 0.5",
       {"tfm: error: tfm sample: --temp is not a flag of tfm sample (did you mean --temperature?)\n"}},
      {"sample --run x --temp=0.5",
       {"tfm sample: --temp is not a flag of tfm sample (did you mean --temperature?)"}},
      // The one flag a prefix begins; the flags it may begin when it is several.
      {"sample --run x --max-new 5",
       {"--max-new is not a flag of tfm sample (did you mean --max-new-tokens?)"}},
      {"sample --run x --top 5", {"--top is not a flag of tfm sample (did you mean --top-k or --top-p?)"}},
      {"sample --run x --josn", {"--josn is not a flag of tfm sample (did you mean --json?)"}},
      // llama.cpp's and Hugging Face's spellings.
      {"sample --run x -n 5", {"-n is not a flag of tfm sample (did you mean --max-new-tokens?)"}},
      {"sample --run x --n-predict 5",
       {"--n-predict is not a flag of tfm sample (did you mean --max-new-tokens?)"}},
      {"sample --run x -p hi", {"-p is not a flag of tfm sample (did you mean --prompt?)"}},
      {"sample --run x --repeat-penalty 1.1",
       {"--repeat-penalty is not a flag of tfm sample (did you mean --repetition-penalty?)"}},
      {"sample --run x --top_k 5", {"--top_k is not a flag of tfm sample (did you mean --top-k?)"}},
      {"sample --run x --max_new_tokens 5",
       {"--max_new_tokens is not a flag of tfm sample (did you mean --max-new-tokens?)"}},
      {"sample --run x --num_return_sequences 2",
       {"--num_return_sequences is not a flag of tfm sample (did you mean --num-samples?)"}},
      // Two unknown flags, in the order typed; another error of the parser after them.
      {"sample --run x --temp 0.5 -n 3",
       {"tfm sample: --temp is not a flag of tfm sample (did you mean --temperature?); -n is not a flag of "
        "tfm sample (did you mean --max-new-tokens?)\n"}},
      {"eval --temp 0.5", {"tfm: error: tfm eval: --temp is not a flag of tfm eval; --run is required\n"}},
      // A word no unknown flag takes is named as not expected, in the order typed.
      {"sample --run x hello world", {"tfm: error: tfm sample: arguments not expected: hello world\n"}},
      {"sample --run x --temp 0.5 hello",
       {"tfm sample: --temp is not a flag of tfm sample (did you mean --temperature?); an argument not "
        "expected: hello\n"}},
      {"bench --temp 0.5", {"tfm: error: tfm bench: --temp is not a flag of tfm bench"}},
  };
  for (const Case& c : cases) {
    const tfm_test::CliRun r = tfm_test::run_tfm(c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 2);
    for (const std::string& f : c.fragments) CHECK_THAT(r.out, Catch::Contains(f));
    CHECK_THAT(r.out, !Catch::Contains("did you mean --help"));
  }
  const tfm_test::CliRun v = tfm_test::run_tfm("--version");
  CHECK(v.status == 0);
  CHECK_THAT(v.out, Catch::StartsWith("tfm ") && !Catch::Contains("error"));
}
