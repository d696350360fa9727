// The README documents every config key from the code's own table, so the two cannot drift:
// this fails when README.md's table differs from `tfm config --keys` (fix: scripts/update_readme_keys.sh).
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  REQUIRE(pclose(p) == 0);
  return out;
}
}  // namespace

TEST_CASE("readme: the config key table matches tfm config --keys", "[readme]") {
  const std::string keys = run(std::string(TFM_BINARY) + " config --keys");
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
