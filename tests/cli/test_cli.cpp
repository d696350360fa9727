// The tfm executable end to end on configs/tiny.json: train -> eval -> sample in a temporary
// directory, exit statuses, and bad input giving status 2 with the key or file in the message.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/training/trainer.h"

namespace fs = std::filesystem;

namespace {

using Run = tfm_test::CliRun;
// Runs `tfm ARGS` from the repository root (tests/cli_run.h).
Run run_cli(const std::string& args) {
  return tfm_test::run_tfm(args);
}

// A fresh, empty directory, removed when the test binary exits.
std::string temp_dir(const std::string& name) {
  const std::string dir = tfm_test::scratch_path("cli", name);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("cli: train, eval, sample and resume on the tiny config", "[cli]") {
  const std::string dir = temp_dir("e2e") + "/run";
  Run r = run_cli("train --config configs/tiny.json --out " + dir + " --set train.max_steps=30");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("step 30/30"));
  CHECK_THAT(r.out, Catch::Contains("tfm sample --run " + dir));
  for (const char* f : {"config.json", "last.ckpt", "best.ckpt", "train.log", "metrics.jsonl"})
    CHECK(fs::exists(dir + "/" + f));

  r = run_cli("eval --run " + dir + " --batches 3");
  INFO(r.out);
  CHECK(r.status == 0);
  // stderr's line naming the checkpoint read (best.ckpt: the run has one), then the result.
  CHECK_THAT(r.out, Catch::StartsWith("tfm: read " + dir + "/best.ckpt (step 30, val loss ") &&
                        Catch::Contains(")\nval loss "));
  r = run_cli("eval --run " + dir + " --split train --checkpoint best");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(")\ntrain loss "));

  const Run s1 = run_cli("sample --run " + dir + " --prompt 'First Citizen:' --max-new-tokens 50 --seed 7");
  const Run s2 = run_cli("sample --run " + dir + " --prompt 'First Citizen:' --max-new-tokens 50 --seed 7");
  CHECK(s1.status == 0);
  CHECK_THAT(s1.out, Catch::StartsWith("tfm: read ") && Catch::Contains(")\nFirst Citizen:"));
  CHECK(s1.out.size() > 50);
  CHECK(s1.out == s2.out);

  // Resume continues to a higher max_steps; a model key may not change.
  r = run_cli("train --resume " + dir + " --set train.max_steps=40");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("step 40/40"));
  // It says that the schedule is no longer the run's.
  CHECK_THAT(r.out, Catch::Contains("train.max_steps changed on resume: ") &&
                        Catch::Contains(" -> 40 (from step ") && Catch::Contains("40-step schedule"));
  r = run_cli("train --resume " + dir + " --set model.n_layers=3");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("model.n_layers: cannot change when resuming"));
  // A new run into the same directory would overwrite it: refused.
  r = run_cli("train --config configs/tiny.json --out " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("already holds a run"));
}

// The tests start tfm with TFM_NO_REEXEC=1 (CMakeLists.txt); a user's tfm restarts itself once with its
// OpenBLAS and OpenMP settings (src/engine/platform.cpp): here it does, as for a user.
TEST_CASE("cli: tfm restarts once with its OpenBLAS and OpenMP settings and says so", "[cli]") {
  const std::string dir = temp_dir("reexec") + "/run";
  const Run r = tfm_test::run_shell(
      "env -u TFM_NO_REEXEC -u TFM_REEXEC -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " +
      tfm_test::tfm_command() + " train --config configs/tiny.json --out " + dir +
      " --set train.max_steps=1");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string expected = __builtin_cpu_supports("avx512f")
                                   ? "(restarted with OPENBLAS_CORETYPE=SkylakeX GOMP_SPINCOUNT=10000;"
                                   : "(restarted with GOMP_SPINCOUNT=10000;";
  CHECK_THAT(r.out, Catch::Contains(expected));
}

