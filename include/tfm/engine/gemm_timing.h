// This machine's GEMM speed through tfm::gemm, in the current backend and precision: the square peak
// that MFU figures are quoted against (the training log, tfm bench gemm) and the timing of one shape.
#pragma once
#include <cstdint>
#include <string>

namespace tfm {

struct GemmTiming {
  std::string label;  // what the shape is for, e.g. "fc1 forward"
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  double median_ms = 0.0;
  double gflops = 0.0;  // 2*M*N*K / median time
};

// Times C = op(A) op(B) for at least min_seconds (after a warm-up) and returns the median.
GemmTiming time_gemm(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                     double min_seconds);
// The square n x n x n rate in the current backend and precision: the measured peak for MFU.
double measure_gemm_peak_gflops(int64_t n = 1024, double min_seconds = 1.0);

}  // namespace tfm
