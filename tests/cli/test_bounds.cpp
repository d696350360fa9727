// Every size a user can pass is bounded: by a stated range, or by the memory pre-flight, which refuses
// it with exit 2 naming the flag or key before anything of that size is allocated. The machine's
// memory is set with TFM_AVAILABLE_MEMORY_MB, so each refusal is the same on any machine. And no input
// a user can give ends as an internal error (exit 1).
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/data/tokenizer.h"
#include "tfm/training/checkpoint.h"
#include "tiny_runs.h"

namespace fs = std::filesystem;

namespace {

using tfm_test::CliRun;

// `tfm ARGS` on a machine with 1 GiB available.
CliRun with_1gib(const std::string& args) {
  return tfm_test::run_shell("TFM_AVAILABLE_MEMORY_MB=1024 " + tfm_test::tfm_command() + " " + args);
}

struct Refusal {
  std::string args, fragment;
};

// Each runs to exit 2 with `fragment` (the flag or key and its value) in a "tfm: error:" message.
void check_refusals(const std::vector<Refusal>& cases) {
  for (const Refusal& c : cases) {
    const CliRun r = with_1gib(c.args);
    INFO("tfm " << c.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("tfm: error: ") || Catch::Contains("Run with --help"));
    CHECK_THAT(r.out, Catch::Contains(c.fragment));
    CHECK_THAT(r.out, !Catch::Contains("internal error") && !Catch::Contains("train.batch_size"));
  }
}

}  // namespace

TEST_CASE("bounds: bench sizes past the memory are refused before the benchmark allocates", "[bounds][cli]") {
  check_refusals({
      {"bench attention --d-model 65536 --seq-lens 8,16",
       "--d-model = 65536, --seq-lens up to 16, --batch = 1"},
      {"bench attention --seq-lens 1024,1048576", "--seq-lens up to 1048576"},
      {"bench attention --batch 4096 --seq-lens 1024,4096", "--batch = 4096"},
      {"bench gemm --n 8192 --seconds 0.01", "--n = 8192: bench gemm needs an estimated"},
  });
  // The message says what was estimated against what is available, and what to do.
  const CliRun r = with_1gib("bench attention --d-model 65536 --seq-lens 8,16");
  CHECK_THAT(r.out, Catch::Contains("bench attention needs an estimated") &&
                        Catch::Contains(
                            "more than the 1.0 GiB available to this process (TFM_AVAILABLE_MEMORY_MB)") &&
                        Catch::Contains("make them smaller"));
  // Sizes that fit still run.
  CHECK(with_1gib("bench attention --d-model 16 --heads 2 --seq-lens 8,16 --seconds 0.001 --json").status ==
        0);
}

TEST_CASE("bounds: translate's --beam and --max-len", "[bounds][cli][seq2seq]") {
  const std::string run = " --run " + tfm_test::seq2seq_run() + " --text \"one two.\"";
  check_refusals({
      // Beyond the stated range, and within it but past the memory: named as the beam, not the batch.
      {"translate" + run + " --beam 2147483647", "--beam: expected an integer in [1, 1000000000]"},
      {"translate" + run + " --beam 1000000000", "--beam = 1000000000: translate needs an estimated"},
      {"translate" + run + " --beam 100000000 --text \"three.\"", "--beam = 100000000, 2 --text"},
      // --max-len: the decoder has model.max_seq_len = 8 positions.
      {"translate" + run + " --max-len 9", "--max-len: expected 0 to the model's max_seq_len = 8"},
      {"translate" + run + " --max-len 1000000000", "--max-len: expected 0 to the model's max_seq_len = 8"},
      {"translate" + run + " --max-len -1", "--max-len: expected an integer in [0, "},
  });
  // Lines on stdin go through the same checks before the first line is read.
  const CliRun r =
      tfm_test::run_shell("echo 'one two.' | TFM_AVAILABLE_MEMORY_MB=1024 " + tfm_test::tfm_command() +
                          " translate --run " + tfm_test::seq2seq_run() + " --beam 1000000000");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--beam = 1000000000"));
  // The edges that fit: the longest --max-len, a wide beam.
  CHECK(with_1gib("translate" + run + " --max-len 8").status == 0);
  CHECK(with_1gib("translate" + run + " --max-len 0 --beam 50").status == 0);
}

TEST_CASE("bounds: eval --dump-logits sequences past the memory are refused before anything is written",
          "[bounds][cli]") {
  const std::string out = tfm_test::scratch_path("bounds", "logits.json");
  check_refusals(
      {{"eval --run " + tfm_test::causal_run() + " --dump-logits " + out + " --batches 1000000000",
        "--batches = 1000000000 (sequences of --dump-logits): eval --dump-logits needs an estimated"}});
  CHECK(!fs::exists(out));
  CHECK(with_1gib("eval --run " + tfm_test::causal_run() + " --dump-logits " + out + " --batches 3").status ==
        0);
  CHECK(fs::exists(out));
}

