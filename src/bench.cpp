#include "tfm/bench.h"

#include <algorithm>
#include <chrono>

#include "tfm/gemm.h"
#include "tfm/tensor.h"

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

std::vector<GemmTiming> time_model_gemms(const ModelConfig& cfg, int64_t B, int64_t T, double min_seconds) {
  const int64_t N = B * T, C = cfg.d_model, Dk = cfg.d_model / cfg.n_heads;
  const int64_t kv = cfg.n_kv_heads * Dk, F = cfg.d_ff, V = std::max<int64_t>(cfg.vocab_size, 1);
  // (label, M, N, K, trans_a, trans_b) in the layouts linear() and attention use.
  struct Shape6 {
    const char* label;
    int64_t M, N, K;
    bool ta, tb;
  };
  const std::vector<Shape6> shapes = {
      {"q projection forward", N, C, C, false, true},
      {"k/v projection forward", N, kv, C, false, true},
      {"attention scores (per head)", T, T, Dk, false, true},
      {"attention weighted sum (per head)", T, Dk, T, false, false},
      {"fc1 forward", N, F, C, false, true},
      {"fc2 forward", N, C, F, false, true},
      {"fc1 backward, input grad", N, C, F, false, false},
      {"fc1 backward, weight grad", F, C, N, true, false},
      {"lm head forward", N, V, C, false, true},
  };
  std::vector<GemmTiming> out;
  for (const Shape6& s : shapes) out.push_back(time_gemm(s.label, s.M, s.N, s.K, s.ta, s.tb, min_seconds));
  return out;
}

}  // namespace tfm
