// The training loop end to end in-process: learning, gradient accumulation, bit-identical resume,
// non-finite stops, sampling determinism and corrupt checkpoints.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/models/sampling.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"
#include "train_options.h"

using namespace tfm;
namespace fs = std::filesystem;

namespace {

// A fresh run directory path per test (not created: the trainer makes it).
std::string run_dir(const std::string& name) {
  return tfm_test::scratch_path("train", name);
}

using tfm_test::quiet;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes_train(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The small config in `dir` trained by plain SGD at learning rate `lr`, nothing to tame it (no warmup,
// clipping or momentum), a checkpoint every step: how the tests make a run diverge.
Config diverging_sgd_config(const std::string& dir, const std::string& lr) {
  return tfm_test::small_train_config(
      dir, {"train.optimizer.lr=" + lr, "train.lr_schedule.warmup_steps=0", "train.checkpoint_interval=1",
            "train.grad_clip=0", "train.optimizer.name=sgd", "train.optimizer.momentum=0"});
}

}  // namespace

TEST_CASE("train: a tiny model overfits a short text to near-zero loss", "[train]") {
  const std::string dir = run_dir("overfit");
  // Distinct characters, repeated: each one determines the next, so even the first position of a
  // window is predictable and the loss can go to zero.
  const std::string unit = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?0123456789\n";
  std::string text;
  for (int i = 0; i < 8; ++i) text += unit;
  const std::string path = dir + "_data.txt";
  write_bytes_train(path, text);
  const Config c = tfm_test::small_train_config(
      dir, {"data.path=" + path, "model.d_model=64", "train.seq_len=16", "train.batch_size=8",
            "train.max_steps=200", "train.optimizer.lr=1e-2", "train.optimizer.weight_decay=0",
            "train.lr_schedule.name=constant", "train.log_interval=50", "train.eval_interval=200",
            "train.checkpoint_interval=0"});
  const TrainResult r = train(c, quiet());
  REQUIRE(r.status == TrainResult::Status::Finished);
  REQUIRE(r.losses.size() == 200);
  CHECK(r.losses.front() > 3.0);
  double tail = 0;
  for (size_t i = r.losses.size() - 10; i < r.losses.size(); ++i) tail += r.losses[i] / 10;
  CHECK(tail < 0.1);
  CHECK(r.val_loss < 0.2);  // the validation text is the same sentence
  CHECK(fs::exists(dir + "/last.ckpt"));
  CHECK(fs::exists(dir + "/best.ckpt"));
  CHECK(fs::exists(dir + "/config.json"));
  CHECK(fs::exists(dir + "/train.log"));
  // metrics.jsonl: one record per log interval with the documented fields.
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  int records = 0;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* k :
         {"step", "train_loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step", "elapsed_s"})
      CHECK(j.contains(k));
    ++records;
  }
  CHECK(records == 4);
}

TEST_CASE("train: grad accumulation 2 x B/2 gives the update of one batch of B", "[train]") {
  auto values_after = [](const std::string& name, std::vector<std::string> sets) {
    const std::string dir = run_dir(name);
    sets.insert(sets.end(), {"train.max_steps=1", "train.grad_clip=0", "train.eval_interval=1"});
    train(tfm_test::small_train_config(dir, sets), quiet());
    return load_checkpoint(dir + "/last.ckpt").model;
  };
  const auto before = values_after("accum0", {"train.optimizer.lr=1e-12"});
  const auto one = values_after("accum1", {"train.batch_size=8", "train.grad_accum_steps=1"});
  const auto two = values_after("accum2", {"train.batch_size=4", "train.grad_accum_steps=2"});
  const auto four = values_after("accum4", {"train.batch_size=2", "train.grad_accum_steps=4"});
  REQUIRE(one.size() == two.size());
  // Compare the updates (after - before), not the values: Adam's first step moves every parameter
  // by ~lr, so the updates must agree far better than lr.
  double max_diff = 0, max_update = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    max_diff = std::max({max_diff, std::fabs(static_cast<double>(one[i]) - two[i]),
                         std::fabs(static_cast<double>(one[i]) - four[i])});
    max_update = std::max(max_update, std::fabs(static_cast<double>(one[i]) - before[i]));
  }
  CHECK(max_update > 1e-4);
  CHECK(max_diff < 1e-6);
}

TEST_CASE("train: resuming from last.ckpt reproduces the uninterrupted run bit for bit", "[train]") {
  // Dropout on, so the model's dropout RNG must be restored too.
  const std::vector<std::string> sets = {"model.dropout=0.1", "model.attention_dropout=0.1",
                                         "train.max_steps=16"};
  const std::string a = run_dir("resume_a"), b = run_dir("resume_b");
  const TrainResult full = train(tfm_test::small_train_config(a, sets), quiet());
  REQUIRE(full.losses.size() == 16);

  TrainOptions stop = quiet();
  stop.stop_at_step = 7;  // not a checkpoint_interval multiple: the stop itself writes last.ckpt
  const TrainResult first = train(tfm_test::small_train_config(b, sets), stop);
  REQUIRE(first.status == TrainResult::Status::Interrupted);
  REQUIRE(first.losses.size() == 7);
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult second = train(tfm_test::small_train_config(b, sets), resume);
  REQUIRE(second.status == TrainResult::Status::Finished);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  REQUIRE(joined.size() == full.losses.size());
  for (size_t i = 0; i < joined.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(joined[i] == full.losses[i]);  // exactly
  }
  CHECK(second.val_loss == full.val_loss);
  CHECK(load_checkpoint(a + "/last.ckpt").model == load_checkpoint(b + "/last.ckpt").model);
  // metrics.jsonl reads as one run: steps 1..16 once each (log_interval = 1).
  std::ifstream metrics(b + "/metrics.jsonl");
  std::string line;
  int64_t expect = 1;
  while (std::getline(metrics, line))
    CHECK(nlohmann::json::parse(line).at("step").get<int64_t>() == expect++);
  CHECK(expect == 17);

  // A fresh run refuses a directory holding a run; resume refuses to change the model.
  CHECK_THROWS_AS(train(tfm_test::small_train_config(b, sets), quiet()), ConfigError);
  auto other = sets;
  other.push_back("model.d_model=64");
  CHECK_THROWS_WITH(train(tfm_test::small_train_config(b, other), resume),
                    Catch::StartsWith("model.d_model"));
}