TEST_CASE("bounds: config keys and grids that have no memory estimate have a stated range", "[bounds][cli]") {
  const std::string dir = tfm_test::scratch_path("bounds", "run");
  // A thread count OpenMP would try to start (100000 threads crashed the process).
  check_refusals({{"train --config configs/tiny.json --out " + dir + " --set train.threads=100000",
                   "train.threads: expected an integer in [0, 1024], got 100000"},
                  {"info --config configs/tiny.json --set train.threads=1025",
                   "train.threads: expected an integer in [0, 1024]"}});
  CHECK(!fs::exists(dir));
  // A sweep's grid is the product of its axes: 101 x 100 points is refused before any config is built.
  std::string seeds = "seed=1", steps = "train.max_steps=1";
  for (int i = 2; i <= 101; ++i) seeds += "," + std::to_string(i);
  for (int i = 2; i <= 100; ++i) steps += "," + std::to_string(i);
  const std::string sweep_dir = tfm_test::scratch_path("bounds", "sweep");
  check_refusals(
      {{"sweep --config configs/tiny.json --out " + sweep_dir + " --grid " + seeds + " --grid " + steps,
        "--grid: 10100 points (the product of the axes' value counts), expected at most 10000"}});
  CHECK(!fs::exists(sweep_dir));
  // fill-mask's --top-k: a range first, then the vocabulary.
  check_refusals(
      {{"fill-mask --run " + tfm_test::masked_run() + " --text \"a[MASK]\" --top-k 99999999999999999999",
        "--top-k: expected an integer in [1, 1000000000]"},
       {"fill-mask --run " + tfm_test::masked_run() + " --text \"a[MASK]\" --top-k 1000",
        "--top-k: expected at most the vocabulary's"}});
}

TEST_CASE("bounds: a checkpoint with an empty vocabulary is refused as corrupt, naming the file",
          "[bounds][cli]") {
  const std::string dir = tfm_test::scratch_path("bounds", "empty_vocab");
  fs::create_directories(dir);
  // The causal run's checkpoint with its vocabulary emptied, checksummed as a real one.
  tfm::Checkpoint ckpt = tfm::load_checkpoint(tfm_test::causal_run() + "/last.ckpt");
  ckpt.tokenizer = tfm::Tokenizer::from_json({{"kind", "char"}, {"symbols", nlohmann::json::array()}});
  tfm::save_checkpoint(dir + "/last.ckpt", ckpt);
  for (const std::string& command : std::vector<std::string>{
           "sample --max-new-tokens 2", "eval --batches 1", "export --out " + dir + "/m.st",
           "attention --no-plot --text a --out " + dir + "/att", "heads --no-plot"}) {
    const CliRun r = tfm_test::run_tfm(command.substr(0, command.find(' ')) + " --run " + dir +
                                       " --checkpoint last" + command.substr(command.find(' ')));
    INFO(command << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out,
               Catch::Contains(dir + "/last.ckpt: corrupt checkpoint: the vocab section holds an empty "
                                     "vocabulary (0 tokens, none of them ordinary)"));
  }
  // A seq2seq run whose word vocabulary would be <unk> alone is refused before training, naming the key.
  const CliRun r =
      tfm_test::run_tfm("train --config configs/tiny.json --out " + dir +
                        "/s2s --set train.seq_len=null"
                        " --set train.objective=seq2seq --set data.tokenizer=word --set data.min_freq=100000"
                        " --set data.path=" +
                        tfm_test::write_reversal_pairs(dir, 50));
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("data.min_freq: 100000 leaves no word of the training pairs' source side"));
  CHECK(!fs::exists(dir + "/s2s/last.ckpt"));
}

