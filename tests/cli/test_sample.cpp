// `tfm sample`'s flags end to end (filters, several samples, stop strings, JSON, a prompt file, the
// interactive loop, the same text whatever the thread count) and the one checkpoint rule of every
// command that reads a run.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tiny_runs.h"

namespace {

// A causal_lm run big enough for the model's products to be split over threads (d_model 64, context
// 32), trained for 4 steps: best.ckpt and last.ckpt both exist.
const std::string& sample_test_run() {
  static const std::string dir =
      tfm_test::tiny_run("sample_cli",
                         "--set model.d_model=64 --set model.n_heads=4 --set model.max_seq_len=32 "
                         "--set train.seq_len=32 --set train.threads=2");
  return dir;
}

// `ENV tfm ARGS` with stdout alone (stderr discarded), or with stderr alone.
tfm_test::CliRun sample_test_stdout(const std::string& args, const std::string& env = "") {
  return tfm_test::run_shell("{ " + env + " " + tfm_test::tfm_command() + " " + args + " 2>/dev/null; }");
}
tfm_test::CliRun sample_test_stderr(const std::string& args) {
  return tfm_test::run_shell("{ " + tfm_test::tfm_command() + " " + args + " >/dev/null; }");
}

// One JSON object per line of `out`.
std::vector<nlohmann::json> sample_test_records(const std::string& out) {
  std::vector<nlohmann::json> records;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

}  // namespace

TEST_CASE("sample: a seed gives the same text with 1 and 2 threads", "[cli][sample]") {
  const std::string args =
      "sample --run " + sample_test_run() +
      " --prompt 'ROMEO:' --max-new-tokens 40 --seed 5 --temperature 1.2 --top-p 0.95 --json";
  const tfm_test::CliRun a = sample_test_stdout(args + " --threads 1", "OMP_NUM_THREADS=1");
  const tfm_test::CliRun b = sample_test_stdout(args + " --threads 2", "OMP_NUM_THREADS=2");
  INFO(a.out << "\n" << b.out);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  const nlohmann::json ra = sample_test_records(a.out).at(0), rb = sample_test_records(b.out).at(0);
  CHECK(ra["text"] == rb["text"]);
  CHECK(ra["token_ids"] == rb["token_ids"]);
  CHECK(ra["logprobs"] == rb["logprobs"]);  // bit for bit: the logits do not depend on the thread count
}

TEST_CASE("sample: --json records parse, their log-probs sum and match the streamed text", "[cli][sample]") {
  const std::string run = " --run " + sample_test_run() + " --prompt 'ROMEO:' --max-new-tokens 25 --seed 3";
  const tfm_test::CliRun j = sample_test_stdout("sample" + run + " --json --top-k 20 --min-p 0.01");
  REQUIRE(j.status == 0);
  const std::vector<nlohmann::json> records = sample_test_records(j.out);
  REQUIRE(records.size() == 1);
  const nlohmann::json& r = records[0];
  CHECK(r["prompt"] == "ROMEO:");
  // The prompt's tokens are the tokenizer's; an empty prompt names the one start token it began from.
  const tfm_test::CliRun ids =
      sample_test_stdout("tokenizer encode --run " + sample_test_run() + " --text ROMEO:");
  REQUIRE(ids.status == 0);
  CHECK(r["prompt_token_ids"] == nlohmann::json::parse(ids.out));
  const nlohmann::json empty =
      sample_test_records(
          sample_test_stdout("sample --run " + sample_test_run() + " --max-new-tokens 2 --json").out)
          .at(0);
  CHECK(empty["prompt"] == "");
  CHECK(empty["prompt_token_ids"].size() == 1);
  CHECK(r["stop"].is_null());
  const std::vector<double> lp = r["logprobs"].get<std::vector<double>>();
  REQUIRE(r["token_ids"].size() == 25);
  REQUIRE(lp.size() == 25);
  double sum = 0.0;
  for (const double v : lp) {
    CHECK(v <= 0.0);
    CHECK(v >= std::log(1e-9));  // a drawn token had some probability
    sum += v;
  }
  CHECK(r["logprob"].get<double>() == Approx(sum).epsilon(1e-12));
  // The text streamed without --json is the record's text (same seed, same draws).
  const tfm_test::CliRun text = sample_test_stdout("sample" + run + " --top-k 20 --min-p 0.01");
  CHECK(text.out == "ROMEO:" + r["text"].get<std::string>() + "\n");
  // Greedy, or a filter that keeps one token: every token had probability 1, and the text is greedy's.
  const std::string greedy =
      sample_test_records(sample_test_stdout("sample" + run + " --json --temperature 0").out)
          .at(0)["text"]
          .get<std::string>();
  for (const char* one : {" --temperature 0", " --top-k 1", " --min-p 1", " --top-p 0.000001"}) {
    const tfm_test::CliRun g = sample_test_stdout("sample" + run + " --json" + one);
    INFO(one << "\n" << g.out);
    REQUIRE(g.status == 0);
    const nlohmann::json gr = sample_test_records(g.out).at(0);
    CHECK(gr["logprob"] == 0.0);
    CHECK(gr["text"] == greedy);
  }
  // A top-k at or above the vocabulary filters nothing: the draws of --top-k 0.
  const nlohmann::json all = sample_test_records(sample_test_stdout("sample" + run + " --json").out).at(0);
  for (const char* k : {" --top-k 1000", " --top-k 9223372036854775807"}) {
    const tfm_test::CliRun big = sample_test_stdout("sample" + run + " --json" + k);
    INFO(k << "\n" << big.out);
    REQUIRE(big.status == 0);
    const nlohmann::json br = sample_test_records(big.out).at(0);
    CHECK(br["token_ids"] == all["token_ids"]);
    CHECK(br["logprobs"] == all["logprobs"]);
  }
}

TEST_CASE("sample: --stop ends generation and is not printed", "[cli][sample]") {
  const std::string run = " --run " + sample_test_run() + " --prompt 'ROMEO:' --max-new-tokens 60 --seed 4";
  const std::string all = sample_test_records(sample_test_stdout("sample" + run + " --json").out)
                              .at(0)["text"]
                              .get<std::string>();
  REQUIRE(all.size() >= 30);
  const std::string stop = all.substr(20, 2);
  const size_t cut = all.find(stop);
  // Pass the stop string through a file: it may hold quotes or newlines (--stop's "\n" escape aside).
  const tfm_test::TempDir tmp("sample_stop");
  std::string escaped;
  for (const char c : stop)
    escaped += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  std::ofstream(tmp.file("stop")) << escaped;
  const std::string flag = " --stop \"$(cat '" + tmp.file("stop") + "')\" --stop zzzz";
  const tfm_test::CliRun streamed = sample_test_stdout("sample" + run + flag);
  INFO("stop \"" << stop << "\" in \"" << all << "\"");
  REQUIRE(streamed.status == 0);
  CHECK(streamed.out == "ROMEO:" + all.substr(0, cut) + "\n");
  const nlohmann::json r =
      sample_test_records(sample_test_stdout("sample" + run + flag + " --json").out).at(0);
  CHECK(r["text"] == all.substr(0, cut));
  CHECK(r["stop"] == stop);
  CHECK(r["token_ids"].size() == cut + stop.size());  // char tokens: generation ended at the stop string
}

TEST_CASE("sample: --num-samples 3 gives 3 different samples, the first the single sample", "[cli][sample]") {
  const std::string run = " --run " + sample_test_run() + " --prompt 'ROMEO:' --max-new-tokens 30 --seed 8";
  const std::vector<nlohmann::json> r =
      sample_test_records(sample_test_stdout("sample" + run + " --json --num-samples 3").out);
  REQUIRE(r.size() == 3);
  CHECK(r[0]["text"] != r[1]["text"]);
  CHECK(r[1]["text"] != r[2]["text"]);
  CHECK(r[0]["text"] != r[2]["text"]);
  CHECK(r[2]["sample"] == 3);
  CHECK(r[0]["text"] ==
        sample_test_records(sample_test_stdout("sample" + run + " --json").out).at(0)["text"]);
  // As text: each sample under its header.
  const tfm_test::CliRun text = sample_test_stdout("sample" + run + " --num-samples 3");
  CHECK(text.out == "--- sample 1 of 3 ---\nROMEO:" + r[0]["text"].get<std::string>() +
                        "\n--- sample 2 of 3 ---\nROMEO:" + r[1]["text"].get<std::string>() +
                        "\n--- sample 3 of 3 ---\nROMEO:" + r[2]["text"].get<std::string>() + "\n");
}

TEST_CASE("sample: --interactive continues each line of stdin until EOF, and --prompt-file",
          "[cli][sample]") {
  const std::string run = " --run " + sample_test_run() + " --max-new-tokens 12 --seed 6";
  auto continuation = [&](const std::string& prompt) -> std::string {
    return sample_test_records(sample_test_stdout("sample" + run + " --json --prompt '" + prompt + "'").out)
        .at(0)["text"]
        .get<std::string>();
  };
  const std::string romeo = continuation("ROMEO:"), menenius = continuation("MENENIUS:");
  const std::string tfm = tfm_test::tfm_command() + " sample" + run + " --interactive";
  // Piped in, each prompt is echoed before its text, as --prompt prints it, under a line naming it.
  tfm_test::CliRun r = tfm_test::run_shell("{ printf 'ROMEO:\\nMENENIUS:\\n' | " + tfm + " 2>/dev/null; }");
  REQUIRE(r.status == 0);
  CHECK(r.out ==
        "--- stdin line 1 ---\nROMEO:" + romeo + "\n--- stdin line 2 ---\nMENENIUS:" + menenius + "\n");
  // Several samples a prompt: each under its own line.
  const std::vector<nlohmann::json> two =
      sample_test_records(sample_test_stdout("sample" + run + " --json --num-samples 2 --prompt ROMEO:").out);
  REQUIRE(two.size() == 2);
  r = tfm_test::run_shell("{ printf 'ROMEO:\\n' | " + tfm + " --num-samples 2 2>/dev/null; }");
  CHECK(r.out == "--- stdin line 1, sample 1 of 2 ---\nROMEO:" + two[0]["text"].get<std::string>() +
                     "\n--- stdin line 1, sample 2 of 2 ---\nROMEO:" + two[1]["text"].get<std::string>() +
                     "\n");
  r = tfm_test::run_shell("{ printf 'ROMEO:\\nMENENIUS:' | " + tfm +
                          " --json 2>/dev/null; }");  // no final newline
  // --json: one line a prompt (a sample), its prompt in it, and nothing else on stdout.
  const std::vector<nlohmann::json> records = sample_test_records(r.out);
  REQUIRE(records.size() == 2);
  CHECK(records[0]["prompt"] == "ROMEO:");
  CHECK(records[0]["text"] == romeo);
  CHECK(records[1]["prompt"] == "MENENIUS:");
  CHECK(records[1]["text"] == menenius);
  CHECK(records[0]["line"] == 1);
  CHECK(records[1]["line"] == 2);
  // A line the vocabulary cannot encode is named and skipped; the others are still answered; exit 2.
  r = tfm_test::run_shell("printf 'ROMEO:\\n\\342\\202\\254\\nMENENIUS:\\n' | " + tfm);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("stdin line 2"));
  CHECK_THAT(r.out, Catch::Contains("--- stdin line 3 ---\nMENENIUS:" + menenius + "\n"));
  // With --json the records name their line: the skipped one leaves a gap.
  r = tfm_test::run_shell("{ printf 'ROMEO:\\n\\342\\202\\254\\nMENENIUS:\\n' | " + tfm +
                          " --json 2>/dev/null; }");
  const std::vector<nlohmann::json> lines = sample_test_records(r.out);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["line"] == 3);
  CHECK(lines[1]["prompt"] == "MENENIUS:");
  // --prompt-file: the file's text is the prompt.
  const tfm_test::TempDir tmp("sample_prompt_file");
  std::ofstream(tmp.file("p.txt")) << "MENENIUS:";
  r = sample_test_stdout("sample" + run + " --prompt-file " + tmp.file("p.txt"));
  CHECK(r.out == "MENENIUS:" + menenius + "\n");
  // A file saved on Windows (a byte order mark, CRLF) is the same prompt, as a corpus file would be.
  std::ofstream(tmp.file("lf.txt"), std::ios::binary) << "ROMEO:\nMENENIUS:";
  std::ofstream(tmp.file("crlf.txt"), std::ios::binary) << "\xEF\xBB\xBFROMEO:\r\nMENENIUS:";
  const tfm_test::CliRun lf = sample_test_stdout("sample" + run + " --prompt-file " + tmp.file("lf.txt")),
                         crlf = sample_test_stdout("sample" + run + " --prompt-file " + tmp.file("crlf.txt"));
  REQUIRE(lf.status == 0);
  CHECK(crlf.status == 0);
  CHECK(crlf.out == lf.out);
  r = tfm_test::run_tfm("sample" + run + " --prompt-file " + tmp.file("missing.txt"));
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(tmp.file("missing.txt")));
}