TEST_CASE("cli: bad input exits 2 naming the key or file", "[cli]") {
  const std::string dir = temp_dir("bad");
  std::ofstream(dir + "/unknown.json") << R"({"model": {"d_modle": 64}})";
  std::ofstream(dir + "/range.json") << R"({"train": {"batch_size": -3}})";
  std::ofstream(dir + "/syntax.json") << "{\n  \"model\": {\n    \"d_model\": 64,,\n  }\n}";
  std::ofstream(dir + "/nodata.json") << R"({"data": {"path": "/nonexistent/text.txt"}})";
  struct Case {
    std::string args, fragment;
  };
  const Case cases[] = {
      {"train --config " + dir + "/unknown.json --out " + dir + "/r1",
       "model.d_modle: unknown key; did you mean model.d_model?"},
      {"train --config " + dir + "/range.json --out " + dir + "/r2",
       "train.batch_size: expected an integer >= 1, got -3"},
      {"train --config " + dir + "/syntax.json --out " + dir + "/r3",
       dir + "/syntax.json:3:19: malformed JSON"},
      {"train --config " + dir + "/nodata.json --out " + dir + "/r4", "/nonexistent/text.txt: cannot open"},
      {"train --config " + dir + "/missing.json", dir + "/missing.json: cannot open"},
      {"train --config configs/tiny.json --set model.n_heads=5 --out " + dir + "/r5",
       "model.d_model: expected a multiple of model.n_heads = 5"},
      {"train --config configs/tiny.json --set train.seq_len=999 --out " + dir + "/r6", "train.seq_len"},
      {"train --config configs/tiny.json --set oops --out " + dir + "/r7", "--set: expected key.path=value"},
      {"train --config configs/tiny.json --out ''", "--out: expected a directory, not an empty string"},
      {"board --host ''", "--host: expected an address, not an empty string"},
      {"train", "--config FILE"},
      {"eval --run " + dir + "/no_such_run", dir + "/no_such_run"},
      {"sample --run " + dir + "/no_such_run", dir + "/no_such_run"},
      {"config --config configs/tiny.json --set model.activation=swish", "model.activation"},
      {"frobnicate", ""},
      {"train --config configs/tiny.json --bogus-flag", ""},
  };
  for (const auto& c : cases) {
    const Run r = run_cli(c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(c.fragment));
  }
  // Nothing was created for the rejected runs.
  CHECK_FALSE(fs::exists(dir + "/r1"));
}