TEST_CASE("train: a Muon run with the wsd schedule resumes bit for bit, momentum included",
          "[slow][train][muon]") {
  // Interrupted inside the stable phase, resumed through the decay (s0 = 16 - floor(0.25 * 16) = 12), on
  // 2 threads so that Muon's matrices are shared between threads.
  const std::vector<std::string> sets = {
      "train.optimizer.name=muon",  "train.optimizer.muon_weight_decay=0.05",
      "train.lr_schedule.name=wsd", "train.lr_schedule.decay_fraction=0.25",
      "train.max_steps=16",         "train.threads=2",
      "model.dropout=0.1"};
  const std::string a = run_dir("muon_a"), b = run_dir("muon_b");
  const TrainResult full = train(tfm_test::small_train_config(a, sets), quiet());
  REQUIRE(full.losses.size() == 16);
  CHECK(full.losses.back() < full.losses.front() - 0.3);  // it learns
  TrainOptions stop = quiet();
  stop.stop_at_step = 7;
  const TrainResult first = train(tfm_test::small_train_config(b, sets), stop);
  REQUIRE(first.status == TrainResult::Status::Interrupted);
  const Checkpoint mid = load_checkpoint(b + "/last.ckpt");
  CHECK(mid.state.optimizer == "muon");
  CHECK(mid.state.optimizer_steps == 7);
  REQUIRE(mid.optimizer.size() == 3);  // AdamW's m, v over the rest, Muon's momentum over the matrices
  CHECK(mid.optimizer[0].size() + mid.optimizer[2].size() == mid.model.size());
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult second = train(tfm_test::small_train_config(b, sets), resume);
  tfm_test::check_resume_is_exact(first, second, full, a, b);
  const Checkpoint cb = load_checkpoint(b + "/last.ckpt");
  // The same run directory under another optimizer: refused (the config differs), and a checkpoint
  // whose momentum does not fit is named.
  std::vector<std::string> adamw = sets;
  adamw[0] = "train.optimizer.name=adamw", adamw[1] = "train.optimizer.weight_decay=0.1";
  CHECK_THROWS_WITH(train(tfm_test::small_train_config(b, adamw), resume),
                    Catch::StartsWith("train.optimizer.name"));
  Checkpoint bad = cb;
  bad.optimizer[2].pop_back();
  save_checkpoint(b + "/last.ckpt", bad);
  CHECK_THROWS_WITH(train(tfm_test::small_train_config(b, sets), resume),
                    Catch::Contains("optimizer state 2 has") && Catch::Contains("expected"));
}

TEST_CASE("train: a run with every speedrun trick resumes bit for bit and samples through its cache",
          "[slow][train][tricks]") {
  // The tricks' parameters (x0 mixes, value lambdas, the bigram table) are the model's: checkpointed
  // and restored like the others. Muon takes the blocks' matrices, AdamW the tricks' scalars.
  const std::vector<std::string> sets = {
      "model.tie_embeddings=false", "model.zero_init=true",      "model.logit_softcap=15",
      "model.x0_skip=true",         "model.value_residual=true", "model.bigram_buckets=512",
      "train.optimizer.name=muon",  "train.max_steps=8",         "model.dropout=0.1"};
  const std::string a = run_dir("tricks_a"), b = run_dir("tricks_b");
  const TrainResult full = train(tfm_test::small_train_config(a, sets), quiet());
  REQUIRE(full.losses.size() == 8);
  TrainOptions stop = quiet();
  stop.stop_at_step = 3;
  REQUIRE(train(tfm_test::small_train_config(b, sets), stop).status == TrainResult::Status::Interrupted);
  const Checkpoint mid = load_checkpoint(b + "/last.ckpt");
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult second = train(tfm_test::small_train_config(b, sets), resume);
  REQUIRE(second.status == TrainResult::Status::Finished);
  CHECK(second.losses.size() == 5);
  CHECK(load_checkpoint(a + "/last.ckpt").model == load_checkpoint(b + "/last.ckpt").model);
  CHECK(second.val_loss == full.val_loss);
  CHECK(load_checkpoint(b + "/last.ckpt").model != mid.model);  // the resumed steps trained it

  LoadedRun run = load_run(b, "last");
  CHECK(run.model->find_parameter("bigram.weight") != nullptr);
  SampleOptions o;
  o.prompt = "First";
  o.max_new_tokens = 40;  // beyond max_seq_len = 16: the cache is refilled as the window slides
  o.temperature = 0.0;
  const std::string text = generate(*run.model, run.checkpoint.tokenizer, o);
  CHECK(decode_utf8(text, "sample").size() == 40);
  CHECK(generate(*run.model, run.checkpoint.tokenizer, o) == text);
}

