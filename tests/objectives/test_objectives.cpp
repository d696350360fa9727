// The training objectives: masked_lm's masking rule, each objective through the one training loop,
// and the inference commands that go with them.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cli_run.h"
#include "objective_data.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/objectives/inference.h"
#include "tfm/objectives/objective.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"
#include "train_options.h"

using namespace tfm;

namespace {

std::string tiny_data() {
  return std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt";
}

Config mlm_config(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"data.path=" + tiny_data(),  "output.dir=" + dir,
                                   "train.objective=masked_lm", "model.causal=false",
                                   "model.d_model=32",          "model.n_layers=2",
                                   "model.n_heads=4",           "model.max_seq_len=16",
                                   "train.batch_size=8",        "train.max_steps=80",
                                   "train.eval_interval=40",    "train.eval_steps=4",
                                   "train.log_interval=10",     "train.checkpoint_interval=40",
                                   "train.threads=1",           "train.lr_schedule.warmup_steps=5",
                                   "train.optimizer.lr=3e-3"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets);
}

using tfm_test::quiet;
using tfm_test::read_metrics;
using tfm_test::s2s_config;
using tfm_test::write_reversal_pairs;

}  // namespace

TEST_CASE("objectives: masked_lm masks as BERT does (15% chosen, 80% [MASK], 10% random, 10% kept)",
          "[objective]") {
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

TEST_CASE("objectives: masked_lm trains through the loop, reports accuracy and fills masks",
          "[objective][train]") {
  const std::string dir = tfm_test::scratch_path("objectives", "mlm");
  const TrainResult r = train(mlm_config(dir), quiet());
  REQUIRE(r.status == TrainResult::Status::Finished);
  // The masked tokens are learned: the last steps' loss well below the first steps' (each batch's
  // loss reads only its ~19 chosen positions, so compare means of 10 steps).
  const auto mean_of = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / 10.0; };
  INFO("first 10 steps " << mean_of(r.losses.begin(), r.losses.begin() + 10) << ", last 10 "
                         << mean_of(r.losses.end() - 10, r.losses.end()));
  CHECK(mean_of(r.losses.end() - 10, r.losses.end()) <
        mean_of(r.losses.begin(), r.losses.begin() + 10) - 0.5);
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
  const Metrics a = with_data.objective->evaluate("val", 3, 7),
                b = with_data.objective->evaluate("val", 3, 7);
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

TEST_CASE("objectives: seq2seq resumes bit-identically", "[slow][objective][seq2seq][train]") {
  tfm_test::TempDir tmp("objectives_s2s_resume");
  const std::string data = write_reversal_pairs(tmp.path, 200);
  const std::vector<std::string> short_run = {"train.max_steps=24", "train.checkpoint_interval=8",
                                              "model.dropout=0.1", "model.attention_dropout=0.1",
                                              "train.eval_interval=12"};
  const TrainResult a = train(s2s_config(tmp.path + "/whole", data, short_run), quiet());
  TrainOptions stop = quiet();
  stop.stop_at_step = 9;
  const TrainResult b1 = train(s2s_config(tmp.path + "/split", data, short_run), stop);
  REQUIRE(b1.status == TrainResult::Status::Interrupted);
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult b2 = train(s2s_config(tmp.path + "/split", data, short_run), resume);
  REQUIRE(b2.status == TrainResult::Status::Finished);
  std::vector<double> joined = b1.losses;
  joined.insert(joined.end(), b2.losses.begin(), b2.losses.end());
  CHECK(joined == a.losses);
  CHECK(b2.val_loss == a.val_loss);
}

// ---------------------------------------------------------------------------------------------
// Data parallelism inside one process (train.data_parallel)

namespace {

// ||a - b|| / ||b||: float rounding of sums taken in another order stays near 1e-7.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, n = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

// The shards' gradients, summed over the objective's model and one replica, against the gradient of
// the same whole batch (the sampler rewound in between).
void check_shards_sum_to_the_batch(const Config& config, int parts) {
  auto objective = make_objective(config, nullptr, {});
  Model& model = objective->model();
  model.set_training(true);
  const Rng::State start = objective->sampler_rng().state();
  model.flat_grads().fill_(0.0f);
  const BatchLoss whole = objective->train_batch();
  const Tensor whole_loss = whole.auxiliary.defined() ? whole.loss + whole.auxiliary : whole.loss;
  whole_loss.backward();
  const std::vector<float> expected = model.flat_grads().to_vector();

  objective->sampler_rng().set_state(start);
  model.flat_grads().fill_(0.0f);
  std::vector<std::unique_ptr<Model>> replicas;
  for (int w = 1; w < parts; ++w) replicas.push_back(objective->replica());
  const BatchShards shards = objective->train_batch_shards(parts);
  REQUIRE(static_cast<int>(shards.losses.size()) == parts);
  CHECK(shards.tokens == whole.tokens);
  double loss = 0.0;
  for (int w = 0; w < parts; ++w) {
    const ShardLoss shard = shards.losses[w](w == 0 ? model : *replicas[w - 1]);
    if (!shard.loss.defined()) continue;
    // An auxiliary term (multi-token prediction) is summed and differentiated with the loss.
    Tensor l = shard.auxiliary.defined() ? shard.loss + shard.auxiliary : shard.loss;
    loss += l.item();
    l.backward();
  }
  std::vector<float> got = model.flat_grads().to_vector();
  for (const auto& r : replicas) {
    const std::vector<float> g = r->flat_grads().to_vector();
    for (size_t i = 0; i < got.size(); ++i) got[i] += g[i];
    // The replica read the model's weights, not a copy.
    CHECK(r->flat_values().data() == model.flat_values().data());
  }
  CHECK(loss == Approx(whole_loss.item()).epsilon(1e-6));
  CHECK(relative_error(got, expected) < 5e-6);
}

}  // namespace

TEST_CASE("objectives: data-parallel shards' gradients sum to the whole batch's",
          "[objective][data_parallel]") {
  tfm_test::TempDir tmp("objectives_dp_grad");
  SECTION("causal_lm, 2 and 3 workers (uneven rows)") {
    const Config c =
        mlm_config(tmp.path + "/c", {"train.objective=causal_lm", "model.causal=true", "train.batch_size=7"});
    check_shards_sum_to_the_batch(c, 2);
    check_shards_sum_to_the_batch(c, 3);
  }
  SECTION("causal_lm with two multi-token prediction heads: the auxiliary terms sum too") {
    const Config c = mlm_config(tmp.path + "/mtp", {"train.objective=causal_lm", "model.causal=true",
                                                    "train.batch_size=7", "model.mtp_heads=2"});
    check_shards_sum_to_the_batch(c, 3);
  }
  SECTION("masked_lm: shards weighted by their masked positions") {
    check_shards_sum_to_the_batch(mlm_config(tmp.path + "/m"), 2);
  }
  SECTION("seq2seq: shards padded to their own longest pair") {
    const std::string data = write_reversal_pairs(tmp.path, 200);
    check_shards_sum_to_the_batch(s2s_config(tmp.path + "/s", data, {"train.batch_size=9"}), 2);
  }
}

TEST_CASE("objectives: a data-parallel run follows the ordinary run's loss",
          "[slow][objective][data_parallel][train]") {
  tfm_test::TempDir tmp("objectives_dp_train");
  const auto compare = [](const TrainResult& a, const TrainResult& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i] == Approx(b.losses[i]).epsilon(1e-4));
  };
  SECTION("masked_lm") {
    const std::vector<std::string> run = {"train.max_steps=20", "train.threads=2", "train.data_parallel=1"};
    auto dp = run;
    dp.push_back("train.data_parallel=2");
    compare(train(mlm_config(tmp.path + "/dp", dp), quiet()),
            train(mlm_config(tmp.path + "/one", run), quiet()));
  }
  SECTION("seq2seq, 3 workers with gradient accumulation") {
    const std::string data = write_reversal_pairs(tmp.path, 200);
    const std::vector<std::string> run = {"train.max_steps=10", "train.threads=2", "train.grad_accum_steps=2",
                                          "train.data_parallel=1"};
    auto dp = run;
    dp.push_back("train.data_parallel=3");
    compare(train(s2s_config(tmp.path + "/sdp", data, dp), quiet()),
            train(s2s_config(tmp.path + "/sone", data, run), quiet()));
  }
}

