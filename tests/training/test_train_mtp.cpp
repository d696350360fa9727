// Multi-token prediction (model.mtp_heads, train.mtp_weight) through the training loop: the logged train
// loss and the val loss stay the next-token loss, the extra heads' loss is logged apart with its decaying
// weight, and a run stopped at a checkpoint resumes bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "objective_data.h"
#include "tfm/config/config.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/trainer.h"
#include "train_options.h"

using namespace tfm;

namespace {

Config mtp_train_config(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"train.max_steps=6", "train.eval_interval=3",
                                   "train.checkpoint_interval=3"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return tfm_test::small_train_config(dir, sets);
}

}  // namespace

TEST_CASE("train mtp: the train and val losses are the next-token loss, the extra heads' loss logged apart",
          "[train][mtp]") {
  const std::string plain_dir = tfm_test::scratch_path("train_mtp", "plain"),
                    off_dir = tfm_test::scratch_path("train_mtp", "off"),
                    on_dir = tfm_test::scratch_path("train_mtp", "on");
  const TrainResult plain = train(mtp_train_config(plain_dir), tfm_test::quiet());
  // One head at weight 0: its loss is computed and logged but never differentiated, so the trunk trains
  // exactly as without it (the heads' parameters are drawn after the others).
  const TrainResult off =
      train(mtp_train_config(off_dir, {"model.mtp_heads=1", "train.mtp_weight=0"}), tfm_test::quiet());
  const TrainResult on = train(mtp_train_config(on_dir, {"model.mtp_heads=1"}), tfm_test::quiet());
  REQUIRE(plain.losses.size() == 6);
  REQUIRE(on.losses.size() == 6);
  CHECK(off.losses == plain.losses);  // bit for bit: the logged loss is the next-token loss
  CHECK(off.val_loss == plain.val_loss);
  CHECK(on.losses[0] == plain.losses[0]);          // the first step: the same trunk, the same batch
  CHECK(on.losses.back() != plain.losses.back());  // the extra head's gradient trained the trunk
  CHECK(on.val_loss != plain.val_loss);

  const std::vector<nlohmann::json> records = tfm_test::read_metrics(on_dir);
  REQUIRE(records.size() == 6);  // train.log_interval 1
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(records[i].at("train_loss").get<double>() == on.losses[i]);
    const double mtp_loss = records[i].at("train_mtp_loss").get<double>();
    CHECK(std::isfinite(mtp_loss));
    CHECK(mtp_loss > 1.0);  // ~ln(65) at the start: a real loss, not the weighted term
    // The weight of the record's step (steps 1..6 use mtp_weight_at(step - 1)).
    CHECK(records[i].at("mtp_weight").get<double>() == Approx(0.3 * (1.0 - static_cast<double>(i) / 6.0)));
  }
  CHECK(records.back().contains("val_loss"));
  CHECK_FALSE(tfm_test::read_metrics(plain_dir).front().contains("train_mtp_loss"));
  std::ifstream log(on_dir + "/train.log");
  std::stringstream text;
  text << log.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("| mtp loss ") && Catch::Contains("(weight 0.300)"));
}

TEST_CASE("train mtp: a run with two extra heads resumes bit for bit", "[train][mtp]") {
  const std::vector<std::string> sets = {"model.mtp_heads=2", "train.mtp_weight=0.5", "model.dropout=0.1",
                                         "train.max_steps=10", "train.checkpoint_interval=4"};
  const std::string a = tfm_test::scratch_path("train_mtp", "whole"),
                    b = tfm_test::scratch_path("train_mtp", "resumed");
  const TrainResult whole = train(mtp_train_config(a, sets), tfm_test::quiet());
  REQUIRE(whole.losses.size() == 10);
  TrainOptions stop = tfm_test::quiet();
  stop.stop_at_step = 4;
  const TrainResult first = train(mtp_train_config(b, sets), stop);
  REQUIRE(first.status == TrainResult::Status::Interrupted);
  CHECK(load_checkpoint(b + "/last.ckpt").model.size() == load_checkpoint(a + "/last.ckpt").model.size());
  TrainOptions resume = tfm_test::quiet();
  resume.resume = true;
  const TrainResult second = train(mtp_train_config(b, sets), resume);
  tfm_test::check_resume_is_exact(first, second, whole, a, b);
  CHECK(second.val_loss == whole.val_loss);
  // metrics.jsonl continues with the same figures.
  const std::vector<nlohmann::json> ra = tfm_test::read_metrics(a), rb = tfm_test::read_metrics(b);
  REQUIRE(ra.size() == rb.size());
  for (size_t i = 0; i < ra.size(); ++i) CHECK(ra[i].at("train_mtp_loss") == rb[i].at("train_mtp_loss"));
}
