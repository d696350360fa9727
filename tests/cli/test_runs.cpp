// A run directory's rules (run_dir.h) through the CLI: any checkpoint, log or metrics file makes a
// directory a run that a new run may not take over; --resume continues from best.ckpt when it is all
// there is; no command but training writes a run's files or over its own input; --init-from refuses
// weights of another vocabulary; --run names a file that is no directory as such.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_run.h"
#include "objective_data.h"
#include "tfm/engine/safetensors.h"
#include "tfm/training/checkpoint.h"

namespace fs = std::filesystem;
using tfm_test::CliRun;
using tfm_test::read_file;
using tfm_test::run_tfm;
using tfm_test::TempDir;

namespace {

// `tfm train` on a model small enough to train in milliseconds, reading `data`.
std::string tiny_train(const std::string& data) {
  return "train --config configs/tiny.json --set model.d_model=8 --set model.n_layers=1 --set "
         "model.n_heads=2 "
         "--set model.max_seq_len=8 --set train.seq_len=8 --set train.eval_steps=2 --set data.path=" +
         data + " ";
}

// A copy of the test corpus in `dir`: the tests may aim commands at it without risking the repository's.
std::string copy_corpus(const std::string& dir) {
  const std::string path = dir + "/data.txt";
  fs::copy_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt", path);
  return path;
}

// Every file under `dir` (names relative to it) with its bytes.
std::map<std::string, std::string> snapshot_runs(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    files[fs::relative(e.path(), dir).string()] =
        e.is_regular_file() ? read_file(e.path().string()) : "<dir>";
  return files;
}

// A tiny run on `data` trained into DIR/run with `sets` ("--set KEY=VALUE ..."); its directory.
std::string trained_run(const std::string& dir, const std::string& data, const std::string& sets) {
  const std::string run = dir + "/run";
  const CliRun r = run_tfm(tiny_train(data) + "--out " + run + " " + sets);
  INFO(r.out);
  REQUIRE(r.status == 0);
  return run;
}

int64_t step_of(const std::string& checkpoint) {
  return tfm::load_checkpoint(checkpoint).state.step;
}

}  // namespace

TEST_CASE("runs: a directory holding only best.ckpt, train.log or metrics.jsonl is not taken over",
          "[runs][cli]") {
  TempDir tmp("runs_taken");
  const std::string data = copy_corpus(tmp.path);
  const std::string run = trained_run(tmp.path, data, "--set train.max_steps=4 --set train.eval_interval=2");
  for (const std::string& name : std::vector<std::string>{"best.ckpt", "train.log", "metrics.jsonl"}) {
    // What a killed run with train.checkpoint_interval 0 (or a run stopped before its first save) leaves.
    const std::string dir = tmp.path + "/only_" + name;
    fs::create_directories(dir);
    fs::copy_file(run + "/" + name, dir + "/" + name);
    const auto before = snapshot_runs(dir);
    const CliRun r = run_tfm(tiny_train(data) + "--out " + dir);
    INFO(name << ": " << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(dir + " already holds a run (" + name + ")"));
    // It points where a run can go on from: --resume when there is a checkpoint, else a fresh start.
    if (name == "best.ckpt")
      CHECK_THAT(r.out, Catch::Contains("tfm train --resume " + dir));
    else
      CHECK_THAT(r.out, Catch::Contains("saved no checkpoint, so it cannot be continued; remove " + dir) &&
                            !Catch::Contains("--resume"));
    CHECK(snapshot_runs(dir) ==
          before);  // nothing written, replaced or left behind (no config.json, no lock)
  }
}