TEST_CASE("cli: help teaches by example, config and info print", "[cli]") {
  Run r = run_cli("--help");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("Examples:") &&
                        Catch::Contains("tfm train --config configs/shakespeare_char.json"));
  r = run_cli("train --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("--resume"));
  r = run_cli("config --keys");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("| `model.d_model` | integer | `128` |"));
  r = run_cli("config --config configs/tiny.json --set train.max_steps=7");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("\"max_steps\": 7") && Catch::Contains("\"n_kv_heads\": 4"));
  // A warmup as long as the run, and a key set that nothing reads, are warned of where the config is checked,
  // as tfm train does.
  CHECK_THAT(r.out, Catch::Contains("tfm: warning: train.lr_schedule.warmup_steps = 10 is at least"));
  CHECK_THAT(run_cli("config --config configs/tiny.json").out, !Catch::Contains("warning"));
  for (const char* command : {"config", "info"}) {
    r = run_cli(std::string(command) + " --config configs/tiny.json --set model.rope_theta=500");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("tfm: warning: model.rope_theta = 500.0 has no effect"));
  }
  r = run_cli("info --config configs/tiny.json");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("parameters:") && Catch::Contains("FLOPs per token") &&
                        Catch::Contains("memory"));
  CHECK_THAT(r.out, !Catch::Contains("Newton-Schulz"));
  CHECK_THAT(r.out, Catch::Contains("scaled dot-product attention scores"));
  CHECK_THAT(r.out, !Catch::Contains("additive scores"));
  // Additive scores' elementwise work is said beside the FLOPs, which count products; with RoPE, a
  // warning that rotations give additive scores no relative positions.
  r = run_cli("info --config configs/tiny.json --set model.attention_score=additive");
  CHECK_THAT(r.out,
             Catch::Contains("FLOPs per token (matrix products)") &&
                 Catch::Contains("additive scores, v . tanh(q + k): 32 elementwise operations per (query, "
                                 "key) pair and head in the forward"));
  CHECK_THAT(r.out, !Catch::Contains("RoPE makes"));
  r = run_cli(
      "config --config configs/tiny.json --set model.attention_score=additive --set "
      "model.positional_encoding=rope");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tfm: warning: model.positional_encoding = \"rope\" with "
                                    "model.attention_score = \"additive\": RoPE makes a dot product"));
  // A seq2seq model's figure is per source or target token, as its tokens/s and MFU count them.
  r = run_cli("info --config configs/eng_fra_d2l.json");
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains("FLOPs per token (source and target, as tokens/s counts them") &&
                        !Catch::Contains("per target token"));
  r = run_cli("info --config configs/tiny.json --set model.attention_score=additive");
  CHECK_THAT(r.out, Catch::Contains("additive (Bahdanau) attention scores"));
  // Muon's Newton-Schulz FLOPs per step, apart from the model's.
  r = run_cli("info --config configs/tiny.json --set train.optimizer.name=muon");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("optimizer muon:") && Catch::Contains("Newton-Schulz") &&
                        Catch::Contains("not counted in MFU"));
  r = run_cli("info --config configs/tiny.json --set train.optimizer.name=muon --json");
  CHECK(r.status == 0);
  CHECK(nlohmann::json::parse(r.out).at("newton_schulz_flops_per_step").get<double>() > 0);
  // Multi-token prediction: the extra heads' parameters listed apart, the option on the tricks line.
  r = run_cli("info --config configs/tiny.json --set model.mtp_heads=2 --json");
  CHECK(r.status == 0);
  const nlohmann::json breakdown = nlohmann::json::parse(r.out).at("breakdown");
  // configs/tiny.json's d_model C = 32; two heads of a C x C projection and a LayerNorm (gain and bias).
  CHECK(breakdown.at("mtp heads").get<int64_t>() == 2 * (32 * 32 + 2 * 32));
  r = run_cli("info --config configs/tiny.json --set model.mtp_heads=2");
  CHECK_THAT(r.out, Catch::Contains("multi-token prediction of tokens t+2..t+3 (2 training-only heads)") &&
                        Catch::Contains("mtp heads"));
}

TEST_CASE("cli: info takes the vocabulary from the data when the file is too short for a batch", "[cli]") {
  const std::string dir = temp_dir("info_vocab");
  // 11 distinct characters ("abcdefghi", space, newline): far fewer tokens than one split of the tiny
  // config needs, so the objective cannot be built and info builds the char tokenizer itself.
  std::ofstream(dir + "/short.txt") << "abc defg\nhi\n";
  std::ofstream(dir + "/empty.txt") << "";
  const std::string info = "info --config configs/tiny.json --json --set data.path=" + dir;
  const auto vocab_of = [](const tfm_test::CliRun& r) {
    INFO(r.out);
    REQUIRE(r.status == 0);
    // The output holds the data's cache notes (stderr) before the JSON.
    REQUIRE(r.out.find('{') != std::string::npos);
    return nlohmann::json::parse(r.out.substr(r.out.find('{'))).at("vocab_size").get<int64_t>();
  };
  CHECK(vocab_of(run_cli(info + "/short.txt")) == 11);
  CHECK(vocab_of(run_cli(info + "/short.txt --set train.objective=masked_lm --set model.causal=false")) ==
        12);
  CHECK(vocab_of(run_cli(info + "/short.txt --set data.tokenizer=byte")) == 256);
  const tfm_test::CliRun empty = run_cli(info + "/empty.txt");
  CHECK(empty.status == 2);
  CHECK_THAT(empty.out, Catch::Contains(dir + "/empty.txt: the corpus has no text"));
  // A folder (any corpus form) gives its vocabulary as training takes it: the characters of its
  // documents and the separator between them.
  std::filesystem::create_directories(dir + "/folder");
  std::ofstream(dir + "/folder/a.txt") << "abc";
  std::ofstream(dir + "/folder/b.txt") << "cde";
  CHECK(vocab_of(run_cli(info + "/folder")) == 6);
}

