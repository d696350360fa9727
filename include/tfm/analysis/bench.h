// Measures this machine's GEMM speed through tfm::gemm (in the current backend and precision): the square peak MFU figures are
// quoted against, and the shapes a model's training step actually runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/models/language_model.h"

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
// The matrix products of one training step of `config` at batch B and length T (forward and backward).
std::vector<GemmTiming> time_model_gemms(const ModelConfig& config, int64_t B, int64_t T, double min_seconds);

// One multi-head self-attention layer, forward + backward, at sequence length n (Vaswani et al. 2017,
// table 1: time O(n^2 d + n d^2) per layer; memory O(h n^2) for the attention matrices of an unfused
// layer).
struct AttentionTiming {
  int64_t n = 0;
  double median_ms = 0.0;      // forward + backward of the layer on (B, n, C)
  double flops = 0.0;          // 3 x the forward's, MultiHeadAttention::cost(): projections and 4 B n^2 C
  double peak_bytes = 0.0;     // tensor memory the step allocated above what was live before it
  double matrix_bytes = 0.0;   // the B H n^2 floats of attention probabilities an unfused layer keeps
};
// Times the layer at each of `lengths` (B sequences, random input and weights) for at least
// min_seconds each after a warm-up; the median.
std::vector<AttentionTiming> time_attention(const ModelConfig& config, bool causal, int64_t B,
                                            const std::vector<int64_t>& lengths, double min_seconds);
// The least-squares slope of log y against log x: y ~ x^slope.
double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace tfm
