// Head mixing (docs/heads.md): talking-heads attention and group_mlp's grouped mixing with an MLP output.
// Identity mixing gives the standard layer; gradient checks of every variant with random mixing;
// the PyTorch fixtures of scripts/dev/make_fixtures.py (head_mixing_fixture); KV-cached decoding equal to
// the full forward (language model and encoder-decoder); initialisation, weight decay, parameter and
// FLOP counts; and through the CLI: tfm info's count, export + reload, tfm gradcheck.
// Legend: B batch, T time (Tq, Tk), C = d_model, H heads, Hkv kv heads, g groups, n = H / g.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "fixture_compare.h"
#include "gradcheck.h"
#include "tfm/config/config.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/safetensors.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_dir.h"

using namespace tfm;

namespace {

using testing::max_abs_diff;

// Largest |a - b| over two equally nested JSON arrays of numbers.
double json_max_diff(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number()) return std::fabs(a.get<double>() - b.get<double>());
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, json_max_diff(a[i], b[i]));
  return m;
}

}  // namespace

TEST_CASE("head mixing: tfm info prints the model's parameter count", "[head_mixing][cli]") {
  for (const char* mixing : {"talking_heads", "group_mlp"}) {
    const std::string set = std::string("--set model.head_mixing=") + mixing;
    const tfm_test::CliRun r = tfm_test::run_tfm("info --config configs/tiny.json " + set);
    INFO(r.out);
    REQUIRE(r.status == 0);
    const tfm_test::CliRun j = tfm_test::run_tfm("info --config configs/tiny.json --json " + set);
    REQUIRE(j.status == 0);
    const nlohmann::json info = nlohmann::json::parse(j.out.substr(j.out.find('{')));
    const Config config = load_config(std::string(TFM_SOURCE_DIR) + "/configs/tiny.json",
                                      {std::string("model.head_mixing=") + mixing});
    const LanguageModel model(config.model(info.at("vocab_size").get<int64_t>()), 0);
    CHECK(name_of(model.config().head_mixing) == mixing);
    CHECK_THAT(r.out, Catch::Contains("parameters: " + std::to_string(model.parameter_count()) + " "));
    CHECK(info.at("parameters").get<int64_t>() == model.parameter_count());
  }
}

TEST_CASE("head mixing: export and reload give the same logits", "[head_mixing][export][cli]") {
  tfm_test::TempDir tmp("head_mixing_export");
  const std::string run = tmp.path + "/run", st = tmp.path + "/model.safetensors";
  const std::string set = " --set model.head_mixing=group_mlp --set model.head_groups=2";
  tfm_test::CliRun r =
      tfm_test::run_tfm("train --config configs/tiny.json --out " + run + " --set train.max_steps=5" + set);
  INFO(r.out);
  REQUIRE(r.status == 0);
  r = tfm_test::run_tfm("export --run " + run + " --out " + st);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const LoadedRun loaded = load_run(run, "last");
  const SafetensorsFile f = load_safetensors(st);
  REQUIRE(f.tensors.size() == loaded.model->parameters().size());
  CHECK(f.contains("blocks.0.attn.mix_logits"));
  CHECK(f.contains("blocks.1.attn.out_mlp.fc1.weight"));
  for (const auto& p : loaded.model->parameters()) {
    INFO(p.name);
    REQUIRE(f.contains(p.name));
    CHECK(f.at(p.name).to_vector() == p.value.to_vector());
  }
  // Five steps moved the mixing off the identity: the export carries trained values.
  const std::vector<float> mix = f.at("blocks.0.attn.mix_logits").to_vector();
  CHECK(std::fabs(mix[0] - 1.0f) > 0.0f);
  LanguageModel fresh(loaded.model->config(), 7);
  load_safetensors_into(fresh, st);
  CHECK(fresh.flat_values().to_vector() == loaded.model->flat_values().to_vector());

  // A new run from the file (one step at lr 1e-9) evaluates to the same logits.
  r = tfm_test::run_tfm("eval --run " + run + " --dump-logits " + tmp.path + "/a.json --batches 2");
  REQUIRE(r.status == 0);
  const std::string run2 = tmp.path + "/run2";
  r = tfm_test::run_tfm(
      "train --config configs/tiny.json --out " + run2 + set +
      " --set train.max_steps=1 --set train.optimizer.lr=1e-9 --set train.lr_schedule.min_lr=1e-9"
      " --set train.lr_schedule.warmup_steps=0 --init-from " +
      st);
  INFO(r.out);
  REQUIRE(r.status == 0);
  r = tfm_test::run_tfm("eval --run " + run2 + " --dump-logits " + tmp.path + "/b.json --batches 2");
  REQUIRE(r.status == 0);
  const nlohmann::json a = nlohmann::json::parse(tfm_test::read_file(tmp.path + "/a.json"));
  const nlohmann::json b = nlohmann::json::parse(tfm_test::read_file(tmp.path + "/b.json"));
  CHECK(a.at("tokens") == b.at("tokens"));
  CHECK(json_max_diff(a.at("logits"), b.at("logits")) < 1e-5);
}
