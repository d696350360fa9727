// The bad-input catalogue: bad configs through the CLI (exit 2, a message naming the key or
// file) and corrupt checkpoints (truncated at every tenth, seeded bit flips, wrong magic, future
// version, a tensor count that does not match the config), each rejected with a clear message; and
// the GEMM peak cache, which a bad file or link never stops a run over.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_bytes.h"
#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/engine/safetensors.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"

namespace fs = std::filesystem;

namespace {

using Run = tfm_test::CliRun;
// Runs `tfm ARGS` from the repository root (tests/cli_run.h).
Run cli(const std::string& args) {
  return tfm_test::run_tfm(args);
}

using tfm_test::TempDir;

void write_reliability_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A tiny model so a checkpoint is ~18 KB and trains in milliseconds.
const std::string kReliabilityTiny =
    "--config configs/tiny.json --set model.d_model=8 --set model.n_layers=1 --set model.n_heads=2 "
    "--set model.max_seq_len=8 --set train.seq_len=8 ";

// A 2-step kReliabilityTiny run trained into `run`, for a test to damage its files.
void train_tiny_run(const std::string& run) {
  const Run train = cli("train " + kReliabilityTiny + "--set train.max_steps=2 --out " + run);
  INFO(train.out);
  REQUIRE(train.status == 0);
}

}  // namespace

TEST_CASE("reliability: bad configs exit 2 naming the key or file", "[reliability]") {
  TempDir tmp("configs");
  const std::string d = tmp.path;
  // Files the configs point at.
  write_reliability_file(d + "/empty.txt", "");
  write_reliability_file(d + "/short.txt", "abc");
  std::string bad_utf8;  // invalid UTF-8 (\xc3 then '(') in a text long enough for several batches
  for (int i = 0; i < 60; ++i) bad_utf8 += "hello \xc3\x28 world, long enough to hold a batch or two. ";
  write_reliability_file(d + "/bad_utf8.txt", bad_utf8);
  write_reliability_file(d + "/a_file", "not a directory");
  write_reliability_file(d + "/empty.json", "");
  write_reliability_file(d + "/blank.json", "  \n\t\n");
  write_reliability_file(d + "/syntax.json", "{\n  \"seed\": 1,\n  \"model\": {\"d_model\": 32,,}\n}");
  write_reliability_file(d + "/unclosed.json", "{\"train\": {\"max_steps\": 5}");
  write_reliability_file(d + "/trailing.json", "{\"seed\": 1} xyz");
  write_reliability_file(d + "/dup.json", "{\"seed\": 1, \"seed\": 2}");
  write_reliability_file(d + "/overflow.json", "{\"seed\": 1e999}");
  write_reliability_file(d + "/not_utf8.json", "{\"output\": {\"dir\": \"r\xff\xfe\"}}");
  write_reliability_file(d + "/array.json", "[1, 2, 3]");
  write_reliability_file(d + "/deep.json", std::string(200, '[') + std::string(200, ']'));
  struct Case {
    std::string args, fragment;
  };
  const std::string c = "train " + kReliabilityTiny + "--out " + d + "/run ";
  const Case cases[] = {
      // Malformed JSON, with line and column.
      {"train --config " + d + "/syntax.json", d + "/syntax.json:3:27: malformed JSON"},
      {"train --config " + d + "/unclosed.json", d + "/unclosed.json:1:"},
      {"train --config " + d + "/trailing.json", d + "/trailing.json:1:"},
      {"train --config " + d + "/empty.json", "empty"},
      {"train --config " + d + "/blank.json", "empty"},
      {"train --config " + d + "/dup.json", "seed"},
      {"train --config " + d + "/overflow.json", "1e999"},
      {"train --config " + d + "/not_utf8.json", d + "/not_utf8.json"},
      {"train --config " + d + "/array.json", "object"},
      {"train --config " + d + "/deep.json", d + "/deep.json"},
      {"train --config " + d + "/missing.json", d + "/missing.json: cannot open"},
      // Wrong types.
      {c + "--set model.d_model='\"big\"'", "model.d_model"},
      {c + "--set train.batch_size=2.5", "train.batch_size"},
      {c + "--set model.causal=3", "model.causal"},
      {c + "--set train.optimizer.betas=0.9", "train.optimizer.betas"},
      {c + "--set data.path=7", "data.path"},
      // Out of range.
      {c + "--set train.batch_size=0", "train.batch_size"},
      {c + "--set model.dropout=1.5", "model.dropout"},
      {c + "--set train.optimizer.lr=-1", "train.optimizer.lr"},
      {c + "--set train.max_steps=99999999999", "train.max_steps"},
      {c + "--set data.val_fraction=1", "data.val_fraction"},
      {c + "--set train.grad_clip=-0.5", "train.grad_clip"},
      // Inconsistent values.
      {c + "--set model.n_heads=3", "model.n_heads = 3"},
      {c + "--set train.seq_len=64", "train.seq_len"},
      {c + "--set model.n_kv_heads=3", "model.n_kv_heads"},
      {c + "--set train.lr_schedule.min_lr=1", "train.lr_schedule.min_lr"},
      // Unknown keys.
      {c + "--set model.d_modle=8", "model.d_modle"},
      {c + "--set trian.max_steps=8", "trian"},
      {c + "--set train.optimizer.lrate=0.1", "train.optimizer.lrate"},
      // Data: missing, empty, shorter than one batch, invalid UTF-8, unreadable tokenizer.
      {c + "--set data.path=" + d + "/nope.txt", d + "/nope.txt"},
      {c + "--set data.path=" + d + "/empty.txt", d + "/empty.txt"},
      {c + "--set data.path=" + d + "/short.txt", "short.txt"},
      {c + "--set data.path=" + d + "/bad_utf8.txt", d + "/bad_utf8.txt"},
      {c + "--set data.path=" + d, d},
      {c + "--set data.tokenizer=bpe --set data.tokenizer_path=" + d + "/nope.json", d + "/nope.json"},
      // Output directory that cannot be created (a file is in the way) or written.
      {"train " + kReliabilityTiny + "--out " + d + "/a_file/run", d + "/a_file"},
      {"train " + kReliabilityTiny + "--out /proc/tfm_run", "/proc/tfm_run"},
  };
  int tried = 0;
  for (const auto& k : cases) {
    const Run r = cli(k.args);
    INFO(k.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(k.fragment));
    CHECK_THAT(r.out, !Catch::Contains("terminate") && !Catch::Contains("Sanitizer"));
    ++tried;
  }
  CHECK(tried >= 30);
  CHECK_FALSE(fs::exists(d + "/run/last.ckpt"));
}

