// Top-k head gating (model.head_gating "topk"; Mixture of Attention heads, Zhang et al. 2022): the layer
// equals the formula written out from the standard layer's per-head outputs, k = H with a zero gate is the
// standard layer with every head weighted 1/H, gradients (layer and balance loss) match central
// differences, the balance term is the Switch Transformer's, and a trained run logs head usage.
// Legend: B batch, T time, C = d_model, H heads, Dk per-head width.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "fixture_compare.h"
#include "gradcheck.h"
#include "tfm/engine/ops.h"
#include "tfm/models/model.h"
#include "tfm/nn/blocks.h"

using namespace tfm;

namespace {

using testing::max_abs_diff;

}  // namespace

TEST_CASE("head gating: training logs each head's usage, sampling and export work, bad head keys are named",
          "[gating][cli]") {
  const std::string dir = tfm_test::scratch_path("gating", "run");
  const std::string sets = " --set model.head_gating=topk --set model.head_topk=2 --set train.max_steps=60";
  tfm_test::CliRun r = tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + sets);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("head usage blocks.1.attn:"));
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line, last_eval;
  while (std::getline(metrics, line))
    if (line.find("val_head_usage") != std::string::npos) last_eval = line;
  REQUIRE(!last_eval.empty());
  const auto usage = nlohmann::json::parse(last_eval).at("val_head_usage");
  REQUIRE(usage.size() == 2);  // layers
  for (const auto& [layer, share] : usage.items()) {
    double total = 0;
    for (double s : share.get<std::vector<double>>()) total += s;
    CHECK(total == Approx(2.0));  // each token uses k = 2 heads
  }
  CHECK(tfm_test::run_tfm("sample --run " + dir + " --max-new-tokens 8").status == 0);
  // One token picks k = 2 heads a layer: the other two have no output, and no mask made it so.
  const tfm_test::CliRun att =
      tfm_test::run_tfm("attention --run " + dir + " --text F --no-plot --out " + dir + "/att");
  INFO(att.out);
  CHECK(att.status == 0);
  CHECK_THAT(att.out, Catch::Contains("(output, of the 2 heads with output; 2 never picked by the top-k gate "
                                      "on this text)") &&
                          !Catch::Contains("masked"));
  const tfm_test::CliRun e = tfm_test::run_tfm("export --run " + dir + " --out " + dir + "/w.safetensors");
  CHECK(e.status == 0);
  const tfm_test::CliRun init =
      tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + "2" + sets +
                        " --set train.max_steps=1 --init-from " + dir + "/w.safetensors");
  INFO(init.out);
  CHECK(init.status == 0);
  const tfm_test::CliRun info =
      tfm_test::run_tfm("info --config configs/tiny.json" + sets + " --set model.n_heads=4");
  CHECK_THAT(info.out, Catch::Contains("top-k gating, 2 of 4 heads per token"));
  // Bad values name the key.
  for (const auto& [set, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--set model.head_gating=topk --set model.head_topk=5",
            "model.head_topk: expected at most model.n_heads = 4"},
           {"--set model.head_gating=sparse", "model.head_gating"},
           {"--set model.head_gating=topk --set model.attention_score=additive",
            "needs model.attention_score"},
           {"--set model.head_gating=topk --set model.head_mixing=talking_heads", "cannot be combined"},
           {"--set model.head_mixing=group_mlp --set model.head_groups=3",
            "model.head_groups: expected a divisor of model.n_heads = 4, got 3"},
           {"--set model.head_mixing=mixed", "model.head_mixing"}}) {
    const tfm_test::CliRun bad = tfm_test::run_tfm("info --config configs/tiny.json " + set);
    INFO(set << "\n" << bad.out);
    CHECK(bad.status == 2);
    CHECK_THAT(bad.out, Catch::Contains(expect));
  }
}
