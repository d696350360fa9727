// tfm export / --init-from / eval --dump-logits / attention through the CLI on configs/tiny.json:
// the exported safetensors carry the reference names and shapes, loading them back gives the same
// logits, and (when PyTorch is installed) torch_lm.py agrees with our logits to 1e-4.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/safetensors.h"
#include "tfm/models/language_model.h"
#include "tfm/training/run_dir.h"

namespace {

using tfm_test::CliRun;
using tfm_test::run_shell;
using tfm_test::run_tfm;
using tfm_test::TempDir;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

double max_abs_diff(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number()) return std::abs(a.get<double>() - b.get<double>());
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, max_abs_diff(a[i], b[i]));
  return m;
}

}  // namespace

TEST_CASE("export: safetensors round trip through --init-from, and the PyTorch reference's logits",
          "[export][cli]") {
  TempDir tmp("export_roundtrip");
  const std::string run = tmp.path + "/run", st = tmp.path + "/model.safetensors";
  CliRun r = run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=5");
  INFO(r.out);
  REQUIRE(r.status == 0);

  r = run_tfm("export --run " + run + " --out " + st);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Names and shapes are the model's (docs/architecture.md), weights (out, in); metadata has the config.
  const tfm::LoadedRun loaded = tfm::load_run(run, "last");
  const tfm::SafetensorsFile f = tfm::load_safetensors(st);
  REQUIRE(f.tensors.size() == loaded.model->parameters().size());
  for (const auto& p : loaded.model->parameters()) {
    INFO(p.name);
    REQUIRE(f.contains(p.name));
    CHECK(f.at(p.name).shape() == p.value.shape());
    CHECK(f.at(p.name).to_vector() == p.value.to_vector());
  }
  REQUIRE(f.metadata.count("config") == 1);
  // The run's config without the local paths it records (docs/llama_cpp.md): the data's name alone.
  const nlohmann::json published = nlohmann::json::parse(f.metadata.at("config"));
  CHECK(published == tfm::exported_config(loaded.config));
  CHECK(published.at("data").at("path") == "tiny_shakespeare.txt");
  CHECK(published.at("data").at("cache_dir").is_null());
  CHECK(published.at("output").at("dir").is_null());
  CHECK(f.metadata.at("config").find(TFM_SOURCE_DIR) == std::string::npos);
  CHECK(f.metadata.at("config").find(tmp.path) == std::string::npos);
  CHECK(f.metadata.count("tokenizer") == 1);

  // Logits of the run, then of a fresh run initialised from the export without any step: identical.
  r = run_tfm("eval --run " + run + " --dump-logits " + tmp.path + "/a.json --batches 2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("logits of 2 x 32 validation tokens"));
  const CliRun train_split =
      run_tfm("eval --run " + run + " --dump-logits " + tmp.path + "/t.json --batches 2 --split train");
  CHECK_THAT(train_split.out, Catch::Contains("logits of 2 x 32 training tokens"));
  const std::string run2 = tmp.path + "/run2";
  // One step at learning rate 1e-9 (max_steps >= 1, lr > 0): Adam moves each weight by ~1e-9, so the
  // logits stay the file's to ~1e-7 (a fresh initialisation would differ by ~1).
  r = run_tfm("train --config configs/tiny.json --out " + run2 +
              " --set train.max_steps=1 --set train.optimizer.lr=1e-9 --set train.lr_schedule.min_lr=1e-9"
              " --set train.lr_schedule.warmup_steps=0 --init-from " +
              st);
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Where the starting weights came from is in the run's log.
  CHECK_THAT(tfm_test::read_file(run2 + "/train.log"),
             Catch::Contains("initial weights: " + st + " (--init-from)"));
  r = run_tfm("eval --run " + run2 + " --dump-logits " + tmp.path + "/b.json --batches 2");
  REQUIRE(r.status == 0);
  const nlohmann::json a = read_json(tmp.path + "/a.json"), b = read_json(tmp.path + "/b.json");
  REQUIRE(a.at("tokens").size() == 2);
  CHECK(a.at("tokens") == b.at("tokens"));
  CHECK(max_abs_diff(a.at("logits"), b.at("logits")) < 1e-5);

  // The library's loader gives exactly the run's weights.
  tfm::LanguageModel fresh(loaded.model->config(), 7);
  tfm::load_safetensors_into(fresh, st);
  CHECK(fresh.flat_values().to_vector() == loaded.model->flat_values().to_vector());

  // sample --init-from uses the file's weights.
  r = run_tfm("sample --run " + run + " --init-from " + st + " --max-new-tokens 5 --seed 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("tfm: weights from " + st + " (--init-from)"));

  // The commands `export --help` gives to load the file work as written, CONFIG, DIR and FILE filled in
  // (it gave `tfm sample --init-from FILE`, which sample refuses without --run).
  const std::string help = run_tfm("export --help").out;
  int loads = 0;
  for (size_t at = help.find("`tfm "); at != std::string::npos; at = help.find("`tfm ", at + 1)) {
    std::string command = help.substr(at + 1, help.find('`', at + 1) - at - 1);
    if (command.find("--init-from FILE") == std::string::npos) continue;
    ++loads;
    for (const auto& [word, value] :
         {std::pair<std::string, std::string>{"CONFIG", "configs/tiny.json"}, {"DIR", run}, {"FILE", st}})
      if (const size_t w = command.find(word); w != std::string::npos) command.replace(w, word.size(), value);
    const bool trains = command.rfind("tfm train ", 0) == 0;
    command += trains ? " --out " + tmp.path + "/from_help --set train.max_steps=1" : " --max-new-tokens 3";
    r = run_tfm(command.substr(4));
    INFO(command << "\n" << r.out);
    CHECK(r.status == 0);
  }
  CHECK(loads == 2);  // tfm train and tfm sample

  // A file named for the other format is refused before anything is written.
  for (const auto& [format, name] : {std::pair<std::string, std::string>{"gguf", "/m.safetensors"},
                                     std::pair<std::string, std::string>{"safetensors", "/m.gguf"}}) {
    r = run_tfm("export --run " + run + " --format " + format + " --out " + tmp.path + name);
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("is named for") && Catch::Contains("but --format " + format));
    CHECK_FALSE(std::filesystem::exists(tmp.path + name));
  }
  // The name chooses the format whatever its case: m.GGUF is GGUF.
  r = run_tfm("export --run " + run + " --out " + tmp.path + "/m.GGUF");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(tfm_test::read_file(tmp.path + "/m.GGUF").substr(0, 4) == "GGUF");

  // The project's own PyTorch reference (scripts/torch_lm.py) reads the export; only PyTorch may be missing.
  if (run_shell("/usr/bin/python3 -c 'import torch, numpy' >/dev/null").status == 0) {
    r = run_shell("/usr/bin/python3 scripts/torch_lm.py --config " + run +
                  "/config.json --load-safetensors " + st + " --check-logits " + tmp.path + "/a.json");
    INFO(r.out);
    REQUIRE(r.status == 0);
    const auto brace = r.out.rfind('{');
    REQUIRE(brace != std::string::npos);
    const double diff = nlohmann::json::parse(r.out.substr(brace)).at("max_abs_logit_diff").get<double>();
    CHECK(diff <= 1e-4);
  } else {
    WARN(
        "PyTorch missing (apt-get install python3-torch python3-numpy): skipped the scripts/torch_lm.py "
        "logit check");
  }
}

TEST_CASE("export: --init-from refuses a file whose tensors do not fit the model", "[export][cli]") {
  TempDir tmp("export_mismatch");
  const std::string run = tmp.path + "/run", st = tmp.path + "/model.safetensors";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=2").status == 0);
  REQUIRE(run_tfm("export --run " + run + " --out " + st).status == 0);
  // A wider model: the exported config names the key; without that metadata every tensor's shape
  // differs, and the error names the first one.
  CliRun r = run_tfm("train --config configs/tiny.json --out " + tmp.path +
                     "/wide --set model.d_model=64 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Contains(st + ": exported from a run with model.d_model = 32 and model.d_ff = 128, "
                                  "this run has 64 and 256"));
  const std::string plain = tmp.path + "/plain.safetensors";
  tfm::save_safetensors(plain, tfm::load_safetensors(st).tensors);
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path +
              "/wide --set model.d_model=64 --init-from " + plain);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("has shape") && Catch::Contains(plain));
  r = run_tfm("train --config configs/tiny.json --out " + tmp.path + "/missing --init-from " + tmp.path +
              "/nope.st");
  CHECK(r.status == 2);
}

