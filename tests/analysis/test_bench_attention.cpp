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