TEST_CASE("train: a non-finite loss stops with the step and leaves the last checkpoint", "[train]") {
  const std::string dir = run_dir("nan");
  const Config c = diverging_sgd_config(dir, "1e30");
  const TrainResult r = train(c, quiet());
  REQUIRE(r.status == TrainResult::Status::NonFinite);
  CHECK_THAT(r.message, Catch::Contains("step " + std::to_string(r.step + 1)));
  CHECK_THAT(r.message, Catch::Contains("untouched"));
  if (r.step > 0) {
    const Checkpoint ck = load_checkpoint(dir + "/last.ckpt");
    CHECK(ck.state.step == r.step);
    CHECK(std::all_of(ck.model.begin(), ck.model.end(), [](float v) { return std::isfinite(v); }));
  }
}

TEST_CASE("train: an update that overflows the weights stops the run before they are evaluated or saved",
          "[train]") {
  // lr 1e39 is past float's range: step 1's loss and gradient are finite, its update makes the weights
  // infinite. A checkpoint every step would have written them (and said the last one was untouched).
  const std::string dir = run_dir("overflow");
  const Config c = diverging_sgd_config(dir, "1e39");
  const TrainResult r = train(c, quiet());
  REQUIRE(r.status == TrainResult::Status::NonFinite);
  CHECK(r.step == 0);
  CHECK_THAT(r.message, Catch::StartsWith("step 1: the update made the weights of ") &&
                            Catch::Contains(" not finite (loss ") &&
                            Catch::Contains("no checkpoint was written"));
  CHECK_FALSE(fs::exists(dir + "/last.ckpt"));
  CHECK_FALSE(fs::exists(dir + "/best.ckpt"));
}

TEST_CASE("train: a resume after a crash keeps a best.ckpt newer than last.ckpt until it is beaten",
          "[train]") {
  // Evaluations every 5 steps, checkpoints every 10, killed during step 16 (the exception stands for
  // the SIGKILL: nothing more is saved): best.ckpt holds step 15's evaluation, last.ckpt step 10 and the
  // best val loss it knew then.
  const std::string dir = run_dir("best_after_crash");
  const std::vector<std::string> sets = {"train.eval_interval=5", "train.checkpoint_interval=10"};
  TrainOptions crash = quiet();
  crash.on_step = [](int64_t step, const Model&) {
    if (step == 16) throw std::runtime_error("killed");
  };
  CHECK_THROWS_WITH(train(tfm_test::small_train_config(dir, sets), crash), "killed");
  const CheckpointState last = load_checkpoint_state(dir + "/last.ckpt");
  const CheckpointState best = load_checkpoint_state(dir + "/best.ckpt");
  REQUIRE(last.step == 10);
  REQUIRE(best.step == 15);
  REQUIRE(best.best_val_loss < last.best_val_loss);
  const std::string best_bytes = file_bytes(dir + "/best.ckpt");
  const std::string damaged = dir + "_damaged";  // the same crash, best.ckpt then damaged
  fs::copy(dir, damaged, fs::copy_options::recursive);
  const auto four = [](double v) {
    char s[32];
    std::snprintf(s, sizeof s, "%.4f", v);
    return std::string(s);
  };
  // What the resume logged: train.log's lines after the crashed run's.
  const auto resumed_log = [](const std::string& run) {
    const std::string log = file_bytes(run + "/train.log");
    return log.substr(log.find("tfm train: resuming"));
  };

  // Resumed up to step 15 again: the same steps (a resume is bit-identical), so the same val loss as
  // best.ckpt's, which beats last.ckpt's best but not best.ckpt: no new best, best.ckpt untouched.
  TrainOptions to_15 = quiet();
  to_15.stop_at_step = 15;
  REQUIRE(resume(dir, {}, to_15).status == TrainResult::Status::Interrupted);
  std::string log = resumed_log(dir);
  CHECK_THAT(log, Catch::Contains("best.ckpt holds step 15 at val loss " + four(best.best_val_loss) +
                                  ", from after last.ckpt (step 10, best val loss so far " +
                                  four(last.best_val_loss) + "): a new best must beat"));
  CHECK_THAT(log, Catch::Contains("step 15/20 | val loss " + four(best.best_val_loss)));
  CHECK_THAT(log, !Catch::Contains("new best: saved best.ckpt"));
  CHECK(file_bytes(dir + "/best.ckpt") == best_bytes);

  // A damaged best.ckpt does not stop the resume: said, and the usual rule replaces it. The damage is
  // a flipped bit in the last weights' bytes: its state still reads, and its val loss, the better one,
  // would have kept the resume from replacing a file no command can load.
  std::string flipped = best_bytes;
  flipped.back() ^= 0x01;
  write_bytes_train(damaged + "/best.ckpt", flipped);
  REQUIRE(load_checkpoint_state(damaged + "/best.ckpt").best_val_loss == best.best_val_loss);
  REQUIRE(resume(damaged, {}, to_15).status == TrainResult::Status::Interrupted);
  log = resumed_log(damaged);
  CHECK_THAT(log, Catch::Contains(damaged + "/best.ckpt: corrupt checkpoint: checksum mismatch") &&
                      Catch::Contains("; the resume goes on: the first evaluation better than the best "
                                      "last.ckpt (step 10, best val loss so far " +
                                      four(last.best_val_loss) + ") knows replaces best.ckpt"));
  CHECK_THAT(log, Catch::Contains("new best: saved best.ckpt"));
  CHECK(load_checkpoint_state(damaged + "/best.ckpt").step == 15);
}

