// Catch2's runner, and two settings for every test binary, which the child processes (tfm, scripts)
// inherit:
// - the trainings the tests start quote MFU against a given peak (TFM_MFU_PEAK, engine/gemm_timing.h)
//   instead of timing one: the suite's own load spoils nearly every timing, which is then not kept, so
//   each training timed it again (0.3 s apiece, serialised by the cache's lock: test_train took 19 s
//   instead of 6). No test reads the figure; test_reliability's peak test clears it, to time and cache;
// - whatever is cached (the tokenizations, that test's peaks) goes in the build tree's test-cache/, not
//   the user's ~/.cache/tfm.
#define CATCH_CONFIG_RUNNER
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

int main(int argc, char* argv[]) {
  const std::string cache = std::filesystem::canonical("/proc/self/exe").parent_path() / "test-cache";
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  ::setenv("TFM_MFU_PEAK", "100", 1);
  return Catch::Session().run(argc, argv);
}