TEST_CASE("export: --init-from takes a learned position table of another model.max_seq_len",
          "[export][cli]") {
  TempDir tmp("export_positions");
  const std::string run = tmp.path + "/run", st = tmp.path + "/model.safetensors";
  const std::string learned = "train --config configs/tiny.json --set model.positional_encoding=learned ";
  REQUIRE(run_tfm(learned + "--out " + run + " --set train.max_steps=2").status == 0);
  REQUIRE(run_tfm("export --run " + run + " --out " + st).status == 0);
  // A longer context (tiny.json's 32 -> 64) and a shorter one (16) both train from the file; only the
  // longer one has positions the file does not hold, and says so.
  CliRun r = run_tfm(learned + "--set model.max_seq_len=64 --out " + tmp.path +
                     "/long --set train.max_steps=1 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(st + ": its position table pos.weight holds 32 positions") &&
                        Catch::Contains("this model 64: positions 32 to 63 keep this model's own values"));
  r = run_tfm(learned + "--set model.max_seq_len=16 --set train.seq_len=16 --out " + tmp.path +
              "/short --set train.max_steps=1 --init-from " + st);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("position table"));
  // Row t is position t in both tables: the file's rows where the model has them, the model's own after.
  const tfm::LoadedRun loaded = tfm::load_run(run, "best");
  const std::vector<float> file = tfm::load_safetensors(st).at("pos.weight").to_vector();
  REQUIRE(file.size() == 32 * 32);
  for (const int64_t rows : {64, 16}) {
    INFO(rows);
    tfm::ModelConfig c = loaded.model->config();
    c.max_seq_len = rows;
    tfm::LanguageModel fresh(c, 7);
    const std::vector<float> before = fresh.find_parameter("pos.weight")->value.to_vector();
    const std::vector<std::string> notes = tfm::load_safetensors_into(fresh, st);
    CHECK(notes.size() == (rows > 32 ? 1u : 0u));
    const std::vector<float> after = fresh.find_parameter("pos.weight")->value.to_vector();
    REQUIRE(after.size() == static_cast<size_t>(rows * 32));
    const size_t shared = static_cast<size_t>(std::min<int64_t>(rows, 32) * 32);
    CHECK(std::vector<float>(after.begin(), after.begin() + shared) ==
          std::vector<float>(file.begin(), file.begin() + shared));
    CHECK(std::vector<float>(after.begin() + shared, after.end()) ==
          std::vector<float>(before.begin() + shared, before.end()));
    // Every other tensor is the file's as it is.
    CHECK(fresh.find_parameter("emb.weight")->value.to_vector() ==
          loaded.model->find_parameter("emb.weight")->value.to_vector());
  }
}