TEST_CASE("train: sampling is deterministic for a fixed seed and streams its text", "[train]") {
  const std::string dir = run_dir("sample");
  train(tfm_test::small_train_config(dir, {"train.max_steps=10"}), quiet());
  LoadedRun run = load_run(dir, "last");
  SampleOptions o;
  o.prompt = "First";
  o.max_new_tokens = 40;  // beyond max_seq_len = 16: the context window slides
  o.seed = 11;
  std::string streamed;
  const auto stream = [&](const std::string& piece) { streamed += piece; };
  CHECK(generate(*run.model, run.checkpoint.tokenizer, o, stream).empty());  // streamed, not kept
  const std::string s1 = generate(*run.model, run.checkpoint.tokenizer, o);
  CHECK(s1 == streamed);
  CHECK(decode_utf8(s1, "sample").size() == 40);
  o.seed = 12;
  o.temperature = 2.0;
  CHECK(generate(*run.model, run.checkpoint.tokenizer, o) != s1);
  o.temperature = 0.0;  // greedy: the seed does not matter
  const std::string g1 = generate(*run.model, run.checkpoint.tokenizer, o);
  o.seed = 99;
  CHECK(generate(*run.model, run.checkpoint.tokenizer, o) == g1);
  o.prompt = "\xE4\xB8\x96";  // not in the vocabulary
  CHECK_THROWS_WITH(generate(*run.model, run.checkpoint.tokenizer, o),
                    Catch::StartsWith("--prompt: character"));
}

TEST_CASE("checkpoint: corrupt, truncated and foreign files are clear errors", "[train][checkpoint]") {
  const std::string dir = run_dir("corrupt");
  train(tfm_test::small_train_config(dir, {"train.max_steps=2"}), quiet());
  const std::string good = file_bytes(dir + "/last.ckpt");
  const std::string bad = dir + "/bad.ckpt";
  // The error reading these bytes gives, "" when they load: the whole checkpoint, or its state alone.
  auto error_of = [&](const std::string& bytes, bool state_alone = false) {
    write_bytes_train(bad, bytes);
    try {
      if (state_alone)
        load_checkpoint_state(bad);
      else
        load_checkpoint(bad);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  REQUIRE(error_of(good).empty());
  for (int tenth = 0; tenth < 10; ++tenth) {
    const std::string msg = error_of(good.substr(0, good.size() * tenth / 10));
    INFO(tenth);
    CHECK_THAT(msg, Catch::StartsWith(bad + ": "));
  }
  for (size_t pos : {size_t{40}, good.size() / 2, good.size() - 1}) {
    std::string flipped = good;
    flipped[pos] ^= 0x10;
    const std::string whole = error_of(flipped);  // leaves the flipped file at `bad`
    CHECK_THAT(whole, Catch::Contains("checksum"));
    CHECK_THROWS_WITH(verify_checkpoint(bad), whole);  // the check alone, without parsing: the same words
  }
  write_bytes_train(bad, good);
  CHECK_NOTHROW(verify_checkpoint(bad));
  std::string magic = good;
  magic[0] = 'X';
  CHECK_THAT(error_of(magic), Catch::Contains("wrong magic"));
  std::string future = good;
  future[8] = 9;
  CHECK_THAT(error_of(future), Catch::Contains("version 9") && Catch::Contains("newer"));
  std::string huge = good;
  std::memset(&huge[16], 0x7F, 8);  // a payload size far beyond the file: rejected before allocating
  CHECK_THAT(error_of(huge), Catch::Contains("truncated"));
  CHECK_THAT(error_of(""), Catch::Contains("not a tfm checkpoint"));
  // The state alone (a run list, a resume's look at best.ckpt) reads the header through the same check,
  // with the same words.
  for (const std::string& bytes :
       {magic, future, huge, std::string(), good.substr(0, 20), good.substr(0, 100)}) {
    INFO(bytes.size());
    const std::string whole = error_of(bytes);
    CHECK_FALSE(whole.empty());
    CHECK(error_of(bytes, true) == whole);
  }

  // A checkpoint whose values do not fit its model.
  Checkpoint ck = load_checkpoint(dir + "/last.ckpt");
  ck.model.pop_back();
  save_checkpoint(bad, ck);
  LanguageModel model(resolve_config(ck.config).model(ck.tokenizer.size()), 1);
  CHECK_THROWS_WITH(restore_model(model, ck, bad),
                    Catch::Contains("parameter values") && Catch::Contains("needs"));
  CHECK(tfm_test::temporaries_beside(bad).empty());
}

TEST_CASE("train: bf16 products follow the fp32 loss curve, resume is bit-identical in bf16",
          "[slow][train][bf16]") {
  const std::vector<std::string> sets = {"train.max_steps=40", "train.eval_interval=40"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), sets.begin(), sets.end());
    return extra;
  };
  const TrainResult fp32 = train(tfm_test::small_train_config(run_dir("bf16_ref"), sets), quiet());
  const std::string a = run_dir("bf16_a");
  const TrainResult bf16 = train(
      tfm_test::small_train_config(a, with({"train.precision=bf16", "train.gemm_backend=onednn"})), quiet());
  const TrainResult emulated =
      train(tfm_test::small_train_config(run_dir("bf16_e"),
                                         with({"train.precision=bf16", "train.gemm_backend=openblas"})),
            quiet());
  REQUIRE(fp32.losses.size() == 40);
  REQUIRE(bf16.losses.size() == 40);
  // Both learn (the first loss is ~4.0, the last ~3.6) and end within a few percent of each other; the
  // products did run in bf16 (the curves are not identical), and both backends' bf16 agree as closely.
  CHECK(bf16.losses.back() < fp32.losses.front() - 0.3);
  CHECK(std::fabs(bf16.losses.back() - fp32.losses.back()) < 0.05);
  CHECK(std::fabs(bf16.val_loss - fp32.val_loss) < 0.05);
  CHECK(std::fabs(emulated.losses.back() - bf16.losses.back()) < 0.05);
  CHECK(bf16.losses != fp32.losses);

  // An interrupted bf16 run resumes to the same bits (the weights' bf16 copy is rebuilt from the
  // checkpoint's float32 values).
  TrainOptions stop = quiet();
  stop.stop_at_step = 13;
  const std::string b = run_dir("bf16_b");
  const auto bf16_sets = with({"train.precision=bf16", "train.gemm_backend=onednn"});
  const TrainResult first = train(tfm_test::small_train_config(b, bf16_sets), stop);
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult second = train(tfm_test::small_train_config(b, bf16_sets), resume);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  CHECK(joined == bf16.losses);
  // Checkpoints stay float32 master weights either way.
  CHECK(load_checkpoint(b + "/last.ckpt").model == load_checkpoint(a + "/last.ckpt").model);
}