TEST_CASE("sample: --prompt reads --stop's escapes, a prompt file and stdin lines are taken as they are",
          "[cli][sample]") {
  const std::string run = " --run " + sample_test_run() + " --max-new-tokens 8 --seed 2 --json";
  // \n is a newline, as llama.cpp's -p reads it: the prompt of a file that holds one.
  const tfm_test::TempDir tmp("sample_prompt_escapes");
  std::ofstream(tmp.file("newline.txt"), std::ios::binary) << "ROMEO:\n";
  tfm_test::CliRun r = sample_test_stdout("sample" + run + " --prompt 'ROMEO:\\n'");
  REQUIRE(r.status == 0);
  const nlohmann::json typed = sample_test_records(r.out).at(0);
  CHECK(typed["prompt"] == "ROMEO:\n");
  r = sample_test_stdout("sample" + run + " --prompt-file " + tmp.file("newline.txt"));
  REQUIRE(r.status == 0);
  const nlohmann::json file = sample_test_records(r.out).at(0);
  CHECK(file["prompt"] == "ROMEO:\n");
  CHECK(typed["prompt_token_ids"] == file["prompt_token_ids"]);
  CHECK(typed["text"] == file["text"]);
  // llama.cpp's \xNN: a byte (\x52 is R); \xZ is no escape, kept as typed (a backslash: refused).
  r = sample_test_stdout("sample" + run + " --prompt '\\x52OMEO:\\n'");
  REQUIRE(r.status == 0);
  CHECK(sample_test_records(r.out).at(0)["prompt"] == "ROMEO:\n");
  r = tfm_test::run_tfm("sample" + run + " --prompt 'ROMEO:\\xZ'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--prompt: character '\\' (U+005C) at character 6"));
  // \\ is one backslash (not in this vocabulary: refused by name), so \\n is not a newline.
  r = tfm_test::run_tfm("sample" + run + " --prompt 'ROMEO:\\\\n'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--prompt: character '\\' (U+005C) at character 6"));
  // A file's bytes and a line of stdin are the prompt as they are: a backslash stays one.
  std::ofstream(tmp.file("backslash.txt"), std::ios::binary) << "ROMEO:\\n";
  r = tfm_test::run_tfm("sample" + run + " --prompt-file " + tmp.file("backslash.txt"));
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("character '\\' (U+005C) at character 6"));
  r = tfm_test::run_shell("printf 'ROMEO:\\\\n\\n' | " + tfm_test::tfm_command() + " sample" + run +
                          " --interactive");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("stdin line 1: character '\\' (U+005C) at character 6"));
}

