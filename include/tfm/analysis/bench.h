// Benchmarks through tfm::gemm (in the current backend and precision): the matrix products a model's
// training step actually runs (each timed as engine/gemm_timing.h times a shape) and attention layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/engine/gemm_timing.h"
#include "tfm/models/language_model.h"

namespace tfm {

// The matrix products of one training step of `config` (forward and backward) at batch B: over T tokens,
// or for an encoder-decoder (S > 0) the encoder's over S source tokens, the decoder's over T target
// tokens and the cross-attention's between them. The head's is over config.vocab_size (the target's).
std::vector<GemmTiming> time_model_gemms(const ModelConfig& config, int64_t B, int64_t T, double min_seconds,
                                         int64_t S = 0);

// One multi-head self-attention layer, forward + backward, at sequence length n (Vaswani et al. 2017,
// table 1: time O(n^2 d + n d^2) per layer; memory O(h n^2) for the attention matrices of an unfused
// layer).
struct AttentionTiming {
  int64_t n = 0;
  double median_ms = 0.0;     // forward + backward of the layer on (B, n, C)
  double flops = 0.0;         // attention_pass_flops: the work the pass does
  double peak_bytes = 0.0;    // tensor memory the step allocated above what was live before it
  double matrix_bytes = 0.0;  // the B H n^2 floats of attention probabilities an unfused layer keeps
  double core_share = 1.0;  // of the threads' cores while timed (CoreShareMeter): below ~0.8, a busy machine
};
// The FLOPs of one forward + backward of the layer on (B, n, C), 3 x the forward's: the projections
// and 4 B P C for the scores and weighted sums over P (query, key) pairs, P = n^2, or with `causal` the
// n (n + 1) / 2 a causal pass computes (the keys after each query are skipped, not computed and masked).
double attention_pass_flops(const ModelConfig& config, bool causal, int64_t B, int64_t n);
// Times the layer at each of `lengths` (B sequences, random input and weights) for at least
// min_seconds each after a warm-up; the median.
std::vector<AttentionTiming> time_attention(const ModelConfig& config, bool causal, int64_t B,
                                            const std::vector<int64_t>& lengths, double min_seconds);
// The least-squares slope of log y against log x: y ~ x^slope.
double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace tfm