TEST_CASE(
    "train: train.target_loss stops at the first evaluation that reaches it, best.ckpt holds that model",
    "[train]") {
  // The same run without a target, to know where its evaluations are.
  const std::vector<std::string> sets = {"train.max_steps=120", "train.eval_interval=10",
                                         "train.checkpoint_interval=0"};
  const std::string full_dir = run_dir("target_full");
  const TrainResult full = train(tfm_test::small_train_config(full_dir, sets), quiet());
  REQUIRE_FALSE(full.target_reached);
  // The loss its evaluation at step 60 reached, as the target: reached at step 60 or before.
  double at_60 = 0.0;
  {
    std::ifstream in(full_dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line))
      if (const auto rec = nlohmann::json::parse(line); rec.at("step") == 60) at_60 = rec.at("val_loss");
  }
  REQUIRE(at_60 > 0.0);
  const std::string dir = run_dir("target");
  std::vector<std::string> with = sets;
  const double target = at_60 + 1e-9;
  with.push_back("train.target_loss=" + std::to_string(target));
  const TrainResult r = train(tfm_test::small_train_config(dir, with), quiet());
  REQUIRE(r.target_reached);
  CHECK(r.step <= 60);
  CHECK(r.step % 10 == 0);
  CHECK(r.val_loss <= target);
  CHECK(r.best_val_loss == r.val_loss);
  CHECK(r.seconds_to_target > 0.0);
  // The same steps as the run without a target up to there.
  for (size_t i = 0; i < r.losses.size(); ++i) CHECK(r.losses[i] == full.losses[i]);
  const Checkpoint best = load_checkpoint(dir + "/best.ckpt"), last = load_checkpoint(dir + "/last.ckpt");
  CHECK(best.state.step == r.step);
  CHECK(last.state.step == r.step);
  // metrics.jsonl's last record carries the time.
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line, last_line;
  while (std::getline(in, line)) last_line = line;
  CHECK(nlohmann::json::parse(last_line).at("seconds_to_target").get<double>() ==
        Approx(r.seconds_to_target));
  CHECK(last.state.stopped == "target_loss");
  // Resumed with the target standing: nothing to do, no step and no new record; a lower target trains on
  // from there, the same steps as the run without one.
  const auto records = [&] {
    std::ifstream m(dir + "/metrics.jsonl");
    return std::count(std::istreambuf_iterator<char>(m), std::istreambuf_iterator<char>(), '\n');
  };
  const auto before = records();
  const TrainResult again = resume(dir, {}, quiet());
  CHECK(again.step == r.step);
  CHECK(again.target_reached);
  CHECK(records() == before);
  CHECK(load_checkpoint(dir + "/last.ckpt").state.step == r.step);
  const TrainResult on = resume(dir, {"train.target_loss=0"}, quiet());
  CHECK(on.step == 120);
  CHECK(load_checkpoint(dir + "/last.ckpt").state.stopped.empty());
  REQUIRE(on.losses.size() == static_cast<size_t>(120 - r.step));
  for (size_t i = 0; i < on.losses.size(); ++i) CHECK(on.losses[i] == full.losses[r.step + i]);
}

TEST_CASE("train: train.max_seconds stops after the step that exhausts the budget, evaluated and saved",
          "[train]") {
  // A budget every step exceeds: the run stops after its first step, off the eval interval.
  const std::string dir = run_dir("max_seconds");
  const std::vector<std::string> sets = {"train.max_steps=50", "train.eval_interval=20",
                                         "train.checkpoint_interval=0", "train.max_seconds=1e-9"};
  const TrainResult r = train(tfm_test::small_train_config(dir, sets), quiet());
  CHECK(r.status == TrainResult::Status::Finished);
  CHECK(r.out_of_time);
  CHECK_FALSE(r.target_reached);
  CHECK(r.step == 1);
  CHECK(std::isfinite(r.val_loss));  // evaluated at the stop
  const Checkpoint last = load_checkpoint(dir + "/last.ckpt");
  CHECK(last.state.step == 1);
  CHECK(last.state.stopped == "max_seconds");
  // Resumed with the budget spent (the clock counts every process's training): nothing to do, as for a
  // reached target; no step, record or checkpoint, and the log says how to go on.
  const std::string ckpt_bytes = file_bytes(dir + "/last.ckpt"), metrics = file_bytes(dir + "/metrics.jsonl");
  const TrainResult again = resume(dir, {}, quiet());
  CHECK(again.step == 1);
  CHECK(again.out_of_time);
  CHECK(again.losses.empty());
  CHECK(file_bytes(dir + "/last.ckpt") == ckpt_bytes);
  CHECK(file_bytes(dir + "/metrics.jsonl") == metrics);
  CHECK_THAT(file_bytes(dir + "/train.log"),
             Catch::Contains("nothing to do: the run has used its time budget train.max_seconds = 1e-09") &&
                 Catch::Contains("--set train.max_seconds="));
  // A larger budget trains on: the clock goes on from the time already used, so the run stops again
  // once its whole training has taken the new budget; here it is ample, and the run ends at max_steps.
  const TrainResult raised = resume(dir, {"train.max_seconds=1e6"}, quiet());
  CHECK(raised.step == 50);
  CHECK_FALSE(raised.out_of_time);
  CHECK(load_checkpoint(dir + "/last.ckpt").state.stopped.empty());
  // And no budget at all (0) trains on too.
  const TrainResult rest = resume(dir, {"train.max_seconds=0", "train.max_steps=55"}, quiet());
  CHECK(rest.step == 55);
  CHECK_FALSE(rest.out_of_time);
}

