// tfm sweep (docs/heads.md): every grid point trained once with the same seed, one directory each, a
// stopped or extended sweep continued rather than restarted, sweep.jsonl with each point's cost and
// val loss, and bad grids refused before anything trains.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("sweep: trains each point once, continues a stopped sweep, writes sweep.jsonl", "[sweep][cli]") {
  const std::string out = tfm_test::scratch_path("sweep", "grid");
  // A record a step: 4 of them per point in the end, an even count (see the ms/step check below).
  const std::string base = "sweep --config configs/tiny.json --no-plot --out " + out +
                           " --set train.log_interval=1 --grid model.n_kv_heads=4,1 --grid "
                           "model.attention_score=dot,additive";
  tfm_test::CliRun r = tfm_test::run_tfm(base + " --set train.max_steps=2 --set train.eval_interval=2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  auto points = read_jsonl(out + "/sweep.jsonl");
  REQUIRE(points.size() == 4);
  CHECK(points[0].at("model.n_kv_heads") == 4);
  CHECK(points[1].at("model.attention_score") == "additive");
  CHECK(points[2].at("model.n_kv_heads") == 1);
  // K and V of 2 layers in float32: 2 * 2 * Hkv * Dk * 4 bytes (Dk = 32 / 4).
  CHECK(points[0].at("kv_cache_bytes_per_token") == 2 * 2 * 4 * 8 * 4);
  CHECK(points[2].at("kv_cache_bytes_per_token") == 2 * 2 * 1 * 8 * 4);
  CHECK(points[2].at("parameters").get<int64_t>() <
        points[0].at("parameters").get<int64_t>());  // fewer Wk, Wv rows
  for (const auto& p : points) {
    CHECK(p.at("step") == 2);
    CHECK(std::isfinite(p.at("val_loss").get<double>()));
    CHECK(p.at("train_flops_per_token").get<double>() > 0);
    CHECK(std::filesystem::exists(p.at("dir").get<std::string>() + "/last.ckpt"));
  }

  // The same command again trains nothing; a longer one continues every point from step 2.
  r = tfm_test::run_tfm(base + " --set train.max_steps=2 --set train.eval_interval=2");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("sweep: 1/4"));
  r = tfm_test::run_tfm(base + " --set train.max_steps=4 --set train.eval_interval=2");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("continuing after step 2"));
  points = read_jsonl(out + "/sweep.jsonl");
  REQUIRE(points.size() == 4);
  for (const auto& p : points) {
    CHECK(p.at("step") == 4);
    // ms/step and tokens/s of one record (the median by ms/step): their product is a step's 8 x 32 tokens.
    CHECK(p.at("tokens_per_s").get<double>() * p.at("ms_per_step").get<double>() / 1000.0 ==
          Approx(8 * 32).epsilon(1e-3));
  }

  // Points trained with other settings are neither continued nor taken as this sweep's results: a
  // key training may not change, and points already past this sweep's max_steps, are refused by name.
  r = tfm_test::run_tfm(base +
                        " --set train.max_steps=4 --set train.eval_interval=2 --set train.optimizer.lr=0.01");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(
                        "--grid point model.n_kv_heads=4,model.attention_score=dot: train.optimizer.lr: ") &&
                        Catch::Contains("give another --out"));
  r = tfm_test::run_tfm(base + " --set train.max_steps=3 --set train.eval_interval=2");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("was trained to step 4, past this sweep's train.max_steps 3"));
  CHECK(read_jsonl(out + "/sweep.jsonl").size() == 4);  // the results of the last good sweep stay
}

