// The pre-flight memory check (preflight.h): the parameter count from the shapes equals the built
// model's for every model option, the estimate stays close to the tensor memory a training step really
// peaks at, and a config that cannot fit exits 2 before anything large is allocated, naming its keys,
// the estimate and the available memory (train.skip_memory_check lets it through).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/data/pairs.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/training/optim.h"
#include "tfm/training/preflight.h"
#include "tfm/training/trainer.h"

using namespace tfm;

namespace {

// Model options that change the parameter count or the activations.
const std::vector<std::vector<std::string>> kVariants = {
    {},
    {"model.n_kv_heads=2"},
    {"model.n_kv_heads=1", "model.attention_score=\"additive\""},
    {"model.norm_position=\"post\"", "model.positional_encoding=\"learned\""},
    {"model.positional_encoding=\"rope\"", "model.max_seq_len=100000"},  // tables as far as seq_len reaches
    {"model.tie_embeddings=false", "model.bias=false", "model.activation=\"relu\""},
    {"model.attention_dropout=0.1", "model.dropout=0.1"},
    {"train.optimizer.name=\"sgd\"", "model.d_ff=96"},
    {"model.head_gating=\"topk\"", "model.head_topk=2"},
    {"model.head_mixing=\"talking_heads\"", "model.n_kv_heads=2"},
    {"model.head_mixing=\"group_mlp\"", "model.head_groups=2", "model.attention_score=\"additive\""},
};

Config small_config(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.d_model=32", "model.n_layers=2", "model.n_heads=4",
                             "model.max_seq_len=32", "train.batch_size=4", "train.seq_len=32"});
  return resolve_config(nlohmann::json::object(), sets);
}

}  // namespace

TEST_CASE("preflight: the parameter count from the shapes equals the built model's", "[preflight]") {
  for (const auto& sets : kVariants) {
    const Config c = small_config(sets);
    const ModelConfig mc = c.model(37);
    const LanguageModel model(mc, 1);
    INFO(c.tree["model"].dump());
    CHECK(parameter_count(mc) == static_cast<double>(model.parameter_count()));
  }
}

TEST_CASE("preflight: the estimate is close to the measured peak of a training step", "[slow][preflight]") {
  // Tensor memory of one forward + backward from an empty graph: parameters, gradients, activations and
  // the position table (the optimizer's state is not tensor memory; it is added exactly).
  for (const auto& sets : kVariants) {
    const Config c = small_config(sets);
    const int64_t V = 65, B = c.integer("train.batch_size"), T = c.integer("train.seq_len");
    const MemoryEstimate e = estimate_training_memory(c, V);
    const size_t base = memory::stats().live_bytes;
    memory::reset_peak();
    double measured = 0;
    {
      LanguageModel model(c.model(V), 1);
      model.set_training(true);
      std::vector<int32_t> x(B * T), y(B * T);
      Rng rng(3);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
      LanguageModel::loss(model.forward(x, B, T), y).backward();
      measured = static_cast<double>(memory::stats().peak_live_bytes - base);
    }
    const double estimated = e.total() - e.optimizer;
    INFO(c.tree["model"].dump() << ": estimated " << estimated << " bytes, measured " << measured);
    CHECK(estimated >= 0.75 * measured);
    CHECK(estimated <= 1.35 * measured);
  }
}

TEST_CASE("preflight: data-parallel workers each count a gradient buffer", "[preflight]") {
  const ModelConfig mc = small_config({}).model(37);
  const double one = estimate_memory(small_config({"train.data_parallel=1"}), mc, true).gradients;
  CHECK(one == Approx(4.0 * parameter_count(mc)));
  CHECK(estimate_memory(small_config({"train.data_parallel=3"}), mc, true).gradients == Approx(3 * one));
  CHECK(estimate_memory(small_config({"train.data_parallel=0", "train.threads=2"}), mc, true).gradients ==
        Approx(2 * one));
  CHECK(estimate_memory(small_config({"train.data_parallel=3"}), mc, false).gradients == 0.0);
}

