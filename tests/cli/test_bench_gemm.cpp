// tfm bench gemm --config: the products of a config's training step sized as training sizes them: the
// head over the vocabulary tfm info derives from the data (not a stand-in 256), a seq2seq model's
// encoder, decoder and cross-attention over its source and target lengths. Times are never asserted on.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace {

nlohmann::json json_of(const tfm_test::CliRun& r) {
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out.substr(r.out.find('{')));
}

// The first mode's shapes by label: (M, N, K).
std::map<std::string, nlohmann::json> shapes_of(const nlohmann::json& bench) {
  std::map<std::string, nlohmann::json> shapes;
  for (const auto& s : bench.at("modes").at(0).at("shapes")) shapes[s.at("label").get<std::string>()] = s;
  return shapes;
}

const char* kQuick = " --n 64 --seconds 0.01 --threads 1 --json";

}  // namespace

TEST_CASE("bench gemm --config: the head is over the config's own vocabulary", "[bench][cli]") {
  for (const char* config : {"configs/shakespeare_char.json", "configs/shakespeare_mlm.json"}) {
    const nlohmann::json info = json_of(tfm_test::run_tfm(std::string("info --json --config ") + config));
    const tfm_test::CliRun r = tfm_test::run_tfm(std::string("bench gemm --config ") + config + kQuick);
    INFO(config << "\n" << r.out);
    const nlohmann::json bench = json_of(r);
    CHECK(bench.at("vocab_size") == info.at("vocab_size"));
    const auto shapes = shapes_of(bench);
    REQUIRE(shapes.count("lm head forward") == 1);
    CHECK(shapes.at("lm head forward").at("N") == info.at("vocab_size"));
    CHECK(shapes.at("lm head forward").at("M") ==
          info.at("batch_size").get<int64_t>() * info.at("seq_len").get<int64_t>());
  }
}

TEST_CASE("bench gemm --config: a seq2seq model's encoder, decoder and cross-attention products",
          "[bench][cli]") {
  // Sources of up to 7 words + <eos>, targets of 11 + <bos>/<eos>: S = 8, T = 12.
  const std::string config = tfm_test::scratch_file("bench_gemm", "s2s.json");
  std::ofstream(config) << R"({"data": {"path": ")" << TFM_SOURCE_DIR
                        << R"(/data/eng-fra.txt", "format": "pairs",
    "tokenizer": "word", "min_freq": 2, "max_source_len": 7, "max_target_len": 11},
  "model": {"d_model": 32, "n_layers": 1, "n_heads": 4, "max_seq_len": 16},
  "train": {"objective": "seq2seq", "batch_size": 8}})";
  const nlohmann::json info = json_of(tfm_test::run_tfm("info --json --config " + config));
  const tfm_test::CliRun text =
      tfm_test::run_tfm("bench gemm --config " + config + " --n 64 --seconds 0.01 --threads 1");
  INFO(text.out);
  CHECK_THAT(text.out, Catch::Contains("vocabulary " + info.at("source_vocab_size").dump() + " source + " +
                                       info.at("vocab_size").dump() + " target"));
  const nlohmann::json bench = json_of(tfm_test::run_tfm("bench gemm --config " + config + kQuick));
  CHECK(bench.at("vocab_size") == info.at("vocab_size"));
  CHECK(bench.at("source_vocab_size") == info.at("source_vocab_size"));
  const auto shapes = shapes_of(bench);
  for (const char* label :
       {"encoder q projection forward", "encoder attention scores (per head)",
        "decoder attention scores (per head)", "cross-attention k/v projection forward",
        "cross-attention scores (per head)", "cross-attention weighted sum (per head)", "lm head forward"})
    REQUIRE(shapes.count(label) == 1);
  CHECK(shapes.at("encoder attention scores (per head)").at("M") == 8);
  CHECK(shapes.at("decoder attention scores (per head)").at("M") == 12);
  // T target queries over S source keys; K and V projected from the encoder's 8 x S rows.
  CHECK(shapes.at("cross-attention scores (per head)").at("M") == 12);
  CHECK(shapes.at("cross-attention scores (per head)").at("N") == 8);
  CHECK(shapes.at("cross-attention k/v projection forward").at("M") == 8 * 8);
  CHECK(shapes.at("lm head forward").at("M") == 8 * 12);
  CHECK(shapes.at("lm head forward").at("N") == info.at("vocab_size"));
}