TEST_CASE("reliability: corrupt checkpoints are rejected with a clear message", "[reliability]") {
  TempDir tmp("ckpt");
  const std::string d = tmp.path;
  train_tiny_run(d + "/run");
  const std::string good = read(d + "/run/last.ckpt");
  REQUIRE(good.size() > 1000);
  const auto parse = [](const std::string& bytes) {
    return tfm::parse_checkpoint(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.ckpt");
  };
  REQUIRE_NOTHROW(parse(good));

  struct Case {
    std::string name, bytes, fragment;
  };
  std::vector<Case> cases;
  // Truncated at every tenth of the file (and empty).
  for (int i = 0; i < 10; ++i)
    cases.push_back({"truncated at " + std::to_string(i) + "/10", good.substr(0, good.size() * i / 10),
                     i == 0 ? "shorter than the 32-byte header" : ""});
  cases.push_back({"one byte short", good.substr(0, good.size() - 1), "truncated"});
  cases.push_back({"one byte extra", good + "x", "truncated or corrupt"});
  // Seeded single-bit flips anywhere in the file.
  std::mt19937_64 rng(6);
  for (int i = 0; i < 24; ++i) {
    std::string b = good;
    const size_t pos = rng() % b.size();
    b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
    cases.push_back({"bit flip at " + std::to_string(pos), b, ""});
  }
  // Bit flips in each header field.
  for (size_t pos : {0, 7, 8, 12, 16, 23, 24, 27, 32, 36}) {
    std::string b = good;
    b[pos] = static_cast<char>(b[pos] ^ 0x10);
    cases.push_back({"header flip at " + std::to_string(pos), b, ""});
  }
  // Whole files (the checksum right) whose sections are not what tfm writes: each is named, none is
  // taken as it comes (a second model section won, optim.1 first was restored as AdamW's m).
  {
    using tfm_test::CheckpointSections;
    const CheckpointSections sections = tfm_test::checkpoint_sections(good);
    const auto section = [&sections](const std::string& name) {
      for (const auto& s : sections)
        if (s.first == name) return s;
      FAIL("no section " << name);
      return sections.front();
    };
    CheckpointSections b;
    for (const auto& s : sections)
      if (s.first.rfind("optim.", 0) != 0) b.push_back(s);
    b.push_back(section("optim.1"));
    b.push_back(section("optim.0"));
    cases.push_back({"optim.1 before optim.0", tfm_test::checkpoint_bytes(b),
                     "corrupt checkpoint: section \"optim.1\" where \"optim.0\" belongs"});
    b = sections;
    b.push_back(section("model"));
    cases.push_back(
        {"a second model section", tfm_test::checkpoint_bytes(b), "section \"model\" appears twice"});
    b = sections;
    for (auto& s : b)
      if (s.first == "vocab") {
        nlohmann::json vocab = nlohmann::json::parse(s.second);
        vocab["symbols"] = {97, 97, 98};
        s.second = vocab.dump();
      }
    cases.push_back({"a vocabulary of a repeated symbol", tfm_test::checkpoint_bytes(b),
                     "corrupt checkpoint: bad vocab section (tokenizer: the vocabulary must be distinct"});
  }
  {
    std::string b = good;
    std::memcpy(b.data(), "PK\3\4zip!", 8);
    cases.push_back({"wrong magic", b, "wrong magic number"});
    uint32_t v = tfm::kCheckpointVersion + 1;
    b = good;
    std::memcpy(b.data() + 8, &v, 4);
    cases.push_back({"future version", b, "written by a newer tfm"});
    uint64_t huge = ~uint64_t{0};
    b = good;
    std::memcpy(b.data() + 16, &huge, 8);
    cases.push_back({"huge payload size", b, "promises"});
    uint32_t sections = 1000;
    b = good;
    std::memcpy(b.data() + 12, &sections, 4);
    cases.push_back({"too many sections", b, "sections"});
    cases.push_back({"random bytes", std::string(4096, '\x5a'), "not a tfm checkpoint"});
  }

  int tried = 0;
  for (const auto& c : cases) {
    INFO(c.name);
    try {
      parse(c.bytes);
      FAIL("accepted");
    } catch (const tfm::IoError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK_THAT(msg, Catch::StartsWith("bad.ckpt: "));
      CHECK_THAT(msg, Catch::Contains(c.fragment));
    }
    ++tried;
  }
  CHECK(tried >= 50);

  // Through the CLI: a few of them in place of last.ckpt give exit 2 naming the file, no crash.
  for (size_t i : {size_t{3}, size_t{15}, cases.size() - 4}) {
    write_reliability_file(d + "/run/last.ckpt", cases[i].bytes);
    const Run r = cli("eval --run " + d + "/run --checkpoint last");
    INFO(cases[i].name << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("last.ckpt"));
    // The run's other checkpoint is whole: the message says how to read it.
    CHECK_THAT(r.out,
               Catch::Contains("(the run also has " + d + "/run/best.ckpt: --checkpoint best reads it)"));
  }

  // Tensor shape mismatch with the config: a valid file (checksum right) whose model holds one
  // value too few, and one whose config asks for a wider model than the values stored.
  tfm::Checkpoint ck = parse(good);
  ck.model.pop_back();
  tfm::save_checkpoint(d + "/run/last.ckpt", ck);
  Run r = cli("eval --run " + d + "/run --checkpoint last");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("last.ckpt") && Catch::Contains("the checkpoint holds"));
  ck = parse(good);
  ck.config["model"]["d_model"] = 16;
  tfm::save_checkpoint(d + "/run/last.ckpt", ck);
  r = cli("eval --run " + d + "/run --checkpoint last");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("last.ckpt"));
}