TEST_CASE("train: a run train.max_seconds stopped has nothing to do on resume until the budget is raised",
          "[train]") {
  // The budget stops a run early enough for its closing evaluation, so its clock may end under the
  // budget: the stop itself says the budget is spent. A checkpoint made so: stopped by a budget of
  // 1000 s after 0.5 s.
  const std::string dir = run_dir("max_seconds_stopped");
  const std::vector<std::string> sets = {"train.max_steps=50", "train.eval_interval=20",
                                         "train.checkpoint_interval=0", "train.max_seconds=1e-9"};
  REQUIRE(train(tfm_test::small_train_config(dir, sets), quiet()).step == 1);
  Checkpoint ckpt = load_checkpoint(dir + "/last.ckpt");
  REQUIRE(ckpt.state.stopped == "max_seconds");
  ckpt.state.elapsed_s = 0.5;
  ckpt.config["train"]["max_seconds"] = 1000.0;
  save_checkpoint(dir + "/last.ckpt", ckpt);
  fs::remove(dir + "/config.json");  // written again by a resume
  const TrainResult again = resume(dir, {}, quiet());
  CHECK(again.step == 1);
  CHECK(again.out_of_time);
  CHECK(again.losses.empty());
  CHECK_THAT(file_bytes(dir + "/train.log"),
             Catch::Contains("nothing to do: the run has used its time budget train.max_seconds = 1000"));
  // The same budget again, or a lower one: still nothing. A larger one trains on.
  CHECK(resume(dir, {"train.max_seconds=999"}, quiet()).losses.empty());
  const TrainResult raised = resume(dir, {"train.max_seconds=1e6"}, quiet());
  CHECK(raised.step == 50);
  CHECK_FALSE(raised.out_of_time);
}

TEST_CASE("train: a resume's budget and time to target count the training loop's time, not set-up",
          "[train]") {
  // A run whose processes took 1000 s, of which 0.5 s in the training loop (the rest reading a large
  // corpus and building the model): a budget of 100 s has most of it left. The resume's clock goes on
  // from the loop's 0.5 s, never from the 1000.
  const std::string dir = run_dir("training_clock");
  REQUIRE(train(tfm_test::small_train_config(dir, {"train.max_steps=3", "train.eval_interval=3"}), quiet())
              .step == 3);
  Checkpoint ckpt = load_checkpoint(dir + "/last.ckpt");
  CHECK(ckpt.state.training_s <= ckpt.state.elapsed_s);  // the loop is inside its process's time
  ckpt.state.elapsed_s = 1000, ckpt.state.training_s = 0.5;
  save_checkpoint(dir + "/last.ckpt", ckpt);
  const TrainResult r = resume(dir, {"train.max_steps=6", "train.max_seconds=100"}, quiet());
  CHECK(r.step == 6);
  CHECK_FALSE(r.out_of_time);
  // The last record's loop clock, and the checkpoint's: from 0.5 s on, nowhere near the 1000 s of the
  // processes (the old clock went on from elapsed_s).
  double training_s = 0;
  std::istringstream records(file_bytes(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(records, line);) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    if (rec.contains("training_s")) training_s = rec["training_s"].get<double>();
  }
  const Checkpoint after = load_checkpoint(dir + "/last.ckpt");
  CHECK(after.state.elapsed_s >= 1000);
  for (const double clock : {training_s, after.state.training_s}) {
    CHECK(clock >= 0.5);
    CHECK(clock < after.state.elapsed_s - 900);
  }
}

