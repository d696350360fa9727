#include "tfm/engine/gemm_timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tfm/engine/gemm.h"
#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

GemmTiming time_gemm(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                     double min_seconds) {
  Rng rng(1);
  const Tensor a = Tensor::uniform({M, K}, rng, -1.0f, 1.0f);
  const Tensor b = Tensor::uniform({K, N}, rng, -1.0f, 1.0f);
  Tensor c = Tensor::zeros({M, N});
  const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  using clock = std::chrono::steady_clock;
  gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);  // warm-up
  std::vector<double> ms;
  const auto start = clock::now();
  while (ms.size() < 3 || std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    if (ms.size() >= 10000) break;
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  GemmTiming t{label, M, N, K, trans_a, trans_b, ms[ms.size() / 2], 0.0};
  t.gflops = 2.0 * M * N * K / (t.median_ms * 1e-3) / 1e9;
  return t;
}

double measure_gemm_peak_gflops(int64_t n, double min_seconds) {
  return time_gemm("square", n, n, n, false, false, min_seconds).gflops;
}

}  // namespace tfm