TEST_CASE("attention: json, npy (H, T, T) per layer, summary lines, text checks", "[attention][cli]") {
  TempDir tmp("export_attention");
  const std::string run = tmp.path + "/run", out = tmp.path + "/att";
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=2").status == 0);
  CliRun r = run_tfm("attention --run " + run + " --text 'ROMEO: hi' --out " + out + " --no-plot");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("layer 0: mean head similarity rho = ") && Catch::Contains("layer 1: "));
  const nlohmann::json rep = read_json(out + "/attention.json");
  CHECK(rep.at("tokens").size() == 9);
  CHECK(rep.at("tokens")[0] == "R");
  CHECK(rep.at("layers").size() == 2);
  // .npy: magic, version 1.0, 64-byte aligned header, then 4 * 9 * 9 float32 whose rows sum to 1.
  std::ifstream in(out + "/attention_layer1.npy", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const size_t header = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  CHECK((10 + header) % 64 == 0);
  CHECK_THAT(bytes.substr(10, header), Catch::Contains("'shape': (4, 9, 9)") && Catch::Contains("'<f4'"));
  REQUIRE(bytes.size() == 10 + header + 4 * 9 * 9 * sizeof(float));
  const float* p = reinterpret_cast<const float*>(bytes.data() + 10 + header);
  double row = 0.0;
  for (int k = 0; k < 9; ++k) row += p[4 * 9 + k];  // head 0, query 4
  CHECK(row == Approx(1.0).margin(1e-5));
  CHECK(p[5] == 0.0f);  // causal: query 0 sees key 0 only

  // Unknown symbol and a text longer than the context: status 2 naming --text.
  r = run_tfm("attention --run " + run + " --text '\xe2\x82\xac' --no-plot --out " + out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text"));
  r = run_tfm("attention --run " + run + " --text '" + std::string(40, 'a') + "' --no-plot --out " + out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--text") && Catch::Contains("max_seq_len"));
}

TEST_CASE("export: the document separator's id in the safetensors metadata and as GGUF's end of text",
          "[export][cli]") {
  TempDir tmp("export_separator");
  const std::string sep_run = tmp.path + "/sep", plain_run = tmp.path + "/plain";
  // Two documents (the two halves of the text): a multi-document corpus gets the separator.
  const std::string text =
      tfm_test::read_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt");
  std::filesystem::create_directories(tmp.path + "/docs");
  std::ofstream(tmp.path + "/docs/a.txt") << text.substr(0, text.size() / 2);
  std::ofstream(tmp.path + "/docs/b.txt") << text.substr(text.size() / 2);
  REQUIRE(run_tfm("train --config configs/tiny.json --out " + sep_run +
                  " --set train.max_steps=2 --set data.path=" + tmp.path + "/docs")
              .status == 0);
  REQUIRE(
      run_tfm("train --config configs/tiny.json --out " + plain_run + " --set train.max_steps=2").status ==
      0);
  REQUIRE(run_tfm("export --run " + sep_run + " --out " + tmp.path + "/sep.safetensors").status == 0);
  REQUIRE(run_tfm("export --run " + plain_run + " --out " + tmp.path + "/plain.safetensors").status == 0);
  const tfm::SafetensorsFile st = tfm::load_safetensors(tmp.path + "/sep.safetensors");
  const tfm::SafetensorsFile plain = tfm::load_safetensors(tmp.path + "/plain.safetensors");
  const auto vocab_of = [](const tfm::SafetensorsFile& f) {
    return tfm::Tokenizer::from_json(nlohmann::json::parse(f.metadata.at("tokenizer")));
  };
  const int64_t V = vocab_of(st).size();
  REQUIRE(V == vocab_of(plain).size() + 1);  // the separator is the last id
  REQUIRE(vocab_of(st).end_of_text_id() == V - 1);
  CHECK(st.metadata.at("end_of_text_id") == std::to_string(V - 1));
  CHECK(plain.metadata.count("end_of_text_id") == 0);

  const std::string gguf = tmp.path + "/sep.gguf";
  const CliRun r = run_tfm("export --run " + sep_run + " --format gguf --out " + gguf);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("document separator"));
  const tfm::GgufFile f = tfm::load_gguf(gguf);
  CHECK(f.at("tokenizer.ggml.eos_token_id").unsigned_value() == static_cast<uint64_t>(V - 1));
  CHECK(f.at("tokenizer.ggml.tokens").items()[static_cast<size_t>(V - 1)].str() == "<|endoftext|>");
}
