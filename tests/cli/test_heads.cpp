// Head gates and masks (MultiHeadAttention::head_gate, tfm heads, --mask-heads; docs/heads.md): a gate of
// ones changes nothing, a gate of 0 equals zeroing the head's columns of Wo (the composed form), the
// gate's gradient matches central differences, and the CLI reports importance and refuses bad masks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/engine/ops.h"
#include "tfm/models/model.h"

using namespace tfm;

TEST_CASE("heads: tfm heads ranks the heads, --mask-heads masks them, bad masks name the flag",
          "[heads][cli]") {
  const std::string dir = tfm_test::scratch_path("heads", "run");
  REQUIRE(tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + " --set train.max_steps=150")
              .status == 0);
  tfm_test::CliRun r = tfm_test::run_tfm("heads --run " + dir + " --batches 2 --json --no-plot");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const int64_t L = j.at("n_layers"), H = j.at("n_heads");
  REQUIRE(static_cast<int64_t>(j.at("layers").size()) == L);
  for (const auto& layer : j.at("layers")) {
    CHECK(layer.at("layer") == &layer - &j.at("layers")[0]);
    CHECK(static_cast<int64_t>(layer.at("loss_change_when_masked").size()) == H);
    double norm = 0;
    for (double s : layer.at("normalized_score").get<std::vector<double>>()) norm += s * s;
    CHECK(norm == Approx(1.0).epsilon(1e-6));
    CHECK(static_cast<int64_t>(layer.at("ranking").size()) == H);
  }
  const auto& curve = j.at("pruning");
  // 2 layers of 4 heads: 0 to 7 masked, each count once (30% and 80% round to 20%'s and 70%'s).
  REQUIRE(L * H == 8);
  REQUIRE(curve.size() == 8);
  CHECK(curve[0].at("val_loss").get<double>() == Approx(j.at("val_loss").get<double>()));
  for (size_t i = 0; i < curve.size(); ++i) CHECK(curve[i].at("masked") == i);
  CHECK(curve[7].at("percent") == 90);
  // Each point names its heads as --mask-heads takes them: as many as it masks, and eval accepts them.
  CHECK(curve[0].at("mask_heads") == "");
  const std::string ninety = curve[7].at("mask_heads");
  CHECK(std::count(ninety.begin(), ninety.end(), ':') == curve[7].at("masked").get<int64_t>());
  CHECK(tfm_test::run_tfm("eval --run " + dir + " --batches 1 --mask-heads " + ninety).status == 0);

  const tfm_test::CliRun plain = tfm_test::run_tfm("eval --run " + dir + " --batches 2");
  const tfm_test::CliRun masked =
      tfm_test::run_tfm("eval --run " + dir + " --batches 2 --mask-heads 0:0,0:1,0:2,0:3,1:0,1:1,1:2,1:3");
  REQUIRE(plain.status == 0);
  REQUIRE(masked.status == 0);
  CHECK(plain.out != masked.out);
  CHECK_THAT(masked.out, Catch::Contains(", heads masked 0:0,0:1,0:2,0:3,1:0,1:1,1:2,1:3)"));
  CHECK_THAT(plain.out, !Catch::Contains("heads masked"));
  CHECK(tfm_test::run_tfm("sample --run " + dir + " --max-new-tokens 5 --mask-heads 1:0").status == 0);
  // A masked head's similarities are not defined: left out of the mean, null in the report, which names
  // the mask.
  tfm_test::CliRun att = tfm_test::run_tfm(
      "attention --run " + dir + " --text \"First\" --no-plot --mask-heads 0:1 --out " + dir + "/att");
  INFO(att.out);
  CHECK(att.status == 0);
  CHECK_THAT(att.out, Catch::Contains("(output, of the 3 heads with output; 1 masked)") &&
                          Catch::Contains("layer 1: mean head similarity rho = ") && !Catch::Contains("nan"));
  const auto maps = nlohmann::json::parse(tfm_test::read_file(dir + "/att/attention.json"));
  CHECK(maps.at("mask_heads") == "0:1");
  for (const auto& rho : maps.at("layers").at(0).at("output_similarity").at(1)) CHECK(rho.is_null());
  CHECK(maps.at("layers").at(0).at("output_similarity").at(0).at(2).is_number());
  att = tfm_test::run_tfm("attention --run " + dir +
                          " --text \"First\" --no-plot --mask-heads 0:0,0:1,0:2,0:3 " + "--out " + dir +
                          "/att");
  CHECK(att.status == 0);
  CHECK_THAT(att.out,
             Catch::Contains(
                 "layer 0: mean head similarity rho = n/a (output, of the 0 heads with output; 4 masked)"));
  struct Case {
    std::string mask, expect;
  };
  for (const Case& c : {Case{"9:0", "--mask-heads: layer 9 in \"9:0\" is out of range [0, "},
                        Case{"0:7", "--mask-heads: head 7 in \"0:7\" is out of range [0, "},
                        Case{"x", "--mask-heads: expected LAYER:HEAD"}, Case{"1:", "--mask-heads: expected"},
                        Case{"0:1,", "--mask-heads: expected"}}) {
    r = tfm_test::run_tfm("eval --run " + dir + " --batches 1 --mask-heads " + c.mask);
    INFO(c.mask << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(c.expect));
  }
}
