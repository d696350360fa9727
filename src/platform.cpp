#include "tfm/platform.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "tfm/gemm.h"

namespace tfm::platform {

void select_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("TFM_NO_REEXEC")) return;
  if (!__builtin_cpu_supports("avx512f")) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  setenv("TFM_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the default kernels.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("TFM_BLAS_REEXEC");
}

std::string blas_summary() {
  std::ostringstream os;
  os << "OpenBLAS core " << blas_core_name() << ", " << blas_threads() << " thread(s)";
  if (std::getenv("TFM_BLAS_REEXEC"))
    os << " (AVX-512 CPU: restarted with OPENBLAS_CORETYPE=SkylakeX; TFM_NO_REEXEC=1 keeps the default)";
  else if (const char* core = std::getenv("OPENBLAS_CORETYPE"))
  {
    os << " (OPENBLAS_CORETYPE=" << core << " from the environment";
    if (__builtin_cpu_supports("avx512f") && std::string(core) != "SkylakeX" && std::string(core) != "Cooperlake")
      os << "; this CPU has AVX-512: unset it to let tfm use the ~1.7x faster SkylakeX kernels";
    os << ")";
  }
  return os.str();
}

int configure_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  set_blas_threads(n);
  omp_set_num_threads(n);
  return n;
}

}  // namespace tfm::platform