TEST_CASE(
    "reliability: a checkpoint state field of the wrong type or range exits 2 naming the file and field",
    "[reliability]") {
  TempDir tmp("ckpt_state");
  const std::string run = tmp.path + "/run";
  train_tiny_run(run);
  const std::string good = read(run + "/last.ckpt");
  const std::string path = run + "/last.ckpt";
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  // The checksum is right: only the state's own check stands between these and the commands.
  const Case cases[] = {
      {"a string step", [](nlohmann::json& s) { s["step"] = "2"; }, "the state's \"step\" is \"2\""},
      {"a step of 1e30", [](nlohmann::json& s) { s["step"] = 1e30; }, "the state's \"step\" is 1e+30"},
      {"negative optimizer steps", [](nlohmann::json& s) { s["optimizer"]["steps"] = -1; },
       "the state's \"optimizer.steps\" is -1"},
  };
  for (const Case& c : cases) {
    write_reliability_file(path, tfm_test::with_edited_state(good, c.edit));
    for (const std::string& command :
         {"eval --run " + run + " --checkpoint last", "sample --run " + run + " --checkpoint last",
          "export --run " + run + " --checkpoint last --out " + tmp.path + "/out.safetensors",
          "train --resume " + run + " --set train.max_steps=3"}) {
      const Run r = cli(command);
      INFO(c.name << ": tfm " << command << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK_THAT(r.out,
                 Catch::Contains(path + ": corrupt checkpoint: " + c.field + ", expected an integer "));
      CHECK_THAT(r.out, !Catch::Contains("internal error"));
    }
    CHECK_FALSE(fs::exists(tmp.path + "/out.safetensors"));
  }
}

TEST_CASE("reliability: weights that are not finite are refused on load, naming the file, tensor and index",
          "[reliability]") {
  TempDir tmp("nonfinite_weights");
  const std::string run = tmp.path + "/run", st = tmp.path + "/model.safetensors";
  train_tiny_run(run);
  REQUIRE(cli("export --run " + run + " --out " + st).status == 0);
  // A matrix after the embedding, its value at row 1, column 2: a NaN in the checkpoint, +Inf in the
  // export.
  const tfm::LoadedRun loaded = tfm::load_run(run, "last");
  const std::vector<tfm::NamedParameter>& parameters = loaded.model->parameters();
  const auto matrix = std::find_if(parameters.begin() + 1, parameters.end(),
                                   [](const tfm::NamedParameter& q) { return q.value.dim() == 2; });
  REQUIRE(matrix != parameters.end());
  const tfm::NamedParameter& p = *matrix;
  const int64_t element = p.value.size(1) + 2;
  const std::string where = "tensor " + p.name + " " + tfm::shape_str(p.value.shape());

  tfm::Checkpoint ck = loaded.checkpoint;
  ck.model.at(static_cast<size_t>(p.offset + element)) = std::nanf("");
  tfm::save_checkpoint(run + "/last.ckpt", ck);
  const std::string in_checkpoint = run + "/last.ckpt: " + where + " holds NaN at index [1, 2] (value " +
                                    std::to_string(element) + " of " + std::to_string(p.value.numel()) + ")";
  for (const std::string& command :
       {"eval --run " + run + " --checkpoint last", "sample --run " + run + " --checkpoint last",
        "export --run " + run + " --checkpoint last --out " + tmp.path + "/nan.safetensors",
        "train --resume " + run + " --set train.max_steps=3"}) {
    const Run r = cli(command);
    INFO("tfm " << command << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(in_checkpoint));
  }
  CHECK_FALSE(fs::exists(tmp.path + "/nan.safetensors"));
  // The optimizer's state is read on resume alone: an infinity in AdamW's v, named by its section.
  ck = loaded.checkpoint;
  REQUIRE(ck.optimizer.size() == 2);
  ck.optimizer[1].at(7) = std::numeric_limits<float>::infinity();
  tfm::save_checkpoint(run + "/last.ckpt", ck);
  Run resumed = cli("train --resume " + run + " --set train.max_steps=3");
  INFO(resumed.out);
  CHECK(resumed.status == 2);
  CHECK_THAT(resumed.out,
             Catch::Contains(run + "/last.ckpt: optimizer state optim.1 holds +Inf at value 7 of "));
  CHECK(cli("eval --run " + run + " --checkpoint last").status == 0);  // the weights are whole

  tfm::SafetensorsFile f = tfm::load_safetensors(st);
  tfm::NamedTensors tensors = f.tensors;
  for (auto& [name, t] : tensors)
    if (name == p.name) {
      t = t.clone();  // its own values, not the file's
      t.data()[element] = std::numeric_limits<float>::infinity();
    }
  const std::string inf_st = tmp.path + "/inf.safetensors";
  tfm::save_safetensors(inf_st, tensors, f.metadata);
  const std::string in_export = inf_st + ": " + where + " holds +Inf at index [1, 2]";
  for (const std::string& command :
       {"sample --run " + run + " --checkpoint best --init-from " + inf_st,
        "train " + kReliabilityTiny + "--out " + tmp.path + "/new --init-from " + inf_st}) {
    const Run r = cli(command);
    INFO("tfm " << command << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(in_export));
  }
}

TEST_CASE("reliability: a resume names a checkpoint's missing or extra optimizer section by count",
          "[reliability]") {
  TempDir tmp("optim_sections");
  const std::string run = tmp.path + "/run";
  train_tiny_run(run);
  const tfm::Checkpoint good = tfm::load_checkpoint(run + "/last.ckpt");
  REQUIRE(good.optimizer.size() == 2);  // AdamW's m and v
  for (const size_t sections : {size_t{1}, size_t{3}}) {
    tfm::Checkpoint ck = good;
    ck.optimizer.resize(sections, good.optimizer[0]);
    tfm::save_checkpoint(run + "/last.ckpt", ck);
    const Run r = cli("train --resume " + run + " --set train.max_steps=3");
    INFO(r.out);
    CHECK(r.status == 2);
    // It had said the state was for "adamw" when the config uses "adamw".
    CHECK_THAT(r.out, Catch::Contains(run + "/last.ckpt: " + std::to_string(sections) +
                                      " optimizer state section(s) (optim.N), expected 2 for \"adamw\""));
  }
}

TEST_CASE("reliability: a resume refused for a damaged last.ckpt says how to go on from a good best.ckpt",
          "[reliability]") {
  TempDir tmp("damaged_last");
  const std::string run = tmp.path + "/run", last = run + "/last.ckpt";
  const Run train =
      cli("train " + kReliabilityTiny + "--set train.max_steps=4 --set train.eval_interval=2 --out " + run);
  INFO(train.out);
  REQUIRE(train.status == 0);
  fs::resize_file(last, 1000);  // cut short: its checksum and sizes fail
  Run r = cli("train --resume " + run + " --set train.max_steps=6");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(last + ": ") &&
                        Catch::Contains("best.ckpt (step 4) reads: to go on from it, move " + last +
                                        " aside (mv " + last + " " + last + ".damaged) and --resume again"));
  // The advice, followed, works.
  fs::rename(last, last + ".damaged");
  r = cli("train --resume " + run + " --set train.max_steps=6");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(tfm::load_checkpoint_state(last).step == 6);
  // Without a readable best.ckpt the error is the file's alone.
  fs::resize_file(last, 1000);
  fs::resize_file(run + "/best.ckpt", 1000);
  r = cli("train --resume " + run + " --set train.max_steps=8");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, !Catch::Contains("to go on from it"));
}

