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

TEST_CASE("bench attention: the least-squares exponent of a power law", "[bench]") {
  std::vector<double> x = {64, 128, 256, 512}, y;
  for (double v : x) y.push_back(3.0 * std::pow(v, 1.7));
  CHECK(fitted_exponent(x, y) == Approx(1.7).epsilon(1e-9));
  y = {1, 1, 1, 1};
  CHECK(fitted_exponent(x, y) == Approx(0.0).margin(1e-12));
  CHECK_THROWS_WITH(fitted_exponent({1.0}, {2.0}), Catch::Contains("two or more"));
  CHECK_THROWS_WITH(fitted_exponent({1.0, 2.0}, {1.0, 0.0}), Catch::Contains("positive"));
}

TEST_CASE("bench attention: a causal pass counts the (query, key) pairs it computes", "[bench]") {
  ModelConfig c;
  c.d_model = 16, c.n_heads = 2;
  for (const double n : {1.0, 8.0, 64.0, 4096.0}) {
    const int64_t B = 2, T = static_cast<int64_t>(n);
    // Forward: the four projections 2 B n C (4 C), the scores and weighted sum 4 B C per pair; x 3.
    const double projections = 2.0 * B * n * 16 * 64;
    CHECK(attention_pass_flops(c, false, B, T) == Approx(3.0 * (projections + 4.0 * B * 16 * n * n)));
    CHECK(attention_pass_flops(c, true, B, T) ==
          Approx(3.0 * (projections + 4.0 * B * 16 * n * (n + 1) / 2)));
  }
  // Grouped-query K/V: fewer projection FLOPs, the same pairs.
  c.n_kv_heads = 1;
  CHECK(attention_pass_flops(c, true, 1, 8) ==
        Approx(3.0 * (2.0 * 8 * 16 * (16 + 8 + 8 + 16) + 4.0 * 16 * 8 * 9 / 2)));
}
