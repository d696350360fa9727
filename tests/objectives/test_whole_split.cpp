// train.eval_steps 0: the whole validation split once, every token scored exactly once, the same value at
// every call (objectives/text_data.h, evaluate_whole; Objective::evaluate with batches 0).
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cli_run.h"
#include "objective_data.h"
#include "tfm/config/config.h"
#include "tfm/engine/ops.h"
#include "tfm/objectives/objective.h"
#include "tfm/objectives/text_data.h"

using namespace tfm;

namespace {

Config whole_split_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {
      "data.path=" + std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt",
      "model.d_model=16",
      "model.n_layers=2",
      "model.n_heads=2",
      "model.max_seq_len=8",
      "model.dropout=0.2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets);
}

// The sum of -log p(target) over the positions of one forward of `ids` (1, len), computed from the logits.
double whole_split_window_loss(LanguageModel& model, const std::vector<int32_t>& ids,
                               const std::vector<int32_t>& targets) {
  NoGradGuard no_grad;
  const auto len = static_cast<int64_t>(ids.size());
  const std::vector<float> logits = model.forward(ids, 1, len).to_vector();  // (1, len, V)
  const int64_t V = model.config().vocab_size;
  double sum = 0.0;
  for (int64_t p = 0; p < len; ++p) {
    const float* row = logits.data() + p * V;
    double top = row[0], z = 0.0;
    for (int64_t v = 1; v < V; ++v) top = std::max(top, static_cast<double>(row[v]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - top);
    sum += top + std::log(z) - row[targets[static_cast<size_t>(p)]];
  }
  return sum;
}

}  // namespace

TEST_CASE("whole split: causal_lm scores every token after the first exactly once, the tail included",
          "[objective][eval]") {
  const Config c = whole_split_config();
  const int64_t V = 13, T = 5, B = 2;
  LanguageModel model(c.model(V), 3);
  model.set_training(true);  // evaluation switches to eval mode (no dropout) and back
  // n - 1 = 18 targets: three full windows (a batch of 2, then 1) and a tail of 3.
  const int64_t n = 19;
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % V);
  // By hand: target j (1 <= j < n) is predicted once, in the window of inputs [kT, kT + len) holding j - 1.
  model.set_training(false);
  double sum = 0.0;
  int64_t counted = 0;
  for (int64_t start = 0; start < n - 1; start += T) {
    const int64_t len = std::min(T, n - 1 - start);
    const std::vector<int32_t> x(tokens.begin() + start, tokens.begin() + start + len);
    const std::vector<int32_t> y(tokens.begin() + start + 1, tokens.begin() + start + len + 1);
    sum += whole_split_window_loss(model, x, y);
    counted += len;
  }
  REQUIRE(counted == n - 1);
  model.set_training(true);
  const double expected = sum / static_cast<double>(n - 1);
  const double first = *evaluate_whole(model, tokens, B, T, nullptr);
  CHECK(first == Approx(expected).epsilon(1e-5));
  CHECK(model.training());
  // The same bits at every call, and whatever B groups the windows (a tail-less split too).
  CHECK(*evaluate_whole(model, tokens, B, T, nullptr) == first);
  CHECK(*evaluate_whole(model, tokens, 1, T, nullptr) == Approx(first).epsilon(1e-6));
  CHECK(*evaluate_whole(model, tokens, 4, T, nullptr) == Approx(first).epsilon(1e-6));
  // The last token counts: changing it changes the loss.
  std::vector<int32_t> other = tokens;
  other.back() = (other.back() + 1) % static_cast<int32_t>(V);
  CHECK(*evaluate_whole(model, other, B, T, nullptr) != first);
  // A stop request abandons it.
  const std::atomic<bool> stop{true};
  CHECK(!evaluate_whole(model, tokens, B, T, &stop).has_value());
}

TEST_CASE("whole split: evaluate(split, 0) is the whole split for every objective, the same at every call",
          "[objective][eval]") {
  SECTION("causal_lm") {
    const Config c = whole_split_config({"train.batch_size=3"});
    const std::unique_ptr<Objective> objective = make_objective(c, nullptr, {});
    const Metrics a = objective->evaluate("val", 0, 1), b = objective->evaluate("val", 0, 99);
    CHECK(a.get("loss") == b.get("loss"));  // no draws: the seed does not matter
    CHECK(objective->evaluation_batches("val", 7) == 7);
    CHECK(objective->evaluation_batches("val", 0) > 1);
    CHECK(std::isfinite(a.get("loss")));
    CHECK(a.get("loss") != objective->evaluate("val", 2, 1).get("loss"));
  }
  SECTION("masked_lm") {
    const Config c =
        whole_split_config({"train.objective=masked_lm", "model.causal=false", "train.batch_size=3"});
    const std::unique_ptr<Objective> objective = make_objective(c, nullptr, {});
    const Metrics a = objective->evaluate("val", 0, 5), b = objective->evaluate("val", 0, 5);
    CHECK(a.get("loss") == b.get("loss"));
    CHECK(a.get("accuracy") == b.get("accuracy"));
    CHECK(std::isfinite(a.get("loss")));
  }
  SECTION("seq2seq") {
    const std::string dir = tfm_test::scratch_path("whole_split", "s2s");
    const Config c = tfm_test::s2s_config(dir, tfm_test::write_reversal_pairs(dir + "_data", 200));
    const std::unique_ptr<Objective> objective = make_objective(c, nullptr, {});
    const int64_t all = objective->evaluation_batches("val", 0);
    CHECK(all == objective->evaluation_batches("val", 1000000));
    CHECK(objective->evaluate("val", 0, 1).get("loss") == objective->evaluate("val", all, 1).get("loss"));
  }
}