TEST_CASE("sample: bad filter values exit 2 naming the flag and the range", "[cli][sample]") {
  const std::string run = "sample --run " + tfm_test::causal_run();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --top-p 0", "--top-p: expected a number in (0, 1], got \"0\""},
      {" --top-p 1.5", "--top-p: expected a number in (0, 1], got \"1.5\""},
      {" --top-p nan", "--top-p: expected a number in (0, 1]"},
      {" --min-p -0.1", "--min-p: expected a number in [0, 1], got \"-0.1\""},
      {" --min-p 2", "--min-p: expected a number in [0, 1]"},
      {" --repetition-penalty 0", "--repetition-penalty: expected a number in (0, 100], got \"0\""},
      {" --repetition-penalty -1", "--repetition-penalty: expected a number in (0, 100]"},
      {" --num-samples 0", "--num-samples: expected an integer in [1, 100000], got \"0\""},
      {" --stop ''", "--stop: expected a non-empty string"},
      {" --prompt a --prompt-file b", "--prompt excludes --prompt-file"},
      {" --prompt a --interactive", "--prompt excludes --interactive"},
  };
  for (const auto& [args, fragment] : cases) {
    const tfm_test::CliRun r = tfm_test::run_tfm(run + args);
    INFO("tfm " << run << args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(fragment));
  }
  // The edges are accepted.
  CHECK(tfm_test::run_tfm(run + " --max-new-tokens 3 --top-p 1 --min-p 1 --repetition-penalty 100").status ==
        0);
}