TEST_CASE("objectives: seq2seq gradient accumulation weighs micro-batches by their target tokens",
          "[objective][train]") {
  // Pairs of 3 to 6 target tokens: micro-batches of one batch count different numbers of them. One SGD
  // step (no momentum: the update is lr times the gradient) of 8 x 1, 4 x 2 and 2 x 4 pairs, the same 8
  // pairs in the same order: the update of one batch is the mean over all its target tokens.
  tfm_test::TempDir tmp("objectives_s2s_accum");
  const std::string data = write_reversal_pairs(tmp.path, 200);
  const auto values_after = [&](const std::string& name, const std::vector<std::string>& batch) {
    std::vector<std::string> sets = {"train.max_steps=1",
                                     "train.grad_clip=0",
                                     "train.eval_interval=1",
                                     "train.eval_steps=1",
                                     "model.dropout=0",
                                     "model.attention_dropout=0",
                                     "train.optimizer.name=sgd",
                                     "train.optimizer.momentum=0",
                                     "train.lr_schedule.warmup_steps=0"};
    sets.insert(sets.end(), batch.begin(), batch.end());
    train(s2s_config(tmp.path + "/" + name, data, sets), quiet());
    return load_checkpoint(tmp.path + "/" + name + "/last.ckpt").model;
  };
  const auto before = values_after("before", {"train.batch_size=8", "train.optimizer.lr=1e-30"});
  const auto one = values_after("one", {"train.batch_size=8"});
  const auto two = values_after("two", {"train.batch_size=4", "train.grad_accum_steps=2"});
  const auto four = values_after("four", {"train.batch_size=2", "train.grad_accum_steps=4"});
  REQUIRE(one.size() == two.size());
  REQUIRE(one.size() == four.size());
  double max_diff = 0, max_update = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    const double update = static_cast<double>(one[i]) - before[i];
    max_update = std::max(max_update, std::fabs(update));
    max_diff = std::max({max_diff, std::fabs(static_cast<double>(two[i]) - before[i] - update),
                         std::fabs(static_cast<double>(four[i]) - before[i] - update)});
  }
  INFO("max |update| " << max_update << ", max |difference| " << max_diff);
  CHECK(max_update > 1e-4);
  CHECK(max_diff < 1e-3 * max_update);
}