TEST_CASE("cli: SIGINT checkpoints and exits 0 and a NaN exits 3", "[cli]") {
  const std::string dir = temp_dir("sigint");
  const std::string log = dir + "/out.txt";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::chdir(TFM_SOURCE_DIR) != 0) ::_exit(127);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (!f) ::_exit(127);
    ::dup2(::fileno(stdout), 2);
    ::execl(tfm_test::tfm_binary(), tfm_test::tfm_binary(), "train", "--config", "configs/tiny.json", "--out",
            (dir + "/run").c_str(), "--set", "train.max_steps=1000000", "--set", "train.log_interval=1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until it is training, then interrupt it.
  for (int i = 0;
       i < 1200 && !(fs::exists(dir + "/run/metrics.jsonl") && fs::file_size(dir + "/run/metrics.jsonl") > 0);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGINT);
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  INFO(out.str());
  INFO("ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK_THAT(out.str(), Catch::Contains("interrupted after step") &&
                            Catch::Contains("tfm train --resume " + dir + "/run"));
  CHECK(fs::exists(dir + "/run/last.ckpt"));

  const Run r = run_cli(
      "train --config configs/tiny.json --out " + dir + "/nan --set train.optimizer.lr=1e30 " +
      "--set train.lr_schedule.warmup_steps=0 --set train.grad_clip=0 --set train.checkpoint_interval=1");
  INFO(r.out);
  CHECK(r.status == 3);
  CHECK_THAT(r.out, Catch::Contains("training stopped") && Catch::Contains("untouched"));
}

TEST_CASE("cli: the ETA counts the time budget, threads follow the affinity mask, a run's path may end in /",
          "[cli]") {
  const std::string dir = temp_dir("eta");
  // train.max_seconds 2 of a run that could go on for 100000 steps: no line promises more than it leaves.
  tfm_test::CliRun r =
      run_tfm("train --config configs/tiny.json --out " + dir + "/budget --set train.max_steps=100000 " +
              "--set train.log_interval=5 --set train.eval_interval=50 --set train.max_seconds=2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  int lines = 0;
  for (size_t at = r.out.find("| eta "); at != std::string::npos; at = r.out.find("| eta ", at + 1)) {
    ++lines;
    const std::string left = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
    INFO(left);
    REQUIRE(left.back() == 's');
    CHECK(std::stod(left) <= 2.0);  // "1.4s": tenths of a second below 10 s
  }
  CHECK(lines > 0);
  CHECK_THAT(r.out, !Catch::Contains("s over it"));
  // A budget that the first step and the closing evaluation alone pass: the summary says by how much.
  r = run_tfm("train --config configs/tiny.json --out " + dir + "/tiny_budget --set train.max_steps=100 " +
              "--set train.max_seconds=1e-6");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("time budget: stopped at step 1 of 100") &&
                        Catch::Contains("s over it: steps and the closing evaluation are never cut short"));
  // train.threads 0 takes the cores this process may use (taskset, a cgroup's cpuset), not the machine's.
  r = tfm_test::run_shell("taskset -c 0 " + tfm_test::tfm_command() +
                          " train --config configs/tiny.json --out " + dir +
                          "/one_core --set train.max_steps=1 --set train.threads=0");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("compute: 1 thread(s)"));
  // "RUN/" names RUN: the model's name in the GGUF, its default file and the paths read, without "//".
  r = run_tfm("export --run " + dir + "/one_core/ --format gguf");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("//"));
}

namespace {
// Every file of `dir` (not recursive) and its bytes.
std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().string()] = tfm_test::read_file(e.path());
  return out;
}
}  // namespace

