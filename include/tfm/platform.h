// Start-up decisions about the machine: which OpenBLAS kernels to use and how many threads.
#pragma once
#include <string>

namespace tfm::platform {

// OpenBLAS 0.3.21 picks its Haswell kernels on AVX-512 AMD CPUs; its SkylakeX kernels are ~1.7x faster
// there. OpenBLAS reads OPENBLAS_CORETYPE only when the library loads, before main(), so when the CPU
// has AVX-512 and the variable is unset this re-executes the program with OPENBLAS_CORETYPE=SkylakeX.
// Set TFM_NO_REEXEC=1 (or OPENBLAS_CORETYPE yourself) to opt out. Returns when no re-exec happens.
void select_blas_kernels(char** argv);

// One line for the start-up log: OpenBLAS core, threads, and why that core was chosen.
std::string blas_summary();

// Threads to use: `requested` when > 0, else the number of cores. Sets OpenBLAS and OpenMP to it.
int configure_threads(int requested);

}  // namespace tfm::platform
