// Replays the committed fuzz corpora and every input that once crashed a fuzzer through the same
// targets libFuzzer runs, in the normal (and sanitizer) build: a regression test per target.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz/targets.h"

namespace fs = std::filesystem;

// Runs every file of tests/fuzz/{corpus,regressions}/<dir>/ through target `target`.
static void replay(const std::string& dir_name, const std::string& target) {
  int files = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(TFM_SOURCE_DIR) / "tests" / "fuzz" / kind / dir_name;
    if (!fs::exists(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      INFO("input " << entry.path().string());
      bool known = false;
      REQUIRE_NOTHROW(known = tfm::fuzz::run(target, bytes.data(), bytes.size()));
      REQUIRE(known);
      ++files;
    }
  }
  CHECK(files > 0);  // a target without a corpus is a gap, not a pass
}

static void replay(const std::string& target) {
  replay(target, target);
}

TEST_CASE("fuzz corpus: config", "[fuzz]") {
  replay("config");
}
TEST_CASE("fuzz corpus: utf8", "[fuzz]") {
  replay("utf8");
}
TEST_CASE("fuzz corpus: safetensors", "[fuzz]") {
  replay("safetensors");
}
// With the CRC re-stamped (as the fuzzer runs it) and as given (the checksum check itself).
TEST_CASE("fuzz corpus: checkpoint", "[fuzz]") {
  replay("checkpoint");
}
TEST_CASE("fuzz corpus: checkpoint as given", "[fuzz]") {
  replay("checkpoint", "checkpoint_raw");
}
TEST_CASE("fuzz corpus: bpe", "[fuzz]") {
  replay("bpe");
}
TEST_CASE("fuzz corpus: gguf", "[fuzz]") {
  replay("gguf");
}
