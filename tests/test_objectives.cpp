// The training objectives: masked_lm's masking rule, each objective through the one training loop,
// and the inference commands that go with them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config.h"
#include "tfm/error.h"
#include "tfm/objective.h"
#include "tfm/trainer.h"

using namespace tfm;

namespace {

std::string tiny_data() { return std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt"; }

Config mlm_config(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"data.path=" + tiny_data(), "output.dir=" + dir, "train.objective=masked_lm",
                                   "model.causal=false", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                                   "model.max_seq_len=16", "train.batch_size=8", "train.max_steps=80",
                                   "train.eval_interval=40", "train.eval_steps=4", "train.log_interval=10",
                                   "train.checkpoint_interval=40", "train.threads=1",
                                   "train.lr_schedule.warmup_steps=5", "train.optimizer.lr=3e-3"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets);
}

TrainOptions quiet() {
  TrainOptions o;
  o.console = false;
  return o;
}

std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("objectives: masked_lm masks as BERT does (15% chosen; 80% [MASK], 10% random, 10% kept)", "[objective]") {
  const int64_t n = 200000, ordinary = 50;
  const int32_t mask_id = 50;
  std::vector<int32_t> original(n), x, y;
  for (int64_t i = 0; i < n; ++i) original[i] = static_cast<int32_t>(i % ordinary);
  x = original;
  Rng rng(3);
  const int64_t chosen = mask_tokens(x, y, rng, 0.15, mask_id, ordinary);
  int64_t masked = 0, kept = 0, replaced = 0, counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] == kNotMasked) {
      CHECK(x[i] == original[i]);  // an unchosen position is never touched
      continue;
    }
    ++counted;
    CHECK(y[i] == original[i]);  // the target is the original token
    if (x[i] == mask_id)
      ++masked;
    else if (x[i] == original[i])
      ++kept;  // (a random draw of the same token counts here: 1/50 of 10%)
    else {
      ++replaced;
      CHECK((x[i] >= 0 && x[i] < ordinary));
    }
  }
  CHECK(counted == chosen);
  const double c = static_cast<double>(chosen);
  CHECK(c / n == Approx(0.15).margin(0.005));
  CHECK(masked / c == Approx(0.8).margin(0.01));
  CHECK(replaced / c == Approx(0.1 * 49.0 / 50.0).margin(0.01));
  CHECK(kept / c == Approx(0.1 + 0.1 / 50.0).margin(0.01));

  // A window where nothing was chosen still gets one masked position, so the loss is defined.
  std::vector<int32_t> few = {1, 2, 3}, fy;
  Rng r2(1);
  CHECK(mask_tokens(few, fy, r2, 1e-9, mask_id, ordinary) == 1);
  CHECK(std::count(few.begin(), few.end(), mask_id) == 1);
}

TEST_CASE("objectives: masked_lm trains through the loop, reports accuracy and fills masks", "[objective][train]") {
  const std::string dir = tfm_test::scratch_path("objectives", "mlm");
  const TrainResult r = train(mlm_config(dir), quiet());
  REQUIRE(r.status == TrainResult::Status::Finished);
  // The masked tokens are learned: the last steps' loss well below the first steps' (each batch's
  // loss reads only its ~19 chosen positions, so compare means of 10 steps).
  const auto mean_of = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / 10.0; };
  INFO("first 10 steps " << mean_of(r.losses.begin(), r.losses.begin() + 10) << ", last 10 "
                         << mean_of(r.losses.end() - 10, r.losses.end()));
  CHECK(mean_of(r.losses.end() - 10, r.losses.end()) < mean_of(r.losses.begin(), r.losses.begin() + 10) - 0.5);
  const auto metrics = read_metrics(dir);
  bool saw_accuracy = false;
  for (const auto& m : metrics)
    if (m.contains("val_accuracy")) {
      saw_accuracy = true;
      INFO("val_accuracy " << m.at("val_accuracy"));
      CHECK(m.at("val_accuracy").get<double>() > 0.1);  // well above 1/V (V = 57)
      CHECK(m.contains("val_loss"));
    }
  CHECK(saw_accuracy);

  LoadedRun run = load_run(dir, "last");
  REQUIRE(run.objective->name() == "masked_lm");
  CHECK(run.model->config().vocab_size == run.objective->tokenizer().size() + 1);  // + [MASK]
  const FillMaskResult f = fill_mask(*run.objective, "the [MASK]ing [MASK]f", 3);
  REQUIRE(f.masks.size() == 2);
  for (const auto& m : f.masks) {
    REQUIRE(m.candidates.size() == 3);
    CHECK(m.candidates[0].second >= m.candidates[1].second);
    CHECK(m.candidates[1].second >= m.candidates[2].second);
    for (const auto& [token, p] : m.candidates) CHECK(token != kMaskToken);
  }
  CHECK(f.tokens[static_cast<size_t>(f.masks[0].position)] == run.objective->tokenizer().size());
  CHECK_THROWS_WITH(fill_mask(*run.objective, "no mask here", 3), Catch::Contains("[MASK]"));
  CHECK_THROWS_WITH(fill_mask(*run.objective, std::string(40, 'a') + "[MASK]", 3),
                    Catch::Contains("model.max_seq_len = 16"));

  // Evaluation is deterministic (the same masks each time) and reports the same metrics.
  LoadedRun with_data = load_run(dir, "last", true);
  const Metrics a = with_data.objective->evaluate("val", 3, 7), b = with_data.objective->evaluate("val", 3, 7);
  CHECK(a.get("loss") == b.get("loss"));
  CHECK(a.has("accuracy"));
}

TEST_CASE("objectives: masked_lm resumes bit-identically", "[objective][train]") {
  const std::string whole = tfm_test::scratch_path("objectives", "mlm_whole");
  const std::string split = tfm_test::scratch_path("objectives", "mlm_split");
  const std::vector<std::string> short_run = {"train.max_steps=30", "train.checkpoint_interval=10",
                                              "model.dropout=0.1"};
  const TrainResult a = train(mlm_config(whole, short_run), quiet());
  TrainOptions stop = quiet();
  stop.stop_at_step = 13;
  const TrainResult b1 = train(mlm_config(split, short_run), stop);
  REQUIRE(b1.status == TrainResult::Status::Interrupted);
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult b2 = train(mlm_config(split, short_run), resume);
  REQUIRE(b2.status == TrainResult::Status::Finished);
  std::vector<double> joined = b1.losses;
  joined.insert(joined.end(), b2.losses.begin(), b2.losses.end());
  CHECK(joined == a.losses);
}

TEST_CASE("objectives: the CLI names the objective a run needs", "[objective][cli]") {
  const std::string dir = tfm_test::scratch_path("objectives", "mlm_cli");
  auto r = tfm_test::run_tfm("train --config configs/tiny.json --set train.objective=masked_lm --out " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("model.causal") && Catch::Contains("masked_lm"));
  r = tfm_test::run_tfm("train --config configs/tiny.json --set train.objective=masked_lm --set model.causal=false "
                        "--set train.max_steps=20 --out " + dir);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tfm fill-mask --run"));
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"ROMEO: [MASK]\" --top-k 4 --json");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(j.at("masks").size() == 1);
  CHECK(j.at("masks")[0].at("candidates").size() == 4);
  r = tfm_test::run_tfm("sample --run " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("fill-mask"));
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"no mask\"");
  CHECK(r.status == 2);
  r = tfm_test::run_tfm("fill-mask --run " + dir + " --text \"[MASK]\" --top-k 0");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--top-k"));
}
