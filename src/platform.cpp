#include "tfm/platform.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "tfm/gemm.h"

namespace tfm::platform {
namespace {
bool has_avx512() { return __builtin_cpu_supports("avx512f"); }
}  // namespace

void select_blas_kernels(char** argv) {
  // Both libraries read these variables once, when they load (before main), so a change needs a
  // fresh process image. TFM_REEXEC marks the second start, so this never loops.
  if (std::getenv("TFM_NO_REEXEC") || std::getenv("TFM_REEXEC")) return;
  std::string changed;
  if (!std::getenv("OPENBLAS_CORETYPE") && has_avx512()) {
    // OpenBLAS 0.3.21 picks Haswell kernels on AVX-512 AMD CPUs; SkylakeX ones are ~1.7x faster there.
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    changed += "OPENBLAS_CORETYPE=SkylakeX ";
  }
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    // Idle OpenMP threads spin briefly, then sleep. libgomp's default spins ~300k iterations, which
    // steals the cores whenever anything else runs; sleeping at once pays a futex wake-up for each of
    // the ~100 parallel regions of a step. Measured, small config, ms/step (quiet / with 2 busy
    // processes): passive 28-44 / 372-448, spin 10000: 24-25 / 276-300, active 58-80 / 1220-1268.
    setenv("GOMP_SPINCOUNT", "10000", 1);
    changed += "GOMP_SPINCOUNT=10000 ";
  }
  if (changed.empty()) return;
  changed.pop_back();
  setenv("TFM_REEXEC", changed.c_str(), 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on as we are (the variables then only affect children).
  unsetenv("TFM_REEXEC");
}

std::string blas_summary() {
  std::ostringstream os;
  os << "OpenBLAS " << blas_core_name() << " kernels, " << blas_threads() << " thread(s)";
  if (const char* re = std::getenv("TFM_REEXEC")) os << " (restarted with " << re << "; TFM_NO_REEXEC=1 keeps the defaults)";
  if (const char* core = std::getenv("OPENBLAS_CORETYPE"); core && has_avx512()) {
    const std::string c(core);
    if (c != "SkylakeX" && c != "Cooperlake" && c != "SapphireRapids")
      os << " (OPENBLAS_CORETYPE=" << c << " from the environment; this CPU has AVX-512: unset it to let tfm use the "
         << "~1.7x faster SkylakeX kernels)";
  }
  return os.str();
}

std::string gemm_summary() {
  const GemmBackend b = gemm_backend();
  std::string s = std::string("matrix products ") + precision_name(gemm_precision()) + " on " + gemm_backend_name(b);
  if (b == GemmBackend::onednn)
    s += " (" + onednn_version() + (gemm_precision() == Precision::bf16 ? ", bf16 matmul)" : ", dnnl_sgemm)");
  else if (gemm_precision() == Precision::bf16)
    s += " (bf16 emulated: sgemm on rounded operands, no speed-up; train.gemm_backend \"onednn\" runs bf16 kernels)";
  if (const char* env = std::getenv("TFM_GEMM_BACKEND")) s += std::string(" (TFM_GEMM_BACKEND=") + env + ")";
  return s;
}

int configure_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  set_blas_threads(n);
  omp_set_num_threads(n);
  return n;
}

}  // namespace tfm::platform
