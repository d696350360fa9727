// tfm export --format gguf and tfm eval --dump-logits --text through the CLI on configs/tiny.json: the
// file is GGUF for llama.cpp's gpt2 (or llama and qwen3 for the modern options), read back the export
// reports the model's probabilities, the
// flags are checked, and what llama.cpp cannot run is refused naming the key. Real llama.cpp runs the
// exports in scripts/dev/check_gguf.sh (ctest gguf_llama_cpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/engine/gguf.h"
#include "tfm/models/gguf_export.h"
#include "tfm/training/run_dir.h"

namespace {

namespace fs = std::filesystem;
using tfm_test::CliRun;
using tfm_test::run_tfm;
using tfm_test::TempDir;

// The number after `label` in the export's report ("... within 4.0e-07 with tfm's GELU").
double number_before(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  REQUIRE(at != std::string::npos);
  const size_t start = out.rfind(' ', at - 2) + 1;
  return std::strtod(out.substr(start, at - start).c_str(), nullptr);
}

}  // namespace

TEST_CASE("gguf: tfm export --format gguf writes llama.cpp's gpt2 and checks it read back", "[gguf][cli]") {
  TempDir tmp("gguf_export");
  const std::string run = tmp.path + "/run";
  CliRun r = run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=20");
  INFO(r.out);
  REQUIRE(r.status == 0);

  r = run_tfm("export --run " + run + " --format gguf");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string path = run + "/model-f32.gguf";
  CHECK_THAT(r.out, Catch::Contains("wrote " + path + ": llama.cpp architecture gpt2, 29 tensors") &&
                        Catch::Contains(" 27264 parameters"));
  CHECK(number_before(r.out, " with tfm's GELU (erf)") < 1e-5);  // the export itself: float rounding
  CHECK_THAT(r.out, Catch::Contains("--ignore-eos"));            // a char vocabulary: id 11 ends generation
  const tfm::GgufFile f = tfm::load_gguf(path);
  CHECK(f.at("general.architecture").str() == "gpt2");
  CHECK(f.at("general.name").str() == "run");
  const tfm::LoadedRun loaded = tfm::load_run(run, "last");
  CHECK(f.at("gpt2.context_length").unsigned_value() == 32);
  CHECK(static_cast<int64_t>(f.at("tokenizer.ggml.tokens").items().size()) ==
        loaded.checkpoint.tokenizer.size());
  // The run's config without local paths, as the safetensors export's (test_export.cpp).
  CHECK(nlohmann::json::parse(f.at("tfm.config").str()) == tfm::exported_config(loaded.config));
  CHECK(f.at("tfm.config").str().find(TFM_SOURCE_DIR) == std::string::npos);
  CHECK(f.at("tfm.config").str().find(run) == std::string::npos);

  // --out ending in .gguf picks the format; --dtype bf16 halves the matrices.
  r = run_tfm("export --run " + run + " --out " + tmp.path + "/x.gguf --dtype bf16");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(tfm::load_gguf(tmp.path + "/x.gguf").tensor("token_embd.weight").type == tfm::GgmlType::BF16);
  CHECK(tfm::load_gguf(tmp.path + "/x.gguf").at("general.file_type").unsigned_value() == 32);

  // model.mtp_heads' extra heads are not written, nor counted in what the message says it wrote.
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path + "/mtp --set train.max_steps=1 " +
              "--set model.mtp_heads=1");
  REQUIRE(r.status == 0);
  r = run_tfm("export --run " + tmp.path + "/mtp --format gguf");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(" 27264 parameters"));

  // Bad flags: status 2 naming the flag.
  r = run_tfm("export --run " + run + " --format onnx");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--format: expected \"safetensors\" or \"gguf\", got \"onnx\""));
  r = run_tfm("export --run " + run + " --format gguf --dtype f8");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--dtype: expected \"f32\", \"f16\" or \"bf16\", got \"f8\""));
  r = run_tfm("export --run " + run);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--out: required for --format safetensors"));
  r = run_tfm("export --run " + run + " --out " + tmp.path + "/w.safetensors --dtype f16");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--dtype: safetensors exports are float32"));
}

