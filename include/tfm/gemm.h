// The one GEMM wrapper: every matrix product in tfm goes through here, to OpenBLAS cblas_sgemm.
//   C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C,  all row-major,
// op(X) = X^T when trans is set. With beta = 1 a backward pass accumulates straight into a gradient.
#pragma once
#include <cstdint>

namespace tfm {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Floating-point operations issued through gemm() since start (2*M*N*K each), for MFU figures.
uint64_t gemm_flops();

// OpenBLAS threads (set once at start-up; 0 = leave OpenBLAS's choice).
void set_blas_threads(int n);
int blas_threads();
// The OpenBLAS core type in use (e.g. "Haswell", "SkylakeX") and its build configuration.
const char* blas_core_name();
const char* blas_config();

}  // namespace tfm
