#include "tfm/gemm.h"

#include <atomic>

#include <cblas.h>

namespace tfm {
namespace {
std::atomic<uint64_t> g_flops{0};
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  g_flops.fetch_add(static_cast<uint64_t>(2 * M * N * K), std::memory_order_relaxed);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

uint64_t gemm_flops() { return g_flops.load(std::memory_order_relaxed); }

void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}
int blas_threads() { return openblas_get_num_threads(); }
const char* blas_core_name() { return openblas_get_corename(); }
const char* blas_config() { return openblas_get_config(); }

}  // namespace tfm