TEST_CASE("commands that read a run: best.ckpt, else last.ckpt, --checkpoint overrides, one line says which",
          "[cli][run_dir]") {
  const std::string dir = tfm_test::causal_run();
  REQUIRE(std::filesystem::exists(dir + "/best.ckpt"));
  REQUIRE(std::filesystem::exists(dir + "/last.ckpt"));
  // The same run with only last.ckpt.
  const tfm_test::TempDir tmp("sample_checkpoint_rule");
  const std::string only_last = tmp.file("only_last");
  std::filesystem::create_directories(only_last);
  std::filesystem::copy_file(dir + "/last.ckpt", only_last + "/last.ckpt");
  const std::vector<std::string> commands = {
      "sample --max-new-tokens 2 --run ",
      "eval --batches 1 --run ",
      "export --out " + tmp.file("m.safetensors") + " --run ",
      "attention --text ROMEO --no-plot --out " + tmp.file("att") + " --run ",
  };
  for (const std::string& c : commands) {
    INFO("tfm " << c);
    tfm_test::CliRun r = sample_test_stderr(c + dir);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("tfm: read " + dir + "/best.ckpt (step 4, val loss "));
    r = sample_test_stderr(c + dir + " --checkpoint last");
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("tfm: read " + dir + "/last.ckpt (step 4, best val loss so far "));
    r = sample_test_stderr(c + only_last);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("tfm: read " + only_last + "/last.ckpt (step 4"));
    r = sample_test_stderr(c + only_last + " --checkpoint best");
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(only_last + "/best.ckpt: no such checkpoint (--checkpoint best)"));
  }
}