TEST_CASE("preflight: the drivers of an estimate are its largest component's keys", "[preflight]") {
  const MemoryEstimate batch = estimate_training_memory(small_config({"train.batch_size=100000000"}), 65);
  REQUIRE(!batch.drivers.empty());
  CHECK(batch.drivers[0] == "train.batch_size = 100000000");
  // A fixed position table is built only as far as train.seq_len reaches: model.max_seq_len costs nothing.
  const MemoryEstimate table =
      estimate_training_memory(small_config({"model.max_seq_len=1000000000", "train.data_parallel=1"}), 65);
  CHECK(table.position_table == 4.0 * 32 * 32);
  CHECK(std::find(table.drivers.begin(), table.drivers.end(), "model.max_seq_len = 1000000000") ==
        table.drivers.end());
  // RoPE's cosines and sines: (T, Dk/2) each in every layer; each data-parallel worker has its own.
  const MemoryEstimate rope =
      estimate_training_memory(small_config({"model.max_seq_len=1000000000",
                                             "model.positional_encoding=\"rope\"", "train.data_parallel=2"}),
                               65);
  CHECK(rope.position_table == 2 * 4.0 * 32 * 8 * 2);
  const MemoryEstimate layers = estimate_training_memory(small_config({"model.n_layers=100000"}), 65);
  CHECK(std::find(layers.drivers.begin(), layers.drivers.end(), "model.n_layers = 100000") !=
        layers.drivers.end());
  const AvailableMemory avail = available_memory();
  CHECK(avail.bytes > 0);
  CHECK(!avail.source.empty());
}

TEST_CASE("preflight: the encoder-decoder's estimate is close to its measured peak",
          "[slow][preflight][seq2seq]") {
  // B pairs at the longest lengths (S = max_source_len + 1 with <eos>, T = max_target_len + 1 with
  // <bos>), each variant as the LM test above; parameters from the shapes equal the built model's.
  const std::vector<std::vector<std::string>> variants = {
      {},
      {"model.norm_position=\"post\"", "model.positional_encoding=\"learned\"", "model.tie_embeddings=false"},
      {"model.n_kv_heads=1", "model.attention_score=\"additive\"", "model.n_encoder_layers=1"},
      {"data.max_source_len=20", "data.max_target_len=7", "model.attention_dropout=0.1", "model.dropout=0.1"},
  };
  for (std::vector<std::string> sets : variants) {
    sets.insert(sets.begin(), {"train.objective=\"seq2seq\"", "data.format=\"pairs\"",
                               "data.tokenizer=\"word\"", "model.d_model=32", "model.n_layers=2",
                               "model.n_heads=4", "model.max_seq_len=32", "train.batch_size=8"});
    const Config c = resolve_config(nlohmann::json::object(), sets);
    ModelConfig mc = c.model(41);
    mc.source_vocab_size = 53;
    const MemoryEstimate e = estimate_memory(c, mc, true);
    const int64_t B = c.integer("train.batch_size"), S = c.integer("data.max_source_len") + 1,
                  T = c.integer("data.max_target_len") + 1;
    const size_t base = memory::stats().live_bytes;
    memory::reset_peak();
    double measured = 0;
    {
      Seq2SeqModel model(mc, 1);
      INFO(c.tree["model"].dump());
      CHECK(parameter_count(mc) == static_cast<double>(model.parameter_count()));
      model.set_training(true);
      Rng rng(3);
      std::vector<int32_t> src(B * S), tgt_in(B * T), tgt_out(B * T);
      for (int32_t& t : src) t = static_cast<int32_t>(4 + rng.below(49));
      for (size_t i = 0; i < tgt_in.size(); ++i)
        tgt_in[i] = static_cast<int32_t>(4 + rng.below(37)),
        tgt_out[i] = static_cast<int32_t>(4 + rng.below(37));
      const std::vector<int64_t> lengths(static_cast<size_t>(B), S);
      cross_entropy(model.forward(src, lengths, B, S, tgt_in, T), tgt_out, kPadId).backward();
      measured = static_cast<double>(memory::stats().peak_live_bytes - base);
    }
    const double estimated = e.total() - e.optimizer;
    INFO(c.tree["model"].dump() << " " << c.tree["data"].dump() << ": estimated " << estimated
                                << " bytes, measured " << measured);
    CHECK(estimated >= 0.75 * measured);
    CHECK(estimated <= 1.35 * measured);
  }
}