TEST_CASE("sweep: time to quality per point (target loss, time budget), stopped points count as done",
          "[sweep][cli]") {
  const std::string out = tfm_test::scratch_path("sweep", "target");
  // A target every evaluation reaches (the first at step 2) and one none does (a loss below 0 is
  // impossible, so a tiny positive target stands in); the budget of 1e-9 s stops a point after a step.
  const std::string base =
      "sweep --config configs/tiny.json --no-plot --out " + out +
      " --set train.max_steps=6 --set train.eval_interval=2 --grid train.target_loss=100,1e-6";
  tfm_test::CliRun r = tfm_test::run_tfm(base);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("| s to target |"));
  auto points = read_jsonl(out + "/sweep.jsonl");
  REQUIRE(points.size() == 2);
  CHECK(points[0].at("stopped") == "target_loss");
  CHECK(points[0].at("step") == 2);
  CHECK(points[0].at("seconds_to_target").get<double>() > 0);
  CHECK(points[0].at("seconds_to_target").get<double>() <= points[0].at("training_s").get<double>());
  CHECK(points[1].at("stopped") == "max_steps");
  CHECK(points[1].at("step") == 6);
  CHECK(points[1].at("seconds_to_target").is_null());
  CHECK(points[1].at("best_val_loss").get<double>() <= points[1].at("val_loss").get<double>());
  // Run again: the point that stopped at its target is done, not trained on.
  r = tfm_test::run_tfm(base);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, !Catch::Contains("sweep: 1/2"));

  const std::string timed = tfm_test::scratch_path("sweep", "budget");
  r = tfm_test::run_tfm("sweep --config configs/tiny.json --no-plot --out " + timed +
                        " --set train.max_steps=6 --set train.max_seconds=1e-9 --grid model.dropout=0,0.1");
  REQUIRE(r.status == 0);
  points = read_jsonl(timed + "/sweep.jsonl");
  REQUIRE(points.size() == 2);
  for (const auto& p : points) {
    CHECK(p.at("stopped") == "max_seconds");
    CHECK(p.at("step") == 1);
    CHECK(std::isfinite(p.at("val_loss").get<double>()));
    CHECK_FALSE(p.contains("seconds_to_target"));
  }
}

TEST_CASE("sweep: a bad grid is refused before anything trains", "[sweep][cli]") {
  const std::string out = tfm_test::scratch_path("sweep", "bad");
  struct Case {
    std::string grid, expect;
  };
  for (const Case& c : {Case{"model.nope=1,2", "--grid: model.nope is not a config key"},
                        Case{"model.n_heads", "--grid: expected KEY=V1,V2,..."},
                        Case{"model.n_heads=4,,8", "--grid: an empty value"},
                        Case{"model.n_heads=4,3", "--grid point model.n_heads=3: "}}) {
    const tfm_test::CliRun r =
        tfm_test::run_tfm("sweep --config configs/tiny.json --no-plot --out " + out + " --grid " + c.grid);
    INFO(c.grid << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(c.expect));
    CHECK(!std::filesystem::exists(out + "/model.n_heads=4"));
  }
}