TEST_CASE("reliability: train.skip_nonfinite skips bad batches, then stops when they never end",
          "[reliability]") {
  TempDir tmp("skip");
  // lr 1e30 with no clipping: step 1's update makes every later loss NaN, so each batch is skipped
  // with a warning until the bound (100 in a row) stops the run with status 3 as without the option.
  const Run r =
      cli("train " + kReliabilityTiny + "--out " + tmp.path + "/run --set train.optimizer.lr=1e30 " +
          "--set train.lr_schedule.warmup_steps=0 --set train.grad_clip=0 --set train.skip_nonfinite=true");
  INFO(r.out);
  CHECK(r.status == 3);
  CHECK_THAT(r.out, Catch::Contains("step 2: the training loss is NaN; batch skipped, no update") &&
                        Catch::Contains("100 skipped so far") && Catch::Contains("training stopped"));
}

TEST_CASE("reliability: TFM_MFU_PEAK gives the MFU peak, neither timed nor cached, and a bad one exits 2",
          "[reliability]") {
  TempDir tmp("mfu_peak_env");
  const std::string cache = tmp.path + "/cache";
  const auto train = [&](const std::string& value, const std::string& out) {
    return tfm_test::run_shell("TFM_MFU_PEAK=" + value + " XDG_CACHE_HOME='" + cache + "' " +
                               tfm_test::tfm_command() + " train " + kReliabilityTiny +
                               "--set train.max_steps=2 --out " + tmp.path + "/" + out);
  };
  Run r = train("123.5", "given");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("fp32 peak 123.5 GFLOP/s for MFU: given by TFM_MFU_PEAK (not measured)"));
  CHECK_FALSE(fs::exists(cache + "/tfm/gemm_peaks.json"));
  for (const std::string& bad :
       {std::string("fast"), std::string("0"), std::string("-5"), std::string("1e99")}) {
    r = train(bad, "bad");
    INFO(bad << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out,
               Catch::Contains("TFM_MFU_PEAK: expected a number of GFLOP/s in (0, 1e+07], got \"" + bad));
  }
}

