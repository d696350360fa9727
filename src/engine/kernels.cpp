#include "kernels.h"

#include <algorithm>
#include <cmath>

#include "vecmath.h"

namespace tfm::kernels {
namespace {
// Rows are split across OpenMP threads only when there is enough work to pay for it.
constexpr int64_t kParallelWork = 1 << 15;

// The largest of x[0..n): the order of a max does not change it.
inline float row_max(const float* x, int64_t n) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  return mx;
}

// sum exp(x[i] - mx) in double: the softmax denominator of log_softmax and the cross-entropy (vector
// exp, vecmath.h; the lanes' partial sums in double differ from a scalar loop's by ~1e-16 relative).
inline double sum_exp_shifted(const float* x, int64_t n, float mx) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return sum;
}
}  // namespace

namespace {
// LayerNorm (kCentered) and RMSNorm (Zhang & Sennrich 2019: no centring, no bias) share their loops:
// RMSNorm is LayerNorm with the mean fixed at 0, mean(x^2) for the variance and no bias term.

// y = (x - m) * s * w (+ b) for one row: shared by the forward and the recomputation, which must agree
// to the bit.
template <bool kCentered>
inline void norm_row(float* y, const float* x, const float* w, const float* b, float m, float s, int64_t C) {
  if constexpr (kCentered) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * w[c];
  }
}

template <bool kCentered>
void norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                  int64_t N, int64_t C, float eps) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    // Sums in double (vectorised: the reduction order is the compiler's, the precision is double's).
    float m = 0.0f;
    if constexpr (kCentered) {
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < C; ++c) sum += x[c];
      m = static_cast<float>(sum / C);
    }
    double var = 0.0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) {
      const float d = x[c] - m;
      var += d * d;
    }
    const float s = 1.0f / std::sqrt(static_cast<float>(var / C) + eps);
    norm_row<kCentered>(y, x, w, b, m, s, C);
    if constexpr (kCentered) mean[i] = m;
    rstd[i] = s;
  }
}

template <bool kCentered>
void norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                   const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite_dinp) {
  // Parameter gradients: column sums, kept serial per column block so they need no reduction.
  if (dw || db) {
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* g = dout + i * C;
      const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
      if (dw) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dw[c] += g[c] * (x[c] - m) * s;
      }
      if (db) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) db[c] += g[c];
      }
    }
  }
  if (!dinp) return;
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* g = dout + i * C;
    float* dx = dinp + i * C;
    const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float gw = g[c] * w[c];
      if constexpr (kCentered) mean_g += gw;
      mean_gx += gw * (x[c] - m) * s;
    }
    mean_g /= static_cast<float>(C);
    mean_gx /= static_cast<float>(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      dx[c] = (overwrite_dinp ? 0.0f : dx[c]) + s * (g[c] * w[c] - mean_g - xhat * mean_gx);
    }
  }
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
  norm_forward<true>(out, mean, rstd, inp, w, b, N, C, eps);
}

void layernorm_apply(float* out, const float* inp, const float* w, const float* b, const float* mean,
                     const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) norm_row<true>(out + i * C, inp + i * C, w, b, mean[i], rstd[i], C);
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool overwrite_dinp) {
  norm_backward<true>(dinp, dw, db, dout, inp, w, mean, rstd, N, C, overwrite_dinp);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                     float eps) {
  norm_forward<false>(out, nullptr, rstd, inp, w, nullptr, N, C, eps);
}

void rmsnorm_apply(float* out, const float* inp, const float* w, const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) norm_row<false>(out + i * C, inp + i * C, w, nullptr, 0.0f, rstd[i], C);
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t N, int64_t C, bool overwrite_dinp) {
  norm_backward<false>(dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C, overwrite_dinp);
}

void softmax_forward(float* out, const float* inp, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    float mx = -INFINITY;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[c]);
    if (mx == -INFINITY) {  // every entry masked: define the row as all zeros, not NaN
      std::fill_n(y, C, 0.0f);
      continue;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) {
      y[c] = expf(x[c] - mx);
      sum += y[c];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] *= inv;
  }
}

void softmax_backward(float* dinp, const float* dout, const float* out, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = dout + i * C;
    const float* y = out + i * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) dot += g[c] * y[c];
    float* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] += y[c] * (g[c] - dot);
  }
}

void log_softmax_forward(float* out, const float* inp, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    const float mx = row_max(x, C);
    const double sum = sum_exp_shifted(x, C, mx);
    // (x - max) - log(sum), not x - (max + log(sum)): rounding max + log(sum) to float first costs
    // up to half an ulp of the max (3e-5 at logits of 1000); x - max is exact.
    const float log_sum = static_cast<float>(std::log(sum));
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - mx) - log_sum;
  }
}