// Ctrl-C while a first use tokenizes its corpus (minutes on a large one) ends the run there: no
// directory, step or checkpoint for it; on resume nothing in the run directory changes.
TEST_CASE(
    "train: a stop requested while the data is read ends the run before its first step, writing nothing",
    "[train]") {
  const std::string dir = run_dir("stop_loading");
  const std::string data = dir + "_data.txt", cache = dir + "_cache";
  fs::copy_file(tfm_test::tiny_shakespeare(), data);
  const std::vector<std::string> sets = {"data.path=" + data, "data.cache_dir=" + cache, "train.max_steps=3"};
  std::atomic<bool> stop{true};
  TrainOptions o = quiet();
  o.stop = &stop;
  const TrainResult r = train(tfm_test::small_train_config(dir, sets), o);
  CHECK(r.status == TrainResult::Status::Interrupted);
  CHECK(r.step == 0);
  CHECK(r.losses.empty());
  CHECK_THAT(r.message, Catch::Contains("stop requested while tokenizing it") &&
                            Catch::Contains("no step was trained and nothing was saved"));
  CHECK_FALSE(fs::exists(dir));
  for (const auto& e : fs::directory_iterator(cache)) {
    INFO(e.path());
    CHECK(e.path().extension() == ".lock");  // no cache, no temporary
  }

  // The data's cache built: the stop is seen once it is mapped, still before anything is written.
  stop = false;
  REQUIRE(train(tfm_test::small_train_config(dir, sets), o).step == 3);
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(dir)) before[e.path().string()] = file_bytes(e.path().string());
  stop = true;
  const TrainResult resumed = resume(dir, {"train.max_steps=6"}, o);
  CHECK(resumed.status == TrainResult::Status::Interrupted);
  CHECK(resumed.step == 3);
  CHECK_THAT(resumed.message, Catch::Contains("stop requested while the data was read"));
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(dir)) after[e.path().string()] = file_bytes(e.path().string());
  CHECK(after == before);
}

TEST_CASE("train: the ETA counts the steps and evaluations left and stops at train.max_seconds", "[train]") {
  TrainConfig t;
  t.eval_interval = 100;
  t.eval_steps = 30;
  t.grad_accum_steps = 1;
  t.max_seconds = 0;
  // 1000 steps at 0.3 s; at step 250, evaluations remain at 300..1000: 8 of them.
  RunSpeed s{250, 0.3, 0, 0, 75.0};
  // None timed yet: 30 forward batches at a third of a step each (0.1 s): 3 s an evaluation.
  CHECK(seconds_left(t, 1000, s) == Approx(750 * 0.3 + 8 * 3.0));
  t.grad_accum_steps = 3;  // a step is 3 micro-batches: an evaluation batch is a third of that again
  CHECK(seconds_left(t, 1000, s) == Approx(750 * 0.3 + 8 * 1.0));
  // Two timed (5 s together): their mean, whatever the estimate said.
  s.eval_seconds = 5, s.evals = 2;
  CHECK(seconds_left(t, 1000, s) == Approx(750 * 0.3 + 8 * 2.5));
  // The last step evaluates too when it is no multiple of the interval.
  CHECK(seconds_left(t, 1050, s) == Approx(800 * 0.3 + 9 * 2.5));
  // eval_steps 0 (the whole split) is not estimated before it is timed.
  t.eval_steps = 0, s.evals = 0;
  CHECK(seconds_left(t, 1000, s) == Approx(750 * 0.3));
  // ... unless the trainer says how many batches the whole split takes: 60 at a third of a step each.
  t.grad_accum_steps = 1, s.eval_batches = 60;
  CHECK(evaluation_seconds(t, s) == Approx(6.0));
  CHECK(seconds_left(t, 1000, s) == Approx(750 * 0.3 + 8 * 6.0));
  // The budget caps it; a spent budget leaves nothing.
  t.max_seconds = 120;
  CHECK(seconds_left(t, 1000, s) == Approx(45.0));
  s.training_seconds = 130;
  CHECK(seconds_left(t, 1000, s) == 0.0);
}

TEST_CASE("train: train.max_seconds stops while one more step and the closing evaluation fit in it",
          "[train]") {
  // configs/shakespeare_char.json with train.max_seconds 2 (the run that overshot to 4 s): 0.1 s steps and
  // 20 evaluation batches at a third of a step each, about 0.67 s before one is timed.
  TrainConfig t;
  t.eval_interval = 250, t.eval_steps = 20, t.grad_accum_steps = 1, t.max_seconds = 2;
  RunSpeed s{10, 0.1, 0, 0, 1.0};
  CHECK(evaluation_seconds(t, s) == Approx(0.2 / 0.3));
  CHECK_FALSE(time_budget_spent(t, 2000, s));  // 1.0 + 0.1 + 0.67 <= 2: step on
  s.step = 13, s.training_seconds = 1.3;
  CHECK(time_budget_spent(t, 2000, s));  // 1.3 + 0.1 + 0.67 > 2: evaluate now, done by ~1.97 s
  // The ETA there is what the budget leaves, the closing evaluation within it.
  CHECK(seconds_left(t, 2000, s) == Approx(0.7));
  // A timed evaluation replaces the estimate: 1.5 s each leaves less room.
  s.evals = 1, s.eval_seconds = 1.5, s.training_seconds = 0.3;
  CHECK_FALSE(time_budget_spent(t, 2000, s));  // 0.3 + 0.1 + 1.5 <= 2
  s.training_seconds = 0.5;
  CHECK(time_budget_spent(t, 2000, s));
  // No budget, or the last step taken (its evaluation comes anyway): nothing to stop.
  CHECK_FALSE(time_budget_spent(t, 13, s));
  t.max_seconds = 0;
  CHECK_FALSE(time_budget_spent(t, 2000, s));
  // Longer than the budget: the run still takes its first step and evaluation (the caller stops there).
  t.max_seconds = 1e-9, s = RunSpeed{1, 0.1, 0, 0, 0.1};
  CHECK(time_budget_spent(t, 2000, s));
}