TEST_CASE("runs: --resume continues from best.ckpt when it is all there is, as the whole run did",
          "[runs][cli]") {
  TempDir tmp("runs_best");
  const std::string data = copy_corpus(tmp.path), whole = tmp.path + "/whole", part = tmp.path + "/part";
  const std::string args = tiny_train(data) +
                           "--set train.max_steps=8 --set train.eval_interval=2 --set train.log_interval=1 "
                           "--set train.checkpoint_interval=0 --out ";
  CliRun r = run_tfm(args + whole);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Stopped after step 5, then last.ckpt lost (as a SIGKILL before the end leaves a run whose only
  // saves were its evaluations' best.ckpt): metrics.jsonl holds steps past best.ckpt's.
  r = run_tfm(args + part + " --stop-at 5");
  INFO(r.out);
  REQUIRE(r.status == 0);
  fs::remove(part + "/last.ckpt");
  const int64_t best = step_of(part + "/best.ckpt");
  REQUIRE((best == 2 || best == 4));
  REQUIRE(tfm_test::read_metrics(part).back().at("step") == 5);

  r = run_tfm("train --resume " + part);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out,
             Catch::Contains("no last.ckpt: resuming from best.ckpt (step " + std::to_string(best) + ")"));
  CHECK(step_of(part + "/last.ckpt") == 8);
  // metrics.jsonl reads as one run: the records past best.ckpt's step were dropped and logged again,
  // and every figure is the uninterrupted run's (the resumed run continues bit for bit).
  const std::vector<nlohmann::json> a = tfm_test::read_metrics(whole), b = tfm_test::read_metrics(part);
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i);
    CHECK(b[i].at("step") == a[i].at("step"));
    CHECK(b[i].at("train_loss") == a[i].at("train_loss"));
    CHECK(b[i].value("val_loss", -1.0) == a[i].value("val_loss", -1.0));
  }
}

TEST_CASE("runs: no command writes over a run's own files or over its input", "[runs][cli]") {
  TempDir tmp("runs_own");
  const std::string data = copy_corpus(tmp.path);
  const std::string run = trained_run(tmp.path, data, "--set train.max_steps=2 --set train.eval_interval=2");
  REQUIRE(fs::exists(run + "/best.ckpt"));
  fs::create_symlink(run + "/last.ckpt", tmp.path + "/link.safetensors");
  fs::create_symlink(data, tmp.path + "/data_link.txt");
  fs::create_hard_link(data, tmp.path + "/data_hard.txt");
  const auto run_before = snapshot_runs(run);
  const std::string data_before = read_file(data);

  struct Case {
    std::string args, flag, path;
  };
  const std::string other = tmp.path + "/run/../run";  // the run by another spelling
  const std::vector<Case> cases = {
      {"export --run " + run, "--out", run + "/last.ckpt"},
      {"export --run " + run, "--out", run + "/best.ckpt"},
      {"export --run " + run + " --checkpoint best", "--out", run + "/best.ckpt"},
      {"export --run " + run, "--out", run + "/config.json"},
      {"export --run " + run, "--out", run + "/train.log"},
      {"export --run " + run, "--out", run + "/metrics.jsonl"},
      {"export --run " + run, "--out", run + "/train.lock"},
      {"export --run " + run, "--out", run + "/loss.svg"},  // the figure training redraws
      {"export --run " + run, "--out", run + "/loss-log.svg"},
      {"export --run " + run, "--out", other + "/last.ckpt"},
      {"export --run " + run, "--out", tmp.path + "/link.safetensors"},
      {"export --run " + run + " --format gguf", "--out", run + "/best.ckpt"},
      {"eval --run " + run, "--dump-logits", run + "/last.ckpt"},
      {"eval --run " + run, "--dump-logits", other + "/metrics.jsonl"},
      {"eval --run " + run, "--dump-logits", data},
      {"eval --run " + run, "--dump-logits", tmp.path + "/data_link.txt"},
      {"eval --run " + run, "--dump-logits", tmp.path + "/data_hard.txt"},
      {"eval --run " + run + " --text ab", "--dump-logits", run + "/config.json"},
      {"attention --run " + run + " --text ab --no-plot", "--out", run + "/last.ckpt"},
      {"heads --run " + run + " --no-plot", "--out", run + "/best.ckpt"},
      {"tokenizer train --data " + data, "--out", data},
      {"tokenizer train --data " + data, "--out", tmp.path + "/data_link.txt"},
      {"bench attention --seq-lens 8,16 --no-plot", "--out", run + "/config.json"},
      {"sweep --config configs/tiny.json --grid train.max_steps=1", "--out", run + "/last.ckpt"},
      {"plot loss " + run + " " + run, "--out", run + "/last.ckpt"},
      {"plot loss " + run, "--out", run + "/metrics.jsonl"},
      {"plot speedrun a=" + run, "--out", run + "/best.ckpt"},
      {"plot speedrun a=" + run + "/metrics.jsonl", "--out", other + "/metrics.jsonl"},
  };
  CliRun r;
  for (const Case& c : cases) {
    r = run_tfm(c.args + " " + c.flag + " " + c.path);
    INFO(c.args << " " << c.flag << " " << c.path << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("tfm: error: " + c.flag + ": " + c.path));
    CHECK_THAT(r.out, Catch::Contains("only `tfm train` writes a run's own files") ||
                          Catch::Contains("only `tfm train` and `tfm plot loss` draw a run's loss figures") ||
                          Catch::Contains("which this command reads"));
  }
  CHECK(snapshot_runs(run) == run_before);  // byte for byte, and nothing added
  CHECK(read_file(data) == data_before);
  CHECK(fs::is_symlink(tmp.path + "/link.safetensors"));
  for (const char* which : {"last", "best"}) {
    r = run_tfm("eval --run " + run + " --batches 1 --checkpoint " + which);
    INFO(r.out);
    CHECK(r.status == 0);
  }
  // Elsewhere the same commands write (the guard refuses only what it must).
  r = run_tfm("export --run " + run + " --out " + tmp.path + "/model.safetensors");
  INFO(r.out);
  CHECK(r.status == 0);
  r = run_tfm("eval --run " + run + " --dump-logits " + tmp.path + "/logits.json");
  INFO(r.out);
  CHECK(r.status == 0);
  // `tfm plot loss` draws the run's own loss figures, as training does.
  for (const std::string& args : {"plot loss " + run, "plot loss " + run + " --log-y",
                                  "plot loss " + run + " --out " + run + "/loss.svg"}) {
    r = run_tfm(args);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 0);
  }
  CHECK(fs::exists(run + "/loss-log.svg"));
}