void log_softmax_backward(float* dinp, const float* dout, const float* out, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = dout + i * C;
    const float* y = out + i * C;
    float sum = 0.0f;
    for (int64_t c = 0; c < C; ++c) sum += g[c];
    float* dx = dinp + i * C;
    for (int64_t c = 0; c < C; ++c) dx[c] += g[c] - std::exp(y[c]) * sum;
  }
}

double cross_entropy_forward(float* lse, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                             int32_t ignore_index) {
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (N * V > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    const float mx = row_max(x, V);
    const double log_sum = std::log(sum_exp_shifted(x, V, mx));
    lse[i] = mx + static_cast<float>(log_sum);
    // The loss from exact x - max, as in log_softmax_forward (lse is rounded to float).
    if (targets[i] != ignore_index) total += log_sum - static_cast<double>(x[targets[i]] - mx);
  }
  return total;
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            int64_t N, int64_t V, int32_t ignore_index, float scale, bool overwrite) {
#pragma omp parallel for if (N * V > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    float* dx = dlogits + i * V;
    if (targets[i] == ignore_index) {
      if (overwrite) std::fill(dx, dx + V, 0.0f);
      continue;
    }
    const float* x = logits + i * V;
    const float l = lse[i];
    // A GPT-2-vocabulary logits gradient is 100 MB a step: stored, it is written once, not zero-filled
    // and then added into (0 + a is a: the same bits).
    if (overwrite) {
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) dx[v] = scale * expf(x[v] - l);
    } else {
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) dx[v] += scale * expf(x[v] - l);
    }
    dx[targets[i]] -= scale;
  }
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
#pragma omp parallel for simd if (n > kParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * kInvSqrt2));
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
#pragma omp parallel for simd if (n > kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    dinp[i] += dout[i] * (cdf + x * pdf);
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd if (n > kParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                     int64_t n) {
#pragma omp parallel for simd if (n > kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float s = 1.0f / (1.0f + expf(-x));
    dgate[i] = dout[i] * up[i] * s * (1.0f + x * (1.0f - s));
    dup[i] = dout[i] * x * s;
  }
}

void gelu_with_slope(float* out, float* slope, const float* inp, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
#pragma omp parallel for simd if (n > kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float e = erff(x * kInvSqrt2);
    out[i] = 0.5f * x * (1.0f + e);
    slope[i] = 0.5f * (1.0f + e) + x * (kInvSqrt2Pi * expf(-0.5f * x * x));
  }
}

namespace {
// SplitMix64 at counter i: the generator's i-th output from `seed`, computed on its own (no state
// carried from element to element), so loops over it vectorise and any element replays from the
// seed. Returns the multiplier: 0 with probability p, else `scale`.
inline float dropout_keep(uint64_t seed, int64_t i, float p, float scale) {
  uint64_t z = seed + static_cast<uint64_t>(i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // top 24 bits: exact in [0, 1)
  return u < p ? 0.0f : scale;
}
}  // namespace

void dropout(float* out, const float* in, int64_t n, float p, uint64_t seed, bool accumulate) {
  const float scale = 1.0f / (1.0f - p);
  // Three branch-free loops rather than one with branches inside, so each vectorises.
  if (!in) {
#pragma omp parallel for simd if (n > kParallelWork)
    for (int64_t i = 0; i < n; ++i) out[i] = dropout_keep(seed, i, p, scale);
  } else if (accumulate) {
#pragma omp parallel for simd if (n > kParallelWork)
    for (int64_t i = 0; i < n; ++i) out[i] += dropout_keep(seed, i, p, scale) * in[i];
  } else {
#pragma omp parallel for simd if (n > kParallelWork)
    for (int64_t i = 0; i < n; ++i) out[i] = dropout_keep(seed, i, p, scale) * in[i];
  }
}

void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C > kParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    float* y = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] += bias[c];
  }
}

void bias_add_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  // Column sums: threads take blocks of columns, each summing its columns over every row, so no
  // reduction between threads is needed and the order of the sums does not depend on the threads.
  // A block's sums live in a local array (registers), not in dbias: through dbias, which might alias
  // dout, every row reloaded and stored them.
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static) if (N * C > (1 << 20))
  for (int64_t c0 = 0; c0 < C; c0 += kCols) {
    const int64_t width = std::min(kCols, C - c0);
    float sums[kCols] = {};
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dout + i * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) sums[c] += g[c];
    }
    for (int64_t c = 0; c < width; ++c) dbias[c0 + c] += sums[c];
  }
}

}  // namespace tfm::kernels