TEST_CASE("train: a resume says when the data changed since the checkpoint, and only then", "[train]") {
  const tfm_test::TempDir tmp("data_changed");
  const std::string corpus = tmp.file("corpus.txt"), dir = tmp.file("run");
  write_bytes_train(corpus, file_bytes(tfm_test::tiny_shakespeare()));
  const std::vector<std::string> sets = {"data.path=" + corpus};
  TrainOptions to_5 = quiet();
  to_5.stop_at_step = 5;
  REQUIRE(train(tfm_test::small_train_config(dir, sets), to_5).status == TrainResult::Status::Interrupted);
  const std::string saved = load_checkpoint_state(dir + "/last.ckpt").data_hash;
  CHECK(saved.size() == 16);
  const auto resumed_log = [&] {
    const std::string log = file_bytes(dir + "/train.log");
    return log.substr(log.rfind("tfm train: resuming"));
  };
  TrainOptions to_10 = quiet();
  to_10.stop_at_step = 10;
  REQUIRE(resume(dir, {}, to_10).status == TrainResult::Status::Interrupted);
  CHECK_THAT(resumed_log(), !Catch::Contains("the data changed"));
  CHECK(load_checkpoint_state(dir + "/last.ckpt").data_hash == saved);
  // The user appends to the corpus: its cache is rebuilt, and the run's log says what that means.
  write_bytes_train(corpus, file_bytes(corpus) + "More text appended by the user later.\n");
  REQUIRE(resume(dir, {}, quiet()).status == TrainResult::Status::Finished);
  const std::string log = resumed_log();
  CHECK_THAT(log, Catch::Contains("the data changed since last.ckpt was saved at step 10 (data hash " +
                                  saved + " then, ") &&
                      Catch::Contains("trains on other batches than an uninterrupted one would"));
  const std::string now = load_checkpoint_state(dir + "/last.ckpt").data_hash;
  CHECK(now.size() == 16);
  CHECK(now != saved);
}

TEST_CASE("train: a resumed run logs the same means as an uninterrupted one, the cut interval included",
          "[train]") {
  // Log lines every 5 steps, checkpoints every 3: killed during step 4 (the exception stands for the
  // SIGKILL), the run resumes from step 3, whose unlogged steps are its first three.
  const std::vector<std::string> sets = {"train.log_interval=5", "train.checkpoint_interval=3",
                                         "train.max_steps=12"};
  const std::string whole = run_dir("log_means_whole"), cut = run_dir("log_means_cut");
  train(tfm_test::small_train_config(whole, sets), quiet());
  TrainOptions crash = quiet();
  crash.on_step = [](int64_t step, const Model&) {
    if (step == 4) throw std::runtime_error("killed");
  };
  CHECK_THROWS_WITH(train(tfm_test::small_train_config(cut, sets), crash), "killed");
  CHECK(load_checkpoint_state(cut + "/last.ckpt").unlogged.steps == 3);
  REQUIRE(resume(cut, {}, quiet()).status == TrainResult::Status::Finished);
  // Each logged step's record, by step.
  const auto records = [](const std::string& dir) {
    std::map<int64_t, nlohmann::json> out;
    std::istringstream lines(file_bytes(dir + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("train_loss_avg")) out[j.at("step").get<int64_t>()] = j;
    }
    return out;
  };
  const auto a = records(whole), b = records(cut);
  REQUIRE(a.size() == 3);  // steps 5, 10 and 12
  REQUIRE(b.size() == a.size());
  for (const auto& [step, j] : a) {
    INFO("step " << step);
    REQUIRE(b.count(step) == 1);
    for (const char* field : {"train_loss", "train_loss_avg", "grad_norm", "lr"})
      CHECK(b.at(step).at(field) == j.at(field));
  }
  // A stop at a step between two log lines saves what it has not logged, the same way.
  TrainOptions stop = quiet();
  stop.stop_at_step = 7;
  const std::string stopped = run_dir("log_means_stop");
  REQUIRE(train(tfm_test::small_train_config(stopped, sets), stop).status ==
          TrainResult::Status::Interrupted);
  CHECK(load_checkpoint_state(stopped + "/last.ckpt").unlogged.steps == 2);
  REQUIRE(resume(stopped, {}, quiet()).status == TrainResult::Status::Finished);
  const auto c = records(stopped);
  REQUIRE(c.size() == a.size());
  for (const auto& [step, j] : a)
    for (const char* field : {"train_loss_avg", "grad_norm"}) CHECK(c.at(step).at(field) == j.at(field));
  // best.ckpt's step is logged right after it is saved: it keeps no unlogged steps.
  CHECK(load_checkpoint_state(whole + "/best.ckpt").unlogged.steps == 0);
}

TEST_CASE("run_dir: each file of a data.path list is an input no output may overwrite", "[train]") {
  const tfm_test::TempDir tmp("list_inputs");
  const std::string a = tmp.file("a.txt"), b = tmp.file("b.txt");
  write_bytes_train(a, "first");
  write_bytes_train(b, "second");
  const Config c = resolve_config(nlohmann::json::object(), {"data.path=[\"" + a + "\",\"" + b + "\"]"});
  const std::vector<CommandInput> inputs = run_inputs(tmp.file("last.ckpt"), c);
  CHECK_THROWS_WITH(check_output_path("--out", b, inputs),
                    Catch::Contains("is the same file as data.path[1] " + b) &&
                        Catch::Contains("which this command reads"));
  CHECK_NOTHROW(check_output_path("--out", tmp.file("c.txt"), inputs));
  // The list's JSON text in a string (how runs recorded it before): the same files.
  const Config text = resolve_config(
      nlohmann::json::object(), {"data.path=" + nlohmann::json(nlohmann::json::array({a, b}).dump()).dump()});
  REQUIRE(text.at("data.path").is_string());
  CHECK_THROWS_WITH(check_output_path("--out", b, run_inputs(tmp.file("last.ckpt"), text)),
                    Catch::Contains("is the same file as data.path[1] " + b));
  CHECK(tfm_test::read_file(b) == "second");
}
