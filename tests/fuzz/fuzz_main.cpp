// libFuzzer entry point, compiled once per target with -DTFM_FUZZ_TARGET="name" (see CMakeLists.txt).
#include "targets.h"
#include "tfm/engine/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::run(TFM_FUZZ_TARGET, data, size);
  tfm::memory::trim();  // return pooled blocks, so the pool does not grow over millions of runs
  return 0;
}