TEST_CASE("runs: --run or --resume naming a file says it is not a run directory", "[runs][cli]") {
  TempDir tmp("runs_file");
  const std::string file = tmp.path + "/notes.txt";
  std::ofstream(file) << "not a run\n";
  for (const std::string& args : {"eval --run " + file, "sample --run " + file, "train --resume " + file,
                                  "export --run " + file + " --out " + tmp.path + "/m.safetensors"}) {
    const CliRun r = run_tfm(args);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(file + ": not a run directory (it is a file"));
    CHECK_THAT(r.out, !Catch::Contains("no such"));
  }
  CHECK(read_file(file) == "not a run\n");
  const CliRun r = run_tfm("eval --run " + tmp.path + "/missing");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(tmp.path + "/missing: no such run directory"));
}

namespace {

// A corpus of the ten letters from `first` on, spaces and newlines: two of them with other first
// letters have vocabularies of the same size (12) and other characters.
std::string letters_corpus(const std::string& path, char first) {
  std::mt19937 rng(5);
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += i % 60 == 59 ? '\n' : i % 6 == 5 ? ' ' : static_cast<char>(first + static_cast<int>(rng() % 10));
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The `tfm train` arguments a refusal of --init-from advises: "--init-from FILE --set ..." from its
// "(tfm train ...)".
std::string advised_arguments(const std::string& out) {
  const std::string start = "(tfm train ";
  const size_t from = out.find(start);
  if (from == std::string::npos) return "";
  const size_t to = out.find(')', from);
  return to == std::string::npos ? "" : out.substr(from + start.size(), to - from - start.size());
}

}  // namespace

TEST_CASE("runs: --init-from refuses weights trained on another vocabulary of the same size", "[runs][cli]") {
  TempDir tmp("runs_vocab");
  const std::string a = letters_corpus(tmp.path + "/a.txt", 'a'),
                    k = letters_corpus(tmp.path + "/k.txt", 'k');
  const std::string st = tmp.path + "/a.safetensors";
  CliRun r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/ra --set train.max_steps=1");
  INFO(r.out);
  REQUIRE(r.status == 0);
  r = run_tfm("export --run " + tmp.path + "/ra --out " + st);
  REQUIRE(r.status == 0);
  const std::string plain = tmp.path + "/plain.safetensors";  // the same weights without tfm's metadata
  tfm::save_safetensors(plain, tfm::load_safetensors(st).tensors);
  // A run on the other letters: the tensors fit (12 tokens each), the tokens do not.
  r = run_tfm(tiny_train(k) + "--out " + tmp.path + "/rk --set train.max_steps=1 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(st + ": its tokenizer is not the run's (data.path " + k + ")") &&
                 Catch::Contains("12 tokens each, but id 2 is \"a\" in the file and \"k\" in the run"));
  CHECK_FALSE(fs::exists(tmp.path + "/rk"));  // refused before the run directory was made
  // sample --init-from compares with the run's checkpoint the same way.
  r = run_tfm(tiny_train(k) + "--out " + tmp.path + "/rk --set train.max_steps=1");
  REQUIRE(r.status == 0);
  r = run_tfm("sample --run " + tmp.path + "/rk --init-from " + st + " --max-new-tokens 3");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("id 2 is \"a\" in the file and \"k\" in the run"));
  // The same vocabulary loads without a word; a file without a tokenizer loads with a warning.
  r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/ra2 --set train.max_steps=1 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("cannot be compared"));
  r = run_tfm(tiny_train(k) + "--out " + tmp.path + "/rk2 --set train.max_steps=1 --init-from " + plain);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(plain + ": no \"tokenizer\" or \"config\" in its metadata") &&
                        Catch::Contains("cannot be compared"));
}

