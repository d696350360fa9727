// Kernel pairs over raw float pointers: the heavy loops behind the fused ops. Each forward saves
// exactly what its backward needs; each backward *adds* into the gradients it is given (llm.c style).
// Legend: N rows, C channels (the last dimension), V vocabulary.
#pragma once
#include <cstdint>

namespace tfm::kernels {

// out (N, C) = (inp - mean) * rstd * w + b; saves mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps);
// The forward's output again from the saved mean and rstd (bit-identical): recomputation.
void layernorm_apply(float* out, const float* inp, const float* w, const float* b, const float* mean,
                     const float* rstd, int64_t N, int64_t C);
// Adds into dinp (N, C) (stores with overwrite_dinp), dw (C), db (C); dw/db may be null when not
// needed. Formula: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool overwrite_dinp = false);

// RMSNorm (Zhang & Sennrich 2019): out (N, C) = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps);
// saves rstd (N). The same loops as LayerNorm's with the mean fixed at 0 and no bias.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                     float eps);
void rmsnorm_apply(float* out, const float* inp, const float* w, const float* rstd, int64_t N, int64_t C);
// dx = rstd * (g - xhat * mean(g * xhat)) with g = dout * w, xhat = inp * rstd; dw += dout * xhat.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t N, int64_t C, bool overwrite_dinp = false);

// Row-wise softmax (numerically stable: the row max is subtracted first).
void softmax_forward(float* out, const float* inp, int64_t N, int64_t C);
// dinp += y * (dout - sum(dout * y)) per row.
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t N, int64_t C);
void log_softmax_forward(float* out, const float* inp, int64_t N, int64_t C);
// dinp += dout - exp(y) * sum(dout) per row.
void log_softmax_backward(float* dinp, const float* dout, const float* out, int64_t N, int64_t C);

// Cross-entropy of logits (N, V) against targets (N); rows whose target == ignore_index get loss 0.
// Writes the per-row log-sum-exp (N) for the backward and returns the summed loss (double).
double cross_entropy_forward(float* lse, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                             int32_t ignore_index);
// dlogits += scale * (softmax(logits) - onehot(target)) for each non-ignored row; with overwrite, stores
// it instead (and 0 in the ignored rows), so that dlogits need not be zero-filled first.
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            int64_t N, int64_t V, int32_t ignore_index, float scale, bool overwrite = false);

// Exact GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
void gelu_forward(float* out, const float* inp, int64_t n);
// dinp += dout * (Phi(x) + x * phi(x)).
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
// Both at once, for a backward that needs the output too: out = GELU(x) and slope = Phi(x) + x * phi(x),
// with one erf per element; the same bits as gelu_forward and the
// factor gelu_backward multiplies dout by.
void gelu_with_slope(float* out, float* slope, const float* inp, int64_t n);

// SwiGLU's gating (Shazeer 2020): out = silu(gate) * up, silu(x) = x * sigmoid(x).
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
// From dout = dL/dout, in place of the forward's inputs' gradients: dgate = dout * up * silu'(gate),
// dup = dout * silu(gate), silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x). Writes dgate and dup.
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                     int64_t n);

// Dropout with replayable draws: element i is dropped (0) with probability p, else scaled by 1/(1-p).
// Its draw is SplitMix64's output for counter i from `seed` (a counter-based generator), so the
// draws run vectorised on every thread and the backward replays the mask from the seed alone, with
// no memory per element. out[i] = keep_i * in[i] (in == null: the multiplier itself), or += with
// accumulate (the backward: in = dout, out = dinp).
void dropout(float* out, const float* in, int64_t n, float p, uint64_t seed, bool accumulate);

// out (N, C) += bias (C) broadcast over rows; dbias (C) += column sums of dout (N, C).
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C);
void bias_add_backward(float* dbias, const float* dout, int64_t N, int64_t C);

}  // namespace tfm::kernels