TEST_CASE("objectives: train.data_parallel is checked", "[objective][data_parallel][config]") {
  const auto message = [](std::vector<std::string> sets) {
    try {
      resolve_config(nlohmann::json::object(), sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message({"train.data_parallel=-1"}),
             Catch::Contains("train.data_parallel: expected an integer >= 0"));
  CHECK_THAT(message({"train.batch_size=4", "train.data_parallel=5"}),
             Catch::Contains("train.data_parallel: expected at most train.batch_size = 4"));
}

TEST_CASE("objectives: train.data_parallel defaults to one worker per thread for small products only",
          "[objective][data_parallel][config]") {
  const auto workers = [](const std::string& config, std::vector<std::string> sets) {
    return load_config(std::string(TFM_SOURCE_DIR) + "/" + config, sets).integer("train.data_parallel");
  };
  // fc1's multiply-adds per micro-batch: 12 x 64 x 128 x 512 = 5.0e7; 64 x 256 x 384 x 1536 = 9.7e9.
  CHECK(workers("configs/shakespeare_char.json", {}) == 0);
  CHECK(workers("configs/shakespeare_mlm.json", {}) == 0);
  CHECK(workers("configs/eng_fra.json", {}) == 0);
  CHECK(workers("configs/shakespeare_char_large.json", {}) == 1);
  // The rule reads the batch: the large model on 4 sequences of 256 tokens is 6.0e8 multiply-adds.
  CHECK(workers("configs/shakespeare_char_large.json", {"train.batch_size=4"}) == 0);
  // 2^30 exactly is not under it: 2^30 = 2^7 x 2^7 x 2^8 x 2^8.
  CHECK(workers("configs/tiny.json", {"train.batch_size=128", "train.seq_len=128", "model.max_seq_len=128",
                                      "model.d_model=256", "model.d_ff=256"}) == 1);
  // A value given is kept.
  CHECK(workers("configs/shakespeare_char.json", {"train.data_parallel=1"}) == 1);
  CHECK(workers("configs/shakespeare_char_large.json", {"train.data_parallel=3"}) == 3);
}

TEST_CASE("objectives: a data-parallel run with dropout resumes bit-identically",
          "[slow][objective][data_parallel][train]") {
  tfm_test::TempDir tmp("objectives_dp_resume");
  // The replicas' dropout streams are seeded from the model's, which the checkpoint holds.
  const std::vector<std::string> run = {"train.max_steps=20", "train.checkpoint_interval=10",
                                        "model.dropout=0.1", "train.threads=2", "train.data_parallel=2"};
  const TrainResult a = train(mlm_config(tmp.path + "/whole", run), quiet());
  TrainOptions stop = quiet();
  stop.stop_at_step = 7;
  const TrainResult b1 = train(mlm_config(tmp.path + "/split", run), stop);
  REQUIRE(b1.status == TrainResult::Status::Interrupted);
  TrainOptions resume = quiet();
  resume.resume = true;
  const TrainResult b2 = train(mlm_config(tmp.path + "/split", run), resume);
  std::vector<double> joined = b1.losses;
  joined.insert(joined.end(), b2.losses.begin(), b2.losses.end());
  CHECK(joined == a.losses);
}

TEST_CASE("objectives: every evaluation abandons on a stop request between batches", "[objective]") {
  const std::string dir = tfm_test::scratch_path("objectives", "eval_stop");
  const std::string pairs = write_reversal_pairs(dir + "_data", 200);
  const std::vector<Config> configs = {
      resolve_config(nlohmann::json::object(),
                     {"data.path=" + tiny_data(), "output.dir=" + dir, "model.d_model=16", "model.n_layers=1",
                      "model.n_heads=2", "model.max_seq_len=16", "train.seq_len=16"}),
      mlm_config(dir), s2s_config(dir, pairs)};
  for (const Config& c : configs) {
    const std::unique_ptr<Objective> objective = make_objective(c, nullptr, {});
    INFO(objective->name());
    objective->model().set_training(true);
    std::atomic<bool> stop{true};
    // A billion batches would take days: a pending request ends it before the first.
    const Metrics abandoned = objective->evaluate("val", 1000000000, 7, &stop);
    CHECK(abandoned.abandoned);
    CHECK(abandoned.values.empty());
    stop = false;
    const Metrics done = objective->evaluate("val", 2, 7, &stop);
    CHECK_FALSE(done.abandoned);
    CHECK(std::isfinite(done.get("loss")));
    CHECK(objective->model().training());  // the mode is given back either way
  }
}

TEST_CASE("objectives: capabilities say what each needs and does, and evaluate() reports their metrics",
          "[objective][capabilities]") {
  const std::string dir = tfm_test::scratch_path("objectives", "capabilities");
  const std::string pairs = write_reversal_pairs(dir + "_data", 200);
  const Config causal =
      resolve_config(nlohmann::json::object(),
                     {"data.path=" + tiny_data(), "output.dir=" + dir, "model.d_model=16", "model.n_layers=1",
                      "model.n_heads=2", "model.max_seq_len=16", "train.seq_len=16"});
  struct Expected {
    Config config;
    TrainingData data;
    ModelKind model;
    Inference inference;
    bool in_order;
  };
  const std::vector<Expected> all = {
      {causal, TrainingData::Text, ModelKind::CausalDecoder, Inference::Sample, false},
      {mlm_config(dir), TrainingData::Text, ModelKind::BidirectionalEncoder, Inference::FillMask, false},
      {s2s_config(dir, pairs), TrainingData::Pairs, ModelKind::EncoderDecoder, Inference::Translate, true}};
  for (const Expected& e : all) {
    const std::unique_ptr<Objective> objective = make_objective(e.config, nullptr, {});
    INFO(objective->name());
    const ObjectiveCapabilities can = objective->capabilities();
    CHECK(can.data == e.data);
    CHECK(can.model == e.model);
    CHECK(can.inference == e.inference);
    CHECK(can.evaluates_in_order == e.in_order);
    CHECK(can.language_model() == (dynamic_cast<LanguageModel*>(&objective->model()) != nullptr));
    CHECK_THAT(objective->usage_hint("DIR"), Catch::Contains(can.inference_command));
    const Metrics m = objective->evaluate("val", 1, 7);
    std::vector<std::string> names;
    for (const auto& [name, value] : m.values) names.push_back(name);
    CHECK(names == can.metrics);
    // Only a causal decoder exports to llama.cpp; the others are refused naming their objective.
    if (e.model == ModelKind::CausalDecoder)
      CHECK(objective->gguf_architecture() == GgufArchitecture::Gpt2);
    else
      CHECK_THROWS_WITH(objective->gguf_architecture(),
                        Catch::Contains("train.objective = \"" + objective->name()));
  }
}

TEST_CASE("objectives: the data hash is the same for the same data and changes with it", "[objective]") {
  const std::string dir = tfm_test::scratch_path("objectives", "data_hash");
  const std::string pairs = write_reversal_pairs(dir + "_data", 200);
  for (const Config& c : {mlm_config(dir), s2s_config(dir, pairs)}) {
    const std::unique_ptr<Objective> first = make_objective(c, nullptr, {});
    const uint64_t h = first->data_hash();
    INFO(c.string("train.objective"));
    CHECK(h != 0);
    CHECK(make_objective(c, nullptr, {})->data_hash() == h);
    Vocabulary vocabulary;  // without data (sampling, export): the vocabularies a checkpoint would give
    vocabulary.tokenizer = first->tokenizer();
    if (first->target_tokenizer()) vocabulary.target_tokenizer = *first->target_tokenizer();
    ObjectiveOptions no_data;
    no_data.load_data = false;
    CHECK(make_objective(c, &vocabulary, no_data)->data_hash() == 0);
  }
  const uint64_t before = make_objective(s2s_config(dir, pairs), nullptr, {})->data_hash();
  write_reversal_pairs(dir + "_data", 201);
  CHECK(make_objective(s2s_config(dir, pairs), nullptr, {})->data_hash() != before);
  // A text corpus: one line more, another hash (its token cache rebuilt).
  const std::string text = dir + "_text.txt";
  std::filesystem::copy_file(tiny_data(), text, std::filesystem::copy_options::overwrite_existing);
  const Config on_text = resolve_config(mlm_config(dir).tree, {"data.path=" + text});
  const uint64_t text_before = make_objective(on_text, nullptr, {})->data_hash();
  std::ofstream(text, std::ios::app) << "One line more.\n";
  CHECK(make_objective(on_text, nullptr, {})->data_hash() != text_before);
}