TEST_CASE("sample: a prompt longer than the context is said to be cut, and --ignore-eos is a flag",
          "[cli][sample]") {
  const std::string run = sample_test_run();
  const std::string prompt(40, 'a');  // 40 tokens, the context 32
  tfm_test::CliRun r =
      sample_test_stderr("sample --run " + run + " --prompt " + prompt + " --max-new-tokens 2 --ignore-eos");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out,
             Catch::Contains("tfm: note: the prompt (--prompt) is 40 tokens and the model reads at most "
                             "32 (model.max_seq_len): it continues from the prompt's last 32"));
  r = sample_test_stderr("sample --run " + run + " --prompt " + prompt.substr(0, 32) + " --max-new-tokens 2");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("note"));
  // Each line of --interactive, as --prompt.
  r = tfm_test::run_shell("printf 'ab\\n" + prompt + "\\n' | { " + tfm_test::tfm_command() +
                          " sample --run " + run + " --interactive --max-new-tokens 2 >/dev/null; }");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out,
             Catch::Contains("tfm: note: the prompt (stdin line 2) is 40 tokens and the model reads at "
                             "most 32 (model.max_seq_len)"));
  CHECK_THAT(r.out, !Catch::Contains("stdin line 1"));
}

TEST_CASE("sample: <|endoftext|> in a prompt or an attention text is the run's end-of-text token",
          "[cli][sample]") {
  // tiny_shakespeare has no '<' or '|': read as text, the marker would be refused.
  const std::string run =
      tfm_test::tiny_run("eot_prompt", "--set train.seq_len=8 --set data.document_separator=true");
  tfm_test::CliRun r = sample_test_stdout(
      "sample --run " + run + " --prompt 'ab<|endoftext|>' --max-new-tokens 1 --json --ignore-eos");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto ids = j.at("prompt_token_ids").get<std::vector<int64_t>>();
  REQUIRE(ids.size() == 3);
  CHECK(ids[2] == 56);  // the separator: the last id, past tiny_shakespeare's 56 characters
  r = tfm_test::run_tfm("attention --run " + run + " --text 'ab<|endoftext|>ab' --no-plot --out " + run +
                        "/attention");
  CHECK(r.status == 0);
}
