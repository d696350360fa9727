// Catch2's runner, and one setting for every test binary: the trainings the tests start keep the GEMM
// peak they time (engine/gemm_timing.h) in the build tree's test-cache/, not in the user's
// ~/.cache/tfm, where a figure timed under the suite's load would understate their own runs' peak.
// The child processes (tfm, scripts) inherit it; test_reliability sets its own.
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

int main(int argc, char* argv[]) {
  const std::string cache = std::filesystem::canonical("/proc/self/exe").parent_path() / "test-cache";
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  return Catch::Session().run(argc, argv);
}
