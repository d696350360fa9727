// The training options that are off by default, through the training loop: the weights' EMA
// (train.ema_decay) with Muon's momentum schedule and cautious weight decay, resumed bit for bit;
// train.precision "auto" resolved once and kept; train.eval_steps 0 (the whole split) as the loop's
// evaluation.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/engine/gemm.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"
#include "train_options.h"

using namespace tfm;

namespace {

Config tricks_config_train_tricks(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"train.max_steps=16",
                                   "train.eval_interval=4",
                                   "train.log_interval=4",
                                   "train.checkpoint_interval=4",
                                   "train.lr_schedule.warmup_steps=3",
                                   "model.dropout=0.1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return tfm_test::small_train_config(dir, sets);
}

nlohmann::json tricks_run_config(const std::string& dir) {
  std::ifstream in(dir + "/" + kRunConfigFile);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE(
    "train tricks: the EMA, Muon's momentum schedule and cautious decay resume bit for bit, and "
    "evaluations read the EMA",
    "[train][muon][ema]") {
  const std::vector<std::string> sets = {"train.optimizer.name=muon",
                                         "train.optimizer.muon_weight_decay=0.1",
                                         "train.optimizer.muon_cautious_weight_decay=true",
                                         "train.optimizer.muon_momentum_warmup_steps=5",
                                         "train.optimizer.muon_momentum_cooldown_steps=4",
                                         "train.ema_decay=0.9"};
  const std::string a = tfm_test::scratch_path("train_tricks", "ema_a"),
                    b = tfm_test::scratch_path("train_tricks", "ema_b");
  const TrainResult full = train(tricks_config_train_tricks(a, sets), tfm_test::quiet());
  REQUIRE(full.losses.size() == 16);
  TrainOptions stop = tfm_test::quiet();
  stop.stop_at_step = 7;
  const TrainResult first = train(tricks_config_train_tricks(b, sets), stop);
  REQUIRE(first.status == TrainResult::Status::Interrupted);
  const Checkpoint mid = load_checkpoint(b + "/last.ckpt");
  REQUIRE(mid.optimizer.size() == 4);  // AdamW's m, v, Muon's momentum, the EMA
  CHECK(mid.optimizer[3].size() == mid.model.size());
  CHECK(mid.optimizer[3] != mid.model);
  CHECK_FALSE(mid.state.ema_in_model);
  TrainOptions resume = tfm_test::quiet();
  resume.resume = true;
  const TrainResult second = train(tricks_config_train_tricks(b, sets), resume);
  tfm_test::check_resume_is_exact(first, second, full, a, b);
  const Checkpoint ca = load_checkpoint(a + "/last.ckpt");
  CHECK(full.val_loss == second.val_loss);

  // The last evaluation read the EMA: the final EMA in the model gives its loss, the raw weights do not.
  LoadedRun run = load_run(a, "last", true);
  Model& model = run.objective->model();
  const Config c = tricks_config_train_tricks(a, sets);
  const double raw_loss = run.objective->evaluate("val", 2, eval_seed(c)).get("loss");
  std::copy(ca.optimizer[3].begin(), ca.optimizer[3].end(), model.flat_values().data());
  CHECK(run.objective->evaluate("val", 2, eval_seed(c)).get("loss") == full.val_loss);
  CHECK(raw_loss != full.val_loss);

  // best.ckpt's model is the EMA, and its raw weights travel in the EMA's buffer (a resume from it swaps
  // them back): saved at the last step (the loss still falls at 16 steps), the two are last.ckpt's, swapped.
  const Checkpoint best = load_checkpoint(a + "/best.ckpt");
  CHECK(best.state.ema_in_model);
  REQUIRE(best.state.step == 16);
  CHECK(best.model == ca.optimizer[3]);
  CHECK(best.optimizer[3] == ca.model);
}

TEST_CASE("train tricks: adding train.ema_decay to a run on resume is refused naming the key",
          "[train][ema]") {
  const std::string dir = tfm_test::scratch_path("train_tricks", "ema_refused");
  TrainOptions stop = tfm_test::quiet();
  stop.stop_at_step = 2;
  REQUIRE(train(tricks_config_train_tricks(dir), stop).status == TrainResult::Status::Interrupted);
  TrainOptions resume = tfm_test::quiet();
  resume.resume = true;
  CHECK_THROWS_WITH(train(tricks_config_train_tricks(dir, {"train.ema_decay=0.9"}), resume),
                    Catch::StartsWith("train.ema_decay"));
}

TEST_CASE("train tricks: precision auto resolves at start-up, the run records it, a resume keeps it",
          "[train][precision]") {
  const std::string dir = tfm_test::scratch_path("train_tricks", "precision_auto");
  TrainOptions stop = tfm_test::quiet();
  stop.stop_at_step = 2;
  REQUIRE(
      train(tricks_config_train_tricks(dir, {"train.precision=auto", "train.max_steps=4"}), stop).status ==
      TrainResult::Status::Interrupted);
  const GemmBackend backend = resolve_gemm_backend(GemmBackendChoice::Auto);
  const std::string here = name_of(resolve_precision(PrecisionChoice::Auto, backend).precision);
  CHECK(tricks_run_config(dir)["train"]["precision"] == here);
  CHECK(checkpoint_config(load_checkpoint(dir + "/last.ckpt"), dir).string("train.precision") == here);

  // A run trained in fp32 and continued with a config saying "auto" keeps fp32, whatever this CPU has.
  const std::string fixed = tfm_test::scratch_path("train_tricks", "precision_kept");
  REQUIRE(
      train(tricks_config_train_tricks(fixed, {"train.precision=fp32", "train.max_steps=4"}), stop).status ==
      TrainResult::Status::Interrupted);
  TrainOptions resume = tfm_test::quiet();
  resume.resume = true;
  REQUIRE(train(tricks_config_train_tricks(fixed, {"train.precision=auto", "train.max_steps=4"}), resume)
              .status == TrainResult::Status::Finished);
  CHECK(checkpoint_config(load_checkpoint(fixed + "/last.ckpt"), fixed).string("train.precision") == "fp32");
}

TEST_CASE("train tricks: train.eval_steps 0 evaluates the whole split, the same value as evaluate(val, 0)",
          "[train][eval]") {
  const std::string dir = tfm_test::scratch_path("train_tricks", "whole_split");
  const Config c =
      tricks_config_train_tricks(dir, {"train.eval_steps=0", "train.max_steps=4", "train.eval_interval=4"});
  const TrainResult r = train(c, tfm_test::quiet());
  REQUIRE(r.status == TrainResult::Status::Finished);
  LoadedRun run = load_run(dir, "last", true);
  CHECK(run.objective->evaluate("val", 0, 12345).get("loss") == r.val_loss);
}