TEST_CASE("preflight: the optimizer's state is estimated as the built optimizer holds it",
          "[preflight][muon]") {
  // AdamW's and SGD's exactly; Muon's (momentum over the blocks' matrices, AdamW's moments over the rest,
  // the Newton-Schulz workspace per thread) within the blocks' biases and gains, which the estimate counts
  // once instead of twice (3% of a block at C = 32).
  const std::vector<std::vector<std::string>> variants = {
      {}, {"model.bias=false", "model.tie_embeddings=false"}, {"model.n_kv_heads=2", "model.d_ff=16"}};
  for (const char* name : {"adamw", "sgd", "muon"})
    for (std::vector<std::string> sets : variants) {
      sets.insert(sets.end(), {std::string("train.optimizer.name=") + name, "train.threads=2"});
      const Config c = small_config(sets);
      const ModelConfig mc = c.model(37);
      const LanguageModel model(mc, 1);
      const Optimizer optimizer(c.train().optimizer, optimizer_segments(model), model.parameter_count());
      const double built = 4.0 * optimizer.state_floats(2),
                   estimated = estimate_memory(c, mc, true).optimizer;
      INFO(name << " " << c.tree["model"].dump() << ": estimated " << estimated << " bytes, built " << built);
      if (std::string(name) == "muon")
        CHECK(estimated == Approx(built).epsilon(0.03));
      else
        CHECK(estimated == built);
      CHECK(estimate_memory(c, mc, false).optimizer == 0.0);
    }
  // The encoder-decoder's two stacks.
  const Config c =
      resolve_config(nlohmann::json::object(),
                     {"train.objective=\"seq2seq\"", "data.format=\"pairs\"", "data.tokenizer=\"word\"",
                      "model.d_model=32", "model.n_layers=2", "model.n_heads=4", "model.max_seq_len=32",
                      "train.optimizer.name=muon", "train.threads=2"});
  ModelConfig mc = c.model(41);
  mc.source_vocab_size = 53;
  const Seq2SeqModel model(mc, 1);
  const std::vector<ParamSegment> segments = optimizer_segments(model);
  int64_t matrices = 0;
  for (const ParamSegment& s : segments) matrices += s.rows > 0;
  CHECK(matrices == 2 * 6 + 2 * 10);  // encoder blocks: 4 attention + 2 feed-forward; decoder: 4 more (cross)
  const Optimizer optimizer(c.train().optimizer, segments, model.parameter_count());
  CHECK(estimate_memory(c, mc, true).optimizer == Approx(4.0 * optimizer.state_floats(2)).epsilon(0.03));
}

TEST_CASE("preflight: threads beyond the cores, and data-parallel workers beyond the threads, are warned of",
          "[preflight]") {
  CHECK(thread_warnings(2, 2, 1, 2, 2).empty());
  // mpirun -np 2 binds each rank to a core of its own: one thread on its one core, two on the two.
  CHECK(thread_warnings(1, 1, 2, 1, 2).empty());
  std::vector<std::string> w = thread_warnings(4, 4, 1, 2, 2);
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("train.threads = 4 is more than the 2 core(s) this process may use") &&
                       Catch::Contains("slower than train.threads = 2 (or 0, all cores)"));
  w = thread_warnings(2, 2, 2, 1, 2);  // bound to a core, two threads on it
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("train.threads = 2 is more than the 1 core(s) this process may use"));
  w = thread_warnings(2, 2, 2, 2, 2);  // unbound (--bind-to none): two ranks of two threads on two cores
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("2 ranks x 2 thread(s) on this machine's 2 core(s)") &&
                       Catch::Contains("slower than 1 thread(s) a rank"));
  w = thread_warnings(2, 4, 1, 8, 8);
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("train.data_parallel: 4 workers on 2 thread(s)"));
}
