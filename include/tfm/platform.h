// Start-up decisions about the machine: which OpenBLAS kernels to use, how many threads, which GEMM.
#pragma once
#include <string>

namespace tfm::platform {

// Prepares the environment that OpenBLAS and OpenMP read once, when they load (before main), by
// re-executing the program once with, each only when unset:
//  - OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs: OpenBLAS 0.3.21 picks its Haswell kernels on AVX-512
//    AMD CPUs, and its SkylakeX kernels are ~1.7x faster there;
//  - GOMP_SPINCOUNT=10000: idle OpenMP threads spin briefly, then sleep, rather than spinning long
//    enough to steal the cores from anything else running (unless OMP_WAIT_POLICY is set).
// TFM_NO_REEXEC=1 opts out. Returns when no re-exec happens.
void select_blas_kernels(char** argv);

// One line for the start-up log: OpenBLAS core, threads, and why that core was chosen.
std::string blas_summary();

// One line for the start-up log: the GEMM backend and precision in use, and why.
std::string gemm_summary();

// Threads to use: `requested` when > 0, else the number of cores. Sets OpenBLAS and OpenMP to it.
int configure_threads(int requested);

}  // namespace tfm::platform