// --resume takes the config from the checkpoint: an edit of config.json used to be ignored, then
// overwritten. It is refused; what tfm itself leaves there (a resume's --set of a resumable key, killed
// before its next checkpoint) still resumes.
TEST_CASE("cli: --resume refuses a hand-edited config.json, naming the key, and changes nothing", "[cli]") {
  const std::string dir = temp_dir("resume_edited") + "/run", config = dir + "/config.json";
  REQUIRE(run_cli("train --config configs/tiny.json --out " + dir + " --set train.max_steps=3").status == 0);
  const std::string original = tfm_test::read_file(config);
  nlohmann::json edited = nlohmann::json::parse(original);
  const nlohmann::json lr = edited["train"]["optimizer"]["lr"];
  edited["train"]["optimizer"]["lr"] = 0.1;
  std::ofstream(config, std::ios::trunc) << edited.dump(2) << "\n";
  const auto before = files_of(dir);
  Run r = run_cli("train --resume " + dir + " --set train.max_steps=5");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(config + ": train.optimizer.lr is 0.1 there, but the run's checkpoint " +
                                    dir + "/last.ckpt was trained with " + lr.dump()) &&
                        Catch::Contains("restore the file") &&
                        Catch::Contains("`tfm train --resume " + dir + " --set KEY=VALUE`") &&
                        Catch::Contains("only data.cache_dir, train.max_steps"));
  CHECK(files_of(dir) == before);
  // Not valid JSON: refused the same way, naming the file.
  std::ofstream(config, std::ios::trunc) << "{\n";
  r = run_cli("train --resume " + dir + " --set train.max_steps=5");
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(config + ": cannot be compared with the config of the run's checkpoint") &&
                 Catch::Contains("malformed JSON"));

  // The same values in another layout: compared parsed, so it resumes.
  std::ofstream(config, std::ios::trunc) << nlohmann::json::parse(original).dump(4);
  r = run_cli("train --resume " + dir + " --set train.max_steps=4");
  CHECK(r.status == 0);
  // What tfm leaves when a resume with --set train.max_steps=6 is killed after its first step (which
  // writes config.json) and before its checkpoint: last.ckpt of step 4, trained to max_steps 4.
  fs::copy_file(dir + "/last.ckpt", dir + "/step4.ckpt");
  REQUIRE(run_cli("train --resume " + dir + " --set train.max_steps=6").status == 0);
  fs::rename(dir + "/step4.ckpt", dir + "/last.ckpt");
  r = run_cli("train --resume " + dir);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(config + " has train.max_steps = 6, which a resume does not read") &&
                        Catch::Contains("--set train.max_steps=6 uses it") &&
                        Catch::Contains("nothing to do: the run is at step 4 of train.max_steps = 4"));
  r = run_cli("train --resume " + dir + " --set train.max_steps=6");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("step 6/6"));
}

TEST_CASE("cli: a resume with nothing to do leaves the run's config.json as it was", "[cli]") {
  const std::string dir = temp_dir("resume_noop") + "/run";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + dir + " --set train.max_steps=3").status == 0);
  const std::string before = tfm_test::read_file(dir + "/config.json");
  tfm_test::CliRun r = run_tfm("train --resume " + dir + " --set train.max_steps=2");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("nothing to do: the run is at step 3 of train.max_steps = 2"));
  CHECK(tfm_test::read_file(dir + "/config.json") == before);
  // A resume that trains writes the config it continues with.
  r = run_tfm("train --resume " + dir + " --set train.max_steps=4");
  REQUIRE(r.status == 0);
  CHECK_THAT(tfm_test::read_file(dir + "/config.json"), Catch::Contains("\"max_steps\": 4"));
}

