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

TEST_CASE("bench gemm: a bf16 row is marked emulated exactly where training says its bf16 is emulated",
          "[bench][cli]") {
  const nlohmann::json bench = json_of(tfm_test::run_tfm(std::string("bench gemm") + kQuick));
  std::map<std::string, bool> emulated;  // "onednn bf16" -> emulated
  for (const auto& m : bench.at("modes"))
    emulated[m.at("backend").get<std::string>() + " " + m.at("precision").get<std::string>()] =
        m.at("emulated").get<bool>();
  CHECK_FALSE(emulated.at("openblas fp32"));
  CHECK_FALSE(emulated.at("onednn fp32"));
  CHECK(emulated.at("openblas bf16"));  // OpenBLAS has no bf16 kernels
  // oneDNN's bf16 is a kernel on a CPU with AVX-512 and sgemm on rounded operands elsewhere: the table
  // says what a training run with the same settings says in its log.
  const tfm_test::CliRun train = tfm_test::run_tfm(
      "train --config configs/tiny.json --set train.max_steps=1 --set train.eval_interval=1 "
      "--set train.precision=bf16 --set train.gemm_backend=onednn --set train.threads=1 --out " +
      tfm_test::scratch_file("bench_gemm", "bf16_run"));
  INFO(train.out);
  REQUIRE(train.status == 0);
  CHECK(emulated.at("onednn bf16") == (train.out.find("bf16 emulated") != std::string::npos));
  // The text form says so in its row and in the table's columns, and names the kernels first.
  const tfm_test::CliRun text = tfm_test::run_tfm("bench gemm --n 64 --seconds 0.01 --threads 1");
  INFO(text.out);
  CHECK(text.out.rfind(bench.at("cpu").get<std::string>(), 0) == 0);
  const size_t row = text.out.find("onednn   bf16");
  REQUIRE(row != std::string::npos);
  const std::string line = text.out.substr(row, text.out.find('\n', row) - row);
  CHECK((line.find("(emulated") != std::string::npos) == emulated.at("onednn bf16"));
}
