// tfm bench attention (docs/heads.md, the cost of attention): the exponent fit, the report's figures from
// the formulas, and its errors. Times are never asserted on.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/analysis/bench.h"

using namespace tfm;

TEST_CASE("bench attention: the report holds the formulas' figures for each length", "[bench][cli]") {
  const tfm_test::CliRun r = tfm_test::run_tfm(
      "bench attention --seq-lens 8,16,32,64 --d-model 16 --heads 2 --batch 2 --seconds 0.001 --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  REQUIRE(j.at("lengths").size() == 4);
  for (const auto& l : j.at("lengths")) {
    const double n = l.at("n").get<double>();
    // forward = 2 B n C (2C + 2 C) + 4 B n^2 C; training = 3 x forward; B H n^2 floats.
    CHECK(l.at("flops").get<double>() == Approx(3.0 * (2.0 * 2 * n * 16 * 64 + 4.0 * 2 * n * n * 16)));
    CHECK(l.at("attention_matrix_bytes").get<double>() == Approx(4.0 * 2 * 2 * n * n));
    CHECK(l.at("ms").get<double>() > 0.0);
    CHECK(l.at("peak_bytes").get<double>() > 0.0);
  }
  CHECK(j.at("matrix_exponent").get<double>() == Approx(2.0));
  CHECK(j.at("flops_exponent").get<double>() > 1.0);
  CHECK(j.at("flops_exponent").get<double>() < 2.0);
  CHECK(j.contains("time_exponent"));
  CHECK(j.contains("memory_exponent"));
}

TEST_CASE("bench attention --causal: FLOPs and GFLOP/s count the triangle a causal pass computes",
          "[bench][cli]") {
  const tfm_test::CliRun r = tfm_test::run_tfm(
      "bench attention --causal --seq-lens 8,16,32,64 --d-model 16 --heads 2 --batch 2 --seconds 0.001 "
      "--json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  CHECK(j.at("causal") == true);
  for (const auto& l : j.at("lengths")) {
    const double n = l.at("n").get<double>();
    // The scores and weighted sum over n (n + 1) / 2 pairs, not n^2 (which overstated GFLOP/s ~2x).
    CHECK(l.at("flops").get<double>() ==
          Approx(3.0 * (2.0 * 2 * n * 16 * 64 + 4.0 * 2 * n * (n + 1) / 2 * 16)));
    CHECK(l.at("gflops").get<double>() ==
          Approx(l.at("flops").get<double>() / (l.at("ms").get<double>() * 1e-3) / 1e9));
  }
  const tfm_test::CliRun text =
      tfm_test::run_tfm("bench attention --causal --seq-lens 8,16 --d-model 16 --heads 2 --seconds 0.001");
  CHECK_THAT(text.out, Catch::Contains("the n(n+1)/2 (query, key) pairs a causal pass computes"));
}

TEST_CASE("bench attention: bad values name the flag", "[bench][cli]") {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c :
       {Case{"--d-model 16 --heads 3", "--heads: 3 does not divide --d-model 16"},
        Case{"--seq-lens 16,8", "--seq-lens: expected increasing lengths"},
        Case{"--seq-lens 16", "--seq-lens: give two or more lengths"}, Case{"--seq-lens 0,8", "--seq-lens"},
        Case{"--heads 4 --kv-heads 3", "--kv-heads: 3 does not divide --heads 4"}}) {
    const tfm_test::CliRun r = tfm_test::run_tfm("bench attention --seconds 0.001 " + c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(c.expect));
  }
}