TEST_CASE("runs: --init-from refuses weights of a model that computes otherwise, not of another dropout",
          "[runs][cli]") {
  TempDir tmp("runs_keys");
  const std::string a = letters_corpus(tmp.path + "/a.txt", 'a');
  const std::string st = tmp.path + "/a.safetensors";
  CliRun r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/ra --set train.max_steps=1");
  REQUIRE(r.status == 0);
  REQUIRE(run_tfm("export --run " + tmp.path + "/ra --out " + st).status == 0);
  const auto init_from = [&](const std::string& name, const std::string& sets) {
    return run_tfm(tiny_train(a) + "--out " + tmp.path + "/" + name + " --set train.max_steps=1 " + sets +
                   " --init-from " + st);
  };
  // ReLU has GELU's tensors, names and shapes: only the exported config tells them apart.
  r = init_from("relu", "--set model.activation=relu");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(st + ": exported from a run with model.activation = \"gelu\", this run has "
                                  "\"relu\"") &&
                 Catch::Contains("(tfm train --init-from " + st + " --set model.activation=\"gelu\")"));
  CHECK_FALSE(fs::exists(tmp.path + "/relu"));
  // Dropout does not change what the weights mean.
  r = init_from("drop", "--set model.dropout=0.2");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("cannot be compared"));
  // Several keys differ: every one is named, and the advised command sets them all, so it works.
  r = init_from("two", "--set model.activation=relu --set model.bias=false");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("model.activation = \"gelu\" and model.bias = true, this run has \"relu\" "
                             "and false") &&
                 Catch::Contains("--set model.activation=\"gelu\" --set model.bias=true)"));
  r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/advised --set train.max_steps=1 " +
              "--set model.activation=relu --set model.bias=false " + advised_arguments(r.out));
  INFO(r.out);
  CHECK(r.status == 0);
}

TEST_CASE("runs: --init-from a masked LM into a causal run names the objective, and its advice works",
          "[runs][cli]") {
  TempDir tmp("runs_objective");
  const std::string a = letters_corpus(tmp.path + "/a.txt", 'a');
  const std::string st = tmp.path + "/mlm.safetensors";
  CliRun r = run_tfm(tiny_train(a) + "--out " + tmp.path +
                     "/mlm --set train.max_steps=1 --set train.objective=masked_lm --set model.causal=false");
  INFO(r.out);
  REQUIRE(r.status == 0);
  REQUIRE(run_tfm("export --run " + tmp.path + "/mlm --out " + st).status == 0);
  r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/causal --set train.max_steps=1 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(st + ": exported from a train.objective \"masked_lm\" run, this run's is "
                                         "\"causal_lm\"") &&
                        Catch::Contains("--set train.objective=masked_lm --set model.causal=false"));
  CHECK_FALSE(fs::exists(tmp.path + "/causal"));
  // What it advises, after the same config, trains.
  const std::string advice = advised_arguments(r.out);
  REQUIRE(advice.rfind("--init-from " + st, 0) == 0);
  r = run_tfm(tiny_train(a) + "--out " + tmp.path + "/advised --set train.max_steps=1 " + advice);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("initial weights: " + st));
}