TEST_CASE("gguf: the modern options export as llama.cpp's llama, with QK-norm as qwen3", "[gguf][cli]") {
  TempDir tmp("gguf_modern");
  // The recipe's model options (RoPE, RMSNorm, SwiGLU, no biases, untied head; QK-norm for qwen3) at tiny
  // size.
  const std::string modern =
      " --set model.positional_encoding=rope --set model.norm=rmsnorm"
      " --set model.activation=swiglu --set model.bias=false --set model.tie_embeddings=false"
      " --set model.n_kv_heads=2 --set train.max_steps=20";
  for (const std::string arch : {"llama", "qwen3"}) {
    INFO(arch);
    const std::string run = tmp.path + "/" + arch;
    CliRun r = run_tfm("train --config configs/tiny.json --out " + run + modern +
                       (arch == "qwen3" ? " --set model.qk_norm=true" : ""));
    INFO(r.out);
    REQUIRE(r.status == 0);
    r = run_tfm("export --run " + run + " --format gguf --out " + run + "/m.gguf");
    INFO(r.out);
    REQUIRE(r.status == 0);
    // token_embd, 9 tensors per block (11 with QK-norm), output_norm and output.
    CHECK_THAT(r.out, Catch::Contains("llama.cpp architecture " + arch + ", " +
                                      std::to_string(arch == "qwen3" ? 25 : 21) + " tensors"));
    CHECK(number_before(r.out, " (RoPE, RMSNorm, SwiGLU") < 1e-5);  // the export itself: float rounding
    const tfm::GgufFile f = tfm::load_gguf(run + "/m.gguf");
    CHECK(f.at("general.architecture").str() == arch);
    CHECK(f.at(arch + ".attention.head_count_kv").unsigned_value() == 2);
    CHECK(f.at(arch + ".rope.dimension_count").unsigned_value() == 8);  // d_model 32 / 4 heads
    CHECK(f.at(arch + ".rope.freq_base").number() == 10000.0);
    CHECK((f.find_tensor("blk.1.attn_q_norm.weight") != nullptr) == (arch == "qwen3"));
    CHECK(f.find_tensor("output.weight") != nullptr);
  }
}

TEST_CASE("gguf: what llama.cpp cannot run is refused naming the key", "[gguf][cli]") {
  TempDir tmp("gguf_refuse");
  const std::string run = tmp.path + "/run";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + run +
                  " --set train.max_steps=2 --set model.activation=relu --set model.norm_position=post")
              .status == 0);
  const CliRun r = run_tfm("export --run " + run + " --format gguf");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains("llama.cpp cannot run this model") &&
                 Catch::Contains("model.norm_position = \"post\"") &&
                 Catch::Contains("model.activation = \"relu\": llama.cpp's gpt2 feed-forward applies GELU"));
  CHECK_FALSE(std::filesystem::exists(run + "/model-f32.gguf"));

  // RoPE with the default LayerNorm and GELU: neither llama.cpp's gpt2 (a position table) nor its llama.
  const std::string rope = tmp.path + "/rope";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + rope +
                  " --set train.max_steps=2 --set model.positional_encoding=rope")
              .status == 0);
  const CliRun q = run_tfm("export --run " + rope + " --format gguf");
  INFO(q.out);
  CHECK(q.status == 2);
  CHECK_THAT(q.out,
             Catch::Contains("model.norm = \"layernorm\": with model.positional_encoding = \"rope\"") &&
                 Catch::Contains("model.activation = \"gelu\": with model.positional_encoding = \"rope\""));
  CHECK_FALSE(std::filesystem::exists(rope + "/model-f32.gguf"));
}