TEST_CASE("bounds: odd but parsable input never ends as an internal error", "[bounds][cli]") {
  const std::string lm = " --run " + tfm_test::causal_run(), mlm = " --run " + tfm_test::masked_run(),
                    s2s = " --run " + tfm_test::seq2seq_run();
  const std::string scratch = tfm_test::scratch_path("bounds", "odd");
  fs::create_directories(scratch);
  tfm_test::CliRun r = tfm_test::run_shell(": > " + scratch + "/empty.txt");
  const std::string tiny = "--config configs/tiny.json --out " + scratch + "/run --set train.max_steps=2 ";
  // {args, exit status}: 0 where the input is odd but valid, 2 where it is refused.
  const std::vector<std::pair<std::string, int>> cases = {
      {"sample" + lm + " --prompt \"\" --max-new-tokens 3", 0},
      {"sample" + lm +
           " --prompt \"a prompt longer than the eight tokens of the context\" --max-new-tokens 3",
       0},
      {"sample" + lm + " --prompt \"\xe2\x82\xac\"", 2},       // a character outside the vocabulary
      {"sample" + lm + " --prompt \"$(printf '\\377')\"", 2},  // invalid UTF-8
      {"sample" + lm + " --checkpoint \"\"", 2},
      {"sample" + s2s, 2},
      {"translate" + lm + " --text a", 2},
      {"translate" + lm + " --beam 4 </dev/null", 2},
      {"fill-mask" + lm + " --text \"a[MASK]\"", 2},
      {"eval" + lm + " --mask-heads 0:99999999999999999999", 2},
      {"eval" + lm + " --mask-heads \"\" --batches 1", 0},
      {"eval" + lm + " --dump-logits " + scratch + "/l.json --text \"\"", 2},
      {"eval" + s2s + " --batches 1000000000", 0},
      {"fill-mask" + mlm + " --text \"\"", 2},
      {"fill-mask" + mlm + " --text \"a long text of many tokens before the [MASK]\"", 2},
      {"fill-mask" + mlm + " --text \"\xe2\x82\xac[MASK]\"", 2},
      {"translate" + s2s + " --text \"\"", 0},
      {"translate" + s2s + " --text \"words it never saw\"", 0},
      {"translate" + s2s + " --text \"$(printf 'one \\377')\"", 2},
      {"translate" + s2s + " --text \"one two.\" --length-penalty 1e400", 2},
      {"attention" + lm + " --no-plot --out " + scratch + "/a --text \"\"", 2},
      {"attention" + lm + " --no-plot --out " + scratch + "/a --text \"many more tokens than eight\"", 2},
      {"attention" + s2s + " --no-plot --out " + scratch + "/a --text \"\"", 2},
      {"attention" + s2s + " --no-plot --out " + scratch + "/a --text \"one two.\" --target \"\"", 2},
      {"eval" + mlm + " --dump-logits " + scratch + "/m.json --text \"a[MASK]b\"",
       0},  // as fill-mask reads it
      {"attention" + s2s + " --no-plot --out " + scratch +
           "/a --text \"one two three four five six seven eight\"",
       0},
      {"heads" + lm + " --no-plot --batches 1 --out " + scratch + "/h", 0},
      {"export" + lm + " --out \"\"", 2},
      {"info --config configs/tiny.json --set model.d_model=1e23", 2},
      {"info --config configs/tiny.json --set seed=-99999999999999999999", 2},
      {"info --config configs/tiny.json --set data.path=" + scratch + "/empty.txt", 2},  // no vocabulary
      {"train " + tiny + "--set data.path=" + scratch + "/empty.txt", 2},
      {"train " + tiny + "--set data.val_fraction=0.9999999", 2},
      {"train " + tiny + "--set 'data.path=\"\"'", 2},
      {"data prepare --config configs/tiny.json --set data.path=" + scratch + "/empty.txt", 2},
      {"gradcheck --config configs/tiny.json --tolerance 0", 2},
      {"config --config " + scratch + "/empty.txt", 2},
  };
  for (const auto& [args, status] : cases) {
    r = tfm_test::run_tfm(args + " </dev/null");
    INFO("tfm " << args << "\n" << r.out);
    CHECK(r.status == status);
    CHECK_THAT(r.out, !Catch::Contains("internal error"));
  }
  // The masked_lm text above: "[MASK]" one token, between "a" and "b".
  CHECK(nlohmann::json::parse(tfm_test::read_file(scratch + "/m.json")).at("tokens").at(0).size() == 3);
  // A whole-split evaluation of a masked LM reads every token and scores the masked ones.
  r = tfm_test::run_tfm("eval" + mlm + " --full");
  INFO(r.out);
  CHECK_THAT(r.out,
             Catch::Contains("over the whole val split (every token read once, the masked ones scored: ") &&
                 Catch::Contains(" of at most 8 windows)"));
}

TEST_CASE("bounds: an allocation that fails past the pre-flight names the sizes that asked for it",
          "[bounds][cli]") {
  if (tfm_test::under_address_sanitizer()) {
    WARN("skipped under AddressSanitizer: it reserves more address space than the limit this test sets");
    return;
  }
  // The pre-flight told the machine is huge lets the sizes through; a 4 GB address-space limit makes
  // the allocation fail, as when the memory went to another process between the check and the use.
  const std::string tfm =
      "ulimit -v 4000000; TFM_AVAILABLE_MEMORY_MB=100000000 " + tfm_test::tfm_command() + " ";
  struct Case {
    std::string args, sizes;
  };
  for (const Case& c :
       {Case{"bench attention --d-model 65536 --seq-lens 8,16",
             "--d-model = 65536, --seq-lens up to 16, --batch = 1"},
        Case{"translate --run " + tfm_test::seq2seq_run() + " --text \"one two.\" --beam 100000000",
             "--beam = 100000000"}}) {
    const CliRun r = tfm_test::run_shell("(" + tfm + c.args + ")");
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out,
               Catch::Contains("tfm: error: " + c.sizes +
                               ": out of memory (the allocation these sizes asked for failed); make them "
                               "smaller"));
  }
}
