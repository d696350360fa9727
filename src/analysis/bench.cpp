#include "tfm/analysis/bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <string>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/tensor.h"
#include "tfm/nn/blocks.h"

namespace tfm {

std::vector<GemmTiming> time_model_gemms(const ModelConfig& cfg, int64_t B, int64_t T, double min_seconds,
                                         int64_t S) {
  const int64_t C = cfg.d_model, Dk = cfg.d_model / cfg.n_heads;
  const int64_t kv = cfg.n_kv_heads * Dk, F = cfg.d_ff, V = std::max<int64_t>(cfg.vocab_size, 1);
  // (label, M, N, K, trans_a, trans_b) in the layouts linear() and attention use.
  struct Shape6 {
    std::string label;
    int64_t M, N, K;
    bool ta, tb;
  };
  std::vector<Shape6> shapes;
  // A layer of one stack over B sequences of `len` tokens (the label's prefix names the stack).
  const auto stack = [&](const std::string& prefix, int64_t len) {
    const int64_t N = B * len;
    for (const Shape6& s :
         std::initializer_list<Shape6>{{"q projection forward", N, C, C, false, true},
                                       {"k/v projection forward", N, kv, C, false, true},
                                       {"attention scores (per head)", len, len, Dk, false, true},
                                       {"attention weighted sum (per head)", len, Dk, len, false, false},
                                       {"fc1 forward", N, F, C, false, true},
                                       {"fc2 forward", N, C, F, false, true},
                                       {"fc1 backward, input grad", N, C, F, false, false},
                                       {"fc1 backward, weight grad", F, C, N, true, false}})
      shapes.push_back({prefix + s.label, s.M, s.N, s.K, s.ta, s.tb});
  };
  if (S > 0) {
    // The encoder over the source, the decoder over the target, and the decoder's cross-attention: its
    // keys and values from the encoder's output (its query and output projections have the shapes of
    // the decoder's self-attention's, listed once).
    stack("encoder ", S);
    stack("decoder ", T);
    shapes.push_back({"cross-attention k/v projection forward", B * S, kv, C, false, true});
    shapes.push_back({"cross-attention scores (per head)", T, S, Dk, false, true});
    shapes.push_back({"cross-attention weighted sum (per head)", T, Dk, S, false, false});
  } else {
    stack("", T);
  }
  shapes.push_back({"lm head forward", B * T, V, C, false, true});
  std::vector<GemmTiming> out;
  for (const Shape6& s : shapes) out.push_back(time_gemm(s.label, s.M, s.N, s.K, s.ta, s.tb, min_seconds));
  return out;
}

double attention_pass_flops(const ModelConfig& config, bool causal, int64_t B, int64_t n) {
  const auto forward = [&](int64_t Tq, int64_t Tk) {
    return MultiHeadAttention::cost(config, B, Tq, Tk).flops;
  };
  // cost() counts every (query, key) pair, as MFU figures do. Its FLOPs are terms in Tq (Wq, Wo), in
  // Tk (Wk, Wv) and in Tq Tk (scores, weighted sum, head mixing), so the last are f(n, n) - f(n, 0) -
  // f(0, n); a causal pass computes n (n + 1) / 2 of the n^2 pairs, the keys up to each query.
  const double all = forward(n, n), pairs = all - forward(n, 0) - forward(0, n);
  const double dn = static_cast<double>(n);
  const double computed = causal ? (dn + 1.0) / (2.0 * dn) : 1.0;
  return 3.0 * (all - pairs * (1.0 - computed));
}

std::vector<AttentionTiming> time_attention(const ModelConfig& config, bool causal, int64_t B,
                                            const std::vector<int64_t>& lengths, double min_seconds) {
  MultiHeadAttention layer(config, causal);
  Rng rng(7);
  for (auto& [name, p] : layer.named_parameters())
    if (p->dim() >= 2) *p = Tensor::randn(p->shape(), rng, 0.0f, 0.02f).set_requires_grad(true);
  const int64_t C = config.d_model, H = config.n_heads;
  using clock = std::chrono::steady_clock;
  std::vector<AttentionTiming> out;
  for (const int64_t n : lengths) {
    TFM_CHECK(n >= 1, "time_attention", "sequence length ", n, " must be >= 1");
    Tensor x = Tensor::randn({B, n, C}, rng, 0.0f, 1.0f);  // (B, n, C)
    x.set_requires_grad(true);
    const auto step = [&] {
      sum(layer.forward(x, x, x)).backward();
      for (auto& [name, p] : layer.named_parameters()) p->zero_grad();
      x.zero_grad();
    };
    step();  // warm-up: first-touch of the pool's buffers
    AttentionTiming t;
    t.n = n;
    const size_t live = memory::stats().live_bytes;
    memory::reset_peak();
    std::vector<double> ms;
    const CoreShareMeter meter;
    const auto start = clock::now();
    while (ms.size() < 3 || std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
      const auto t0 = clock::now();
      step();
      ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
      if (ms.size() >= 1000) break;
    }
    t.core_share = meter.share(omp_get_max_threads());
    const size_t peak = memory::stats().peak_live_bytes;
    t.peak_bytes = static_cast<double>(peak - std::min(live, peak));
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    t.median_ms = ms[ms.size() / 2];
    const double dn = static_cast<double>(n);
    t.flops = attention_pass_flops(config, causal, B, n);
    t.matrix_bytes = 4.0 * static_cast<double>(B * H) * dn * dn;
    out.push_back(t);
  }
  return out;
}

double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  TFM_CHECK(x.size() == y.size() && x.size() >= 2, "fitted_exponent",
            "expected two or more (x, y) pairs, got ", x.size(), " and ", y.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double m = static_cast<double>(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    TFM_CHECK(x[i] > 0 && y[i] > 0, "fitted_exponent", "values must be positive, got (", x[i], ", ", y[i],
              ")");
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
  }
  const double den = m * sxx - sx * sx;
  TFM_CHECK(den > 0, "fitted_exponent", "the x values must not all be equal");
  return (m * sxy - sx * sy) / den;
}

}  // namespace tfm
