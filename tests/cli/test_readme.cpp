// The README documents every config key from the code's own table, so the two cannot drift:
// this fails when README.md's table differs from `tfm config --keys` (fix: scripts/update_readme_keys.sh).
#include <catch2/catch.hpp>

#include "cli_run.h"

#include <fstream>
#include <sstream>
#include <string>


TEST_CASE("readme: the config key table matches tfm config --keys", "[readme]") {
  const tfm_test::CliRun r = tfm_test::run_tfm("config --keys");
  REQUIRE(r.status == 0);
  const std::string& keys = r.out;
  std::ifstream in(std::string(TFM_SOURCE_DIR) + "/README.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const std::string begin = "<!-- keys:begin -->\n", end = "<!-- keys:end -->";
  const size_t b = readme.find(begin), e = readme.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  const std::string table = readme.substr(b + begin.size(), e - b - begin.size());
  INFO("README.md's key table is out of date: run scripts/update_readme_keys.sh");
  CHECK(table == keys);
  CHECK(keys.find("`model.d_model`") != std::string::npos);
}
