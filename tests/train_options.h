// Training options and configs shared by the tests that call tfm::train() directly.
#pragma once
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/trainer.h"

namespace tfm_test {

// Nothing on the console (DIR/train.log is still written).
inline tfm::TrainOptions quiet() {
  tfm::TrainOptions o;
  o.console = false;
  return o;
}

// tests/data/tiny_shakespeare.txt.
inline std::string tiny_shakespeare() {
  return std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt";
}

// A small, fast config writing to `dir`; `extra` are --set style overrides (a later one wins).
inline tfm::Config small_train_config(const std::string& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"data.path=" + tiny_shakespeare(),
                                   "output.dir=" + dir,
                                   "model.d_model=32",
                                   "model.n_layers=2",
                                   "model.n_heads=4",
                                   "model.max_seq_len=16",
                                   "train.batch_size=4",
                                   "train.max_steps=20",
                                   "train.eval_interval=10",
                                   "train.eval_steps=2",
                                   "train.log_interval=1",
                                   "train.checkpoint_interval=5",
                                   "train.threads=1",
                                   "train.lr_schedule.warmup_steps=5",
                                   "train.optimizer.lr=3e-3"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return tfm::resolve_config(nlohmann::json::object(), sets);
}

// A run stopped at a checkpoint (`first`, then `second` resumed from it in `resumed_dir`) against the
// same run made whole (`whole` in `whole_dir`): the same losses, weights and optimizer state, bit for bit.
inline void check_resume_is_exact(const tfm::TrainResult& first, const tfm::TrainResult& second,
                                  const tfm::TrainResult& whole, const std::string& whole_dir,
                                  const std::string& resumed_dir) {
  REQUIRE(second.status == tfm::TrainResult::Status::Finished);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  CHECK(joined == whole.losses);  // exactly
  const tfm::Checkpoint ca = tfm::load_checkpoint(whole_dir + "/last.ckpt");
  const tfm::Checkpoint cb = tfm::load_checkpoint(resumed_dir + "/last.ckpt");
  CHECK(ca.model == cb.model);
  CHECK(ca.optimizer == cb.optimizer);
}

}  // namespace tfm_test