// [serial]: ctest runs nothing beside it (CMakeLists.txt), so that its runs may keep the peak they time.
TEST_CASE("reliability: the GEMM peak for MFU is measured once per setup, and its cache never stops a run",
          "[reliability][serial]") {
  TempDir tmp("gemm_peak");
  const std::string cache = tmp.path + "/cache/tfm/gemm_peaks.json";
  // `tfm ARGS` with this test's cache. A peak timed while other programs (a build beside the suite)
  // took part of the core is not kept (checked at the end); such a command runs again, up to 5 times,
  // so that the paths that keep one are checked. A training gets a new run directory each time.
  int n = 0;
  auto tfm = [&](const std::string& args) {
    Run r;
    for (int attempt = 0; attempt < 5; ++attempt) {
      const std::string out =
          args.rfind("train ", 0) == 0 ? " --out " + tmp.path + "/run" + std::to_string(++n) : "";
      // TFM_MFU_PEAK cleared: the suite gives every other training its peak (tests/test_main.cpp).
      r = tfm_test::run_shell("TFM_MFU_PEAK= XDG_CACHE_HOME='" + tmp.path + "/cache' " +
                              tfm_test::tfm_command() + " " + args + out);
      if (r.out.find("the machine was busy") == std::string::npos) break;
    }
    return r;
  };
  auto train = [&] { return tfm("train " + kReliabilityTiny + "--set train.max_steps=2"); };
  auto entry = [&] {
    const nlohmann::json j = nlohmann::json::parse(read(cache));
    REQUIRE(j["format"] == "tfm gemm peaks 1");
    REQUIRE(j["peaks"].size() == 1);
    return std::make_pair(j["peaks"].begin().key(), j["peaks"].begin().value());
  };
  auto write_entry = [&](double gflops, int64_t unix_time) {
    const auto [key, value] = entry();
    nlohmann::json j = {{"format", "tfm gemm peaks 1"}, {"peaks", {{key, value}}}};
    j["peaks"][key]["gflops"] = gflops;
    j["peaks"][key]["unix_time"] = unix_time;
    write_reliability_file(cache, j.dump());
  };
  const int64_t now = static_cast<int64_t>(std::time(nullptr)), day = 24 * 3600;

  // The first run measures and keeps it; the key names the CPU, threads, backend, precision and n.
  Run r = train();
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("GFLOP/s for MFU: measured now on") &&
                        Catch::Contains("kept in " + cache + " for 30 days"));
  CHECK_THAT(entry().first,
             Catch::Contains("1 thread(s)") && Catch::Contains("fp32") && Catch::EndsWith("| n 1024"));
  CHECK(entry().second["gflops"].get<double>() > 0);

  // The next reads it: a planted figure shows it is the cache's, not a new measurement.
  write_entry(12345.6, now - day);
  r = train();
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains("fp32 peak 12345.6 GFLOP/s for MFU: measured ") &&
                        Catch::Contains(", read from " + cache));

  // 31 days old, from the future, or a figure no machine reaches: measured again and replaced.
  for (const auto& [gflops, when] : std::vector<std::pair<double, int64_t>>{
           {12345.6, now - 31 * day}, {12345.6, now + 2 * day}, {12345.6, INT64_MAX}, {1e300, now}}) {
    write_entry(gflops, when);
    r = train();
    INFO(r.out);
    CHECK_THAT(r.out, Catch::Contains("measured now on"));
    CHECK(entry().second["gflops"].get<double>() < 12345);
  }

  // A file that is not a cache, or one whose fields have other types: the run goes on, says why, and
  // writes a good one.
  for (const std::string& bad : {std::string("{nope"), std::string(R"({"format": 1, "peaks": {}})"),
                                 std::string(R"({"format": "tfm gemm peaks 1", "peaks": []})")}) {
    write_reliability_file(cache, bad);
    r = train();
    INFO(bad << "\n" << r.out);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("the cache could not be read: " + cache));
    CHECK(entry().second["gflops"].get<double>() > 0);
  }

  // A symbolic link there is neither read nor replaced, even to a good cache holding this setup.
  write_entry(12345.6, now);
  fs::rename(cache, tmp.path + "/elsewhere.json");
  const std::string elsewhere = read(tmp.path + "/elsewhere.json");
  fs::create_symlink(tmp.path + "/elsewhere.json", cache);
  r = train();
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("measured now on") && Catch::Contains("the cache could not be read: ") &&
                        Catch::Contains("the cache was not written: "));
  CHECK_THAT(r.out, !Catch::Contains("12345.6"));
  CHECK(fs::is_symlink(cache));
  CHECK(read(tmp.path + "/elsewhere.json") == elsewhere);
  fs::remove(cache);

  // `tfm bench gemm` replaces the entries with its own measurement when it is one a run would make.
  r = tfm("bench gemm --threads 1 --seconds 0.05");
  INFO(r.out);
  CHECK_THAT(
      r.out,
      Catch::Contains("peaks for training runs' MFU: not kept: timed for less than a training run's 0.3 s"));
  CHECK(!fs::exists(cache));
  r = tfm("bench gemm --threads 1 --seconds 0.3");
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains("peaks for training runs' MFU: kept in " + cache));
  r = train();
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains(", read from " + cache));

  // A busy machine: a loop pinned to the same core as tfm takes about half of it. The run and the
  // benchmark time the peak and use it, say why it is not kept, and keep nothing.
  fs::remove(cache);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  int core = 0;
  while (!CPU_ISSET(core, &allowed)) ++core;
  const std::string pin = "taskset -c " + std::to_string(core) + " ";
  for (const std::string& args :
       {"train " + kReliabilityTiny + "--set train.max_steps=2 --out " + tmp.path + "/busy_run",
        std::string("bench gemm --threads 1 --seconds 0.3")}) {
    r = tfm_test::run_shell(
        pin + "sh -c 'while :; do :; done' > /dev/null 2>&1 & spin=$!; TFM_MFU_PEAK= XDG_CACHE_HOME='" +
        tmp.path + "/cache' " + pin + tfm_test::tfm_command() + " " + args +
        "; status=$?; kill $spin; exit $status");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("not kept: the machine was busy (the product had ") &&
                          Catch::Contains("% of its 1 core(s))"));
    CHECK(!fs::exists(cache));
  }
}