TEST_CASE("sweep: a diverging point is recorded as failed, the others train on, exit status 3",
          "[sweep][cli]") {
  const std::string out = tfm_test::scratch_path("sweep", "diverged");
  // lr 1e6 without clipping: the gradient of the embedding is not finite at step 2. It comes first, so
  // the point after it shows the sweep going on.
  const std::string base = "sweep --config configs/tiny.json --out " + out +
                           " --set train.eval_interval=2 --set train.grad_clip=0 --grid "
                           "train.optimizer.lr=1e6,0.003";
  tfm_test::CliRun r = tfm_test::run_tfm(base + " --set train.max_steps=4");
  INFO(r.out);
  CHECK(r.status == 3);
  CHECK_THAT(r.out, !Catch::Contains("internal error"));
  CHECK_THAT(r.out, Catch::Contains(" (diverged at step 2) |"));
  // Said when it happens, before the next point trains.
  const size_t said = r.out.find("sweep: 1/2 train.optimizer.lr=1e6: diverged at step 2: the gradient of ");
  CHECK(said != std::string::npos);
  CHECK(said < r.out.find("sweep: 2/2 train.optimizer.lr=0.003: training"));
  CHECK_THAT(r.out, Catch::Contains("| 1000000 |") && Catch::Contains("| 0.003 |"));  // not "1000000.0"
  CHECK_THAT(r.out, Catch::Contains("is not finite"));
  auto points = read_jsonl(out + "/sweep.jsonl");
  REQUIRE(points.size() == 2);
  CHECK(points[0].at("stopped") == "diverged");
  CHECK(points[0].at("failed_at_step").get<int64_t>() == points[0].at("step").get<int64_t>() + 1);
  CHECK_THAT(points[0].at("error").get<std::string>(), Catch::Contains("is not finite"));
  CHECK(points[0].at("val_loss").is_null());
  CHECK(points[1].at("stopped") == "max_steps");
  CHECK(points[1].at("step") == 4);
  CHECK(std::isfinite(points[1].at("val_loss").get<double>()));
  // The figure marks it on both panels and counts it in the title.
  const std::string svg = tfm_test::read_file(out + "/sweep.svg");
  CHECK_THAT(svg, Catch::Contains("2 points, 1 diverged"));
  CHECK_THAT(svg, Catch::Contains("<g class=\"missing\" data-name=\"diverged at step "));
  // Drawn again from sweep.jsonl: the failure's fields are not taken for a swept key.
  r = tfm_test::run_tfm("plot report " + out + "/sweep.jsonl --out " + out + "/again");
  CHECK(r.status == 0);
  CHECK_THAT(tfm_test::read_file(out + "/again/sweep.svg"), Catch::Contains(">train.optimizer.lr</text>"));

  // Run again: the failed point is a result, not trained anew; a longer sweep (a key a resume may
  // change) trains it anew, since it saved no checkpoint to continue from, and it fails the same way.
  r = tfm_test::run_tfm(base + " --set train.max_steps=4");
  CHECK(r.status == 3);
  CHECK_THAT(r.out, !Catch::Contains("sweep: 1/2"));
  r = tfm_test::run_tfm(base + " --set train.max_steps=6");
  INFO(r.out);
  CHECK(r.status == 3);
  CHECK_THAT(r.out, Catch::Contains("sweep: 1/2 train.optimizer.lr=1e6: training"));
  points = read_jsonl(out + "/sweep.jsonl");
  REQUIRE(points.size() == 2);
  CHECK(points[0].at("stopped") == "diverged");
  CHECK(points[1].at("step") == 6);
  // Other settings a resume may not take are refused by name, as for any point.
  r = tfm_test::run_tfm(base + " --set train.max_steps=6 --set model.d_ff=64 --no-plot");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--grid point train.optimizer.lr=1e6: model.d_ff: "));
}

TEST_CASE("sweep: what training refuses for one point names the point", "[sweep][cli]") {
  const std::string out = tfm_test::scratch_path("sweep", "refused");
  const tfm_test::CliRun r = tfm_test::run_tfm("sweep --config configs/tiny.json --no-plot --out " + out +
                                               " --set train.max_steps=2 --grid train.batch_size=100000000");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--grid point train.batch_size=100000000: train.batch_size = 100000000"));
}

TEST_CASE("sweep: by default each grid of a config has its own directory, named for the swept keys",
          "[sweep][cli]") {
  tfm_test::TempDir tmp("sweep_default_out");
  // From a directory of the user's: runs/ is made there.
  const auto sweep = [&](const std::string& grid) {
    return tfm_test::run_shell("cd '" + tmp.path + "' && " + tfm_test::tfm_command() + " sweep --config '" +
                               TFM_SOURCE_DIR + "/configs/tiny.json' --set 'data.path=" + TFM_SOURCE_DIR +
                               "/tests/data/tiny_shakespeare.txt' --set train.max_steps=1 --no-plot " + grid);
  };
  tfm_test::CliRun r = sweep("--grid model.n_heads=2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  r = sweep("--grid model.n_kv_heads=1 --grid train.optimizer.lr=0.01");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(read_jsonl(tmp.path + "/runs/sweep_tiny_n_heads/sweep.jsonl").size() == 1);
  CHECK(read_jsonl(tmp.path + "/runs/sweep_tiny_n_kv_heads_lr/sweep.jsonl").size() == 1);
}