TEST_CASE("cli: a run records its data's absolute path and is evaluated and resumed from anywhere", "[cli]") {
  const std::string base = temp_dir("absolute");
  const std::string dir = base + "/run";
  // configs/tiny.json names its data relative to the repository, where the run starts.
  REQUIRE(run_cli("train --config configs/tiny.json --out " + dir + " --set train.max_steps=2").status == 0);
  const nlohmann::json config = nlohmann::json::parse(tfm_test::read_file(dir + "/config.json"));
  const std::string data = config.at("data").at("path").get<std::string>();
  CHECK(data == std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  CHECK(config.at("data").at("cache_dir") == std::string(TFM_SOURCE_DIR) + "/tests/data/.tfm-cache");
  // From another directory.
  const std::string elsewhere = "cd '" + base + "' && " + tfm_test::tfm_command();
  Run r = tfm_test::run_shell(elsewhere + " eval --run run --batches 2");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("val loss"));
  r = tfm_test::run_shell(elsewhere + " train --resume run --set train.max_steps=3");
  CHECK(r.status == 0);
  // A run started before runs recorded absolute paths named its data relative to where it is resumed.
  const tfm::Config absolute = tfm::resolve_config(config);
  nlohmann::json old = config;
  old["data"]["path"] = "tests/data/tiny_shakespeare.txt";
  old["data"]["cache_dir"] = "tests/data/.tfm-cache";
  const fs::path cwd = fs::current_path();
  fs::current_path(TFM_SOURCE_DIR);
  CHECK_NOTHROW(tfm::check_resumable(tfm::resolve_config(old), absolute, "old.ckpt"));
  old["data"]["path"] = "tests/data/other.txt";
  CHECK_THROWS_WITH(tfm::check_resumable(tfm::resolve_config(old), absolute, "old.ckpt"),
                    Catch::Contains("data.path: old.ckpt was trained with"));
  fs::current_path(cwd);
}

TEST_CASE("cli: train and config without a config file take every key's default and the --set keys",
          "[cli]") {
  const tfm_test::TempDir tmp("no_config");
  // A user's own text, outside the repository: the run goes to runs/<its name> where tfm starts.
  fs::copy_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt", tmp.file("notes.txt"));
  const std::string here = "cd '" + tmp.path + "' && " + tfm_test::tfm_command();
  const std::string small =
      " --set data.path=notes.txt --set train.max_steps=2 --set model.d_model=16 --set model.n_layers=1"
      " --set train.batch_size=2 --set train.seq_len=16 --set model.max_seq_len=16"
      " --set train.lr_schedule.warmup_steps=0";
  Run r = tfm_test::run_shell(here + " config" + small);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const nlohmann::json printed = nlohmann::json::parse(r.out);
  CHECK(printed.at("output").at("dir") == "runs/notes");
  CHECK(printed.at("model").at("n_heads") ==
        tfm::resolve_config(nlohmann::json::object()).at("model.n_heads"));
  r = tfm_test::run_shell(here + " train" + small);
  REQUIRE(r.status == 0);
  CHECK(fs::exists(tmp.file("runs/notes/last.ckpt")));
  // A folder names its run after itself, a glob "run".
  CHECK(tfm::load_config("", {"data.path=corpus/"}).at("output.dir") == "runs/corpus");
  CHECK(tfm::load_config("", {"data.path=texts/*.txt"}).at("output.dir") == "runs/run");
  CHECK(tfm::load_config("", {"data.path=notes.jsonl.zst"}).at("output.dir") == "runs/notes");
  CHECK(tfm::load_config("", {"data.path=.hidden"}).at("output.dir") == "runs/run");
  CHECK(tfm::load_config("", {"data.path=[\"x/first.txt\",\"y.txt\"]"}).at("output.dir") == "runs/first");
  CHECK(tfm::load_config("", {"data.path=\"[\\\"x/first.txt\\\"]\""}).at("output.dir") == "runs/first");
  // Nothing at all still asks for what to train.
  r = tfm_test::run_tfm("train");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--set KEY=VALUE") && Catch::Contains("tfm train --set data.path="));
  r = tfm_test::run_tfm("config");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--set KEY=VALUE"));
  r = tfm_test::run_tfm("train --max-seconds 60");  // a budget alone names no key of a run
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--set KEY=VALUE"));
}