TEST_CASE("gguf: eval --dump-logits --text gives each text's tokens and logits", "[gguf][cli]") {
  TempDir tmp("gguf_text_logits");
  const std::string run = tmp.path + "/run", out = tmp.path + "/logits.json";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=2").status == 0);
  CliRun r = run_tfm("eval --run " + run + " --dump-logits " + out + " --text 'ROMEO:' --text 'All:'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j.at("tokens").size() == 2);
  CHECK(j.at("tokens")[0].size() == 6);
  CHECK(j.at("logits")[1].size() == 4);  // (T, V) per text
  const tfm::LoadedRun loaded = tfm::load_run(run, "last");
  CHECK(static_cast<int64_t>(j.at("logits")[1][0].size()) == loaded.model->config().vocab_size);
  CHECK(j.at("tokens")[0].get<std::vector<int32_t>>() ==
        loaded.checkpoint.tokenizer.encode("ROMEO:", "test"));

  // --gguf: llama.cpp's graph run by tfm from an export; with tfm's erf GELU it is the model's forward.
  REQUIRE(run_tfm("export --run " + run + " --format gguf").status == 0);
  const std::string ref = tmp.path + "/ref.json";
  r = run_tfm("eval --run " + run + " --dump-logits " + ref + " --text 'ROMEO:' --text 'All:' --gguf " + run +
              "/model-f32.gguf --gelu erf");
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::ifstream ref_in(ref);
  const nlohmann::json k = nlohmann::json::parse(ref_in);
  REQUIRE(k.at("tokens") == j.at("tokens"));
  double worst = 0;
  for (size_t s = 0; s < 2; ++s)
    for (size_t t = 0; t < j["logits"][s].size(); ++t)
      for (size_t v = 0; v < j["logits"][s][t].size(); ++v)
        worst = std::max(worst,
                         std::abs(j["logits"][s][t][v].get<double>() - k["logits"][s][t][v].get<double>()));
  CHECK(worst < 1e-4);
  r = run_tfm("eval --run " + run + " --dump-logits " + ref + " --text 'ROMEO:' --gguf " + run +
              "/model-f32.gguf --gelu sigmoid");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--gelu: expected \"erf\", \"tanh\" or \"llama.cpp\", got \"sigmoid\""));
  r = run_tfm("eval --run " + run + " --dump-logits " + ref + " --gguf " + run + "/model-f32.gguf");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--gguf: goes with --dump-logits FILE --text TEXT"));
  // Another run's file: refused, not run on this run's token ids. A byte vocabulary is another; the same
  // characters with a shorter context cannot hold the text.
  const std::string other = tmp.path + "/other";
  for (const std::string set : {"data.tokenizer=byte", "model.max_seq_len=8 --set train.seq_len=8"}) {
    INFO(set);
    fs::remove_all(other);
    REQUIRE(
        run_tfm("train --config configs/tiny.json --out " + other + " --set train.max_steps=1 --set " + set)
            .status == 0);
    REQUIRE(run_tfm("export --run " + other + " --format gguf").status == 0);
    r = run_tfm("eval --run " + run + " --dump-logits " + ref + " --text 'ROMEO: and all' --gguf " + other +
                "/model-f32.gguf");
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("--gguf: " + other + "/model-f32.gguf ") &&
                          Catch::Contains("export this run's model (tfm export --run RUN --format gguf)"));
    CHECK_THAT(r.out, Catch::Contains(set[0] == 'd' ? "is not this run's model: its vocabulary has 256 tokens"
                                                    : "has a context of 8 tokens and a --text is 14 tokens"));
  }

  r = run_tfm("eval --run " + run + " --text 'ROMEO:'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text: goes with --dump-logits FILE"));
  r = run_tfm("eval --run " + run + " --dump-logits " + out + " --text '" + std::string(40, 'a') + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("is 40 tokens, expected 1 to 32 (model.max_seq_len)"));
}
