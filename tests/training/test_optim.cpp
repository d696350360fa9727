// AdamW and SGD against hand-computed updates, the schedules against torch_lm.py's lr_at, clipping,
// Muon's orthogonalisation (its singular values against the Newton-Schulz map, in double precision)
// and its split of the parameters with AdamW. Muon against PyTorch: tests/training/test_optim_reference.cpp.
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/training/optim.h"

using namespace tfm;

namespace {
// torch_lm.py's lr_at, transcribed.
double lr_at(int64_t step, double lr, double min_lr, int64_t warmup, int64_t total,
             const std::string& schedule, double decay_fraction = 0.2) {
  if (step < warmup) return lr * (step + 1) / static_cast<double>(warmup);
  if (schedule == "wsd") {
    const int64_t decay_start = total - static_cast<int64_t>(decay_fraction * total);
    if (step < decay_start) return lr;
    return lr +
           (min_lr - lr) * std::min(1.0, (step - decay_start + 1) /
                                             static_cast<double>(std::max<int64_t>(1, total - decay_start)));
  }
  if (schedule == "constant" || step >= total) return schedule == "constant" ? lr : min_lr;
  const double ratio = (step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}
// Eigenvalues of the symmetric n x n matrix a (row-major, double), by cyclic Jacobi rotations.
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) off += a[p * n + q] * a[p * n + q];
    if (off < 1e-30) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // A <- A J (columns p, q), then J^T A (rows p, q)
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq, a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk, a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> ev(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ev[static_cast<size_t>(i)] = a[i * n + i];
  std::sort(ev.begin(), ev.end());
  return ev;
}

// The singular values of x (rows, cols), ascending: square roots of the eigenvalues of the smaller
// Gram matrix, all in double.
std::vector<double> singular_values(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const bool wide = rows <= cols;
  const int64_t m = wide ? rows : cols, n = wide ? cols : rows;
  auto at = [&](int64_t i, int64_t k) {
    return static_cast<double>(wide ? x[i * cols + k] : x[k * cols + i]);
  };
  std::vector<double> gram(static_cast<size_t>(m * m));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < n; ++k) s += at(i, k) * at(j, k);
      gram[static_cast<size_t>(i * m + j)] = s;
    }
  std::vector<double> sv = symmetric_eigenvalues(gram, m);
  for (double& v : sv) v = std::sqrt(std::max(0.0, v));
  return sv;
}

// NS5(u) through the optimizer: one Muon step from W = 0 with momentum 0, lr 1 and no decay gives
// W = -sqrt(max(1, rows / cols)) NS5(u).
std::vector<float> ns5_of(const std::vector<float>& u, int64_t rows, int64_t cols) {
  OptimizerConfig c;
  c.name = OptimizerKind::Muon, c.lr = 1.0, c.muon_lr = 1.0, c.muon_momentum = 0.0, c.muon_weight_decay = 0.0;
  ParamSegment seg{0, rows * cols, true};
  seg.rows = rows, seg.cols = cols;
  Optimizer opt(c, {seg}, rows * cols);
  std::vector<float> w(u.size(), 0.0f);
  opt.step(w.data(), u.data(), 1.0);
  const float scale = static_cast<float>(std::sqrt(std::max(1.0, static_cast<double>(rows) / cols)));
  for (float& v : w) v /= -scale;
  return w;
}

std::vector<float> gaussian(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// The Newton-Schulz map on one singular value s of the normalised U: five times
// s <- a s + b s^3 + c s^5 (X X^T X = U S^3 V^T for X = U S V^T).
double ns5_map(double s) {
  for (int i = 0; i < 5; ++i) s = 3.4445 * s - 4.7750 * s * s * s + 2.0315 * s * s * s * s * s;
  return s;
}

}  // namespace

TEST_CASE("optim: AdamW matches torch.optim.AdamW's update, decay on decay segments only", "[optim]") {
  OptimizerConfig c;
  c.betas = {0.9, 0.99}, c.eps = 1e-8, c.weight_decay = 0.1;
  Optimizer opt(c, {{0, 1, true}, {1, 1, false}}, 2);
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {0.5f, 0.5f};
  opt.step(p.data(), g.data(), 0.1);
  // t=1: m = 0.05, v = 0.0025, m_hat = 0.5, v_hat = 0.25: p -= 0.1 * 0.5 / (0.5 + 1e-8)
  CHECK(p[0] == Approx(1.0 * (1 - 0.1 * 0.1) - 0.1).epsilon(1e-6));  // 0.89
  CHECK(p[1] == Approx(0.9).epsilon(1e-6));
  // t=2 with g = -0.25, by the formula in double.
  g = {-0.25f, -0.25f};
  const double m = 0.9 * 0.05 + 0.1 * -0.25, v = 0.99 * 0.0025 + 0.01 * 0.0625;
  const double step_size = 0.1 / (1 - 0.9 * 0.9), denom = std::sqrt(v) / std::sqrt(1 - 0.99 * 0.99) + 1e-8;
  const double want0 = 0.89 * (1 - 0.01) - step_size * m / denom, want1 = 0.9 - step_size * m / denom;
  opt.step(p.data(), g.data(), 0.1);
  CHECK(p[0] == Approx(want0).epsilon(1e-6));
  CHECK(p[1] == Approx(want1).epsilon(1e-6));
  CHECK(opt.steps_taken() == 2);
  CHECK(opt.state().size() == 2);
}

TEST_CASE("optim: SGD with momentum and L2 decay as torch.optim.SGD", "[optim]") {
  OptimizerConfig c;
  c.name = OptimizerKind::Sgd, c.momentum = 0.9, c.weight_decay = 0.0;
  Optimizer opt(c, {{0, 2, true}}, 2);
  std::vector<float> p = {1.0f, -2.0f};
  std::vector<float> g = {1.0f, 2.0f};
  opt.step(p.data(), g.data(), 0.1);  // buf = g
  CHECK(p[0] == Approx(0.9));
  CHECK(p[1] == Approx(-2.2));
  opt.step(p.data(), g.data(), 0.1);  // buf = 0.9 g + g
  CHECK(p[0] == Approx(0.9 - 0.19));
  CHECK(p[1] == Approx(-2.2 - 0.38));
  OptimizerConfig d = c;
  d.weight_decay = 0.5, d.momentum = 0.0;
  Optimizer wd(d, {{0, 1, true}, {1, 1, false}}, 2);
  p = {1.0f, 1.0f}, g = {0.0f, 0.0f};
  wd.step(p.data(), g.data(), 0.1);
  CHECK(p[0] == Approx(1.0 - 0.1 * 0.5));
  CHECK(p[1] == 1.0f);
}

TEST_CASE("optim: schedules follow torch_lm.py's lr_at", "[optim]") {
  for (const ScheduleKind kind : {ScheduleKind::Cosine, ScheduleKind::Constant}) {
    LrSchedule s;
    s.name = kind, s.lr = 1e-3, s.min_lr = 1e-4, s.warmup_steps = 100, s.total = 2000;
    for (int64_t step : {0, 1, 50, 98, 99, 100, 101, 500, 1000, 1999, 2000, 2500})
      CHECK(s.at(step) == Approx(lr_at(step, 1e-3, 1e-4, 100, 2000, name_of(kind))).epsilon(1e-12));
  }
  LrSchedule s;
  CHECK(s.at(0) == Approx(1e-5));
  CHECK(s.at(100) == Approx(1e-3));
  CHECK(s.at(1050) == Approx(1e-4 + 0.5 * 9e-4));
  CHECK(s.at(5000) == Approx(1e-4));
  // No warmup.
  s.warmup_steps = 0;
  CHECK(s.at(0) == Approx(1e-3));
  // inverse_sqrt: the warmup, then lr * sqrt(warmup / (step + 1)), continuous at the join.
  LrSchedule inv;
  inv.name = ScheduleKind::InverseSqrt, inv.lr = 1e-3, inv.warmup_steps = 100;
  CHECK(inv.at(98) == Approx(0.99e-3));
  CHECK(inv.at(99) == Approx(1e-3));
  CHECK(inv.at(100) == Approx(1e-3 * std::sqrt(100.0 / 101.0)));
  CHECK(inv.at(399) == Approx(0.5e-3));
  CHECK(inv.at(9999) == Approx(1e-4));
}

TEST_CASE("optim: global-norm clipping as clip_grad_norm_", "[optim]") {
  std::vector<float> g = {3.0f, 4.0f};
  CHECK(clip_grad_norm(g.data(), 2, 10.0) == Approx(5.0));
  CHECK(g[0] == 3.0f);  // under the limit: untouched
  CHECK(clip_grad_norm(g.data(), 2, 1.0) == Approx(5.0));
  CHECK(g[0] == Approx(0.6).epsilon(1e-6));
  CHECK(g[1] == Approx(0.8).epsilon(1e-6));
  CHECK(grad_norm(g.data(), 2) == Approx(1.0).epsilon(1e-6));
  g = {3.0f, 4.0f};
  CHECK(clip_grad_norm(g.data(), 2, 0.0) == Approx(5.0));  // 0 = off
  CHECK(g[1] == 4.0f);
  // The norm of a large buffer is accumulated in double and independent of chunking.
  std::vector<float> big(1000003, 0.5f);
  CHECK(grad_norm(big.data(), static_cast<int64_t>(big.size())) ==
        Approx(std::sqrt(1000003.0) * 0.5).epsilon(1e-9));
}

TEST_CASE("optim: wsd holds lr, then decays linearly to min_lr over the last decay_fraction",
          "[optim][wsd]") {
  LrSchedule s;
  s.name = ScheduleKind::Wsd, s.lr = 1e-3, s.min_lr = 1e-4, s.warmup_steps = 10, s.total = 100;
  s.decay_fraction = 0.2;
  // s0 = 100 - floor(0.2 * 100) = 80: warmup to step 9, lr from 10 to 79, then 20 decaying steps.
  CHECK(s.at(0) == Approx(1e-4));
  CHECK(s.at(9) == 1e-3);
  CHECK(s.at(10) == 1e-3);
  CHECK(s.at(79) == 1e-3);
  CHECK(s.at(80) == Approx(1e-3 - 0.9e-3 / 20).epsilon(1e-12));  // the first decayed step: 1/20 of the way
  CHECK(s.at(89) == Approx(1e-3 - 0.9e-3 / 2).epsilon(1e-12));
  CHECK(s.at(99) == Approx(1e-4).epsilon(1e-12));  // the last step is at min_lr
  CHECK(s.at(100) == Approx(1e-4).epsilon(1e-12));
  CHECK(s.at(500) == Approx(1e-4).epsilon(1e-12));
  // floor(0.25 * 10) = 2 steps; a fraction under one step never decays; 1 decays from the first step
  // after the warmup.
  for (double f : {0.0, 0.05, 0.25, 0.33, 1.0})
    for (int64_t total : {10, 7, 1})
      for (int64_t warmup : {0, 3}) {
        LrSchedule w = s;
        w.total = total, w.warmup_steps = warmup, w.decay_fraction = f;
        for (int64_t step = 0; step <= total + 1; ++step) {
          INFO("f " << f << " total " << total << " warmup " << warmup << " step " << step);
          CHECK(w.at(step) == Approx(lr_at(step, 1e-3, 1e-4, warmup, total, "wsd", f)).epsilon(1e-12));
        }
      }
  LrSchedule none = s;
  none.decay_fraction = 0.0;
  CHECK(none.at(99) == 1e-3);  // no decay at all
  LrSchedule all = s;
  all.warmup_steps = 0, all.decay_fraction = 1.0;
  CHECK(all.at(0) == Approx(1e-3 - 0.9e-3 / 100).epsilon(1e-12));
}

TEST_CASE("optim: Muon's NS5 moves every singular value into the quintic's band", "[optim][muon]") {
  // Gaussian matrices of aspect ratio >= 3, wide and tall: their singular values are at least ~0.1 of
  // the Frobenius norm's scale, and five quintic steps take every value in [0.002, 1] into
  // [0.6818, 1.2024] (the map's range there, ns5_map). numpy on 50 float32 draws of each shape below
  // measured [0.6818, 1.1344]. Asserted: [0.67, 1.21].
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{16, 48}, {48, 16},  {8, 24},
                                                           {24, 8},  {32, 128}, {96, 32}};
  uint64_t seed = 1;
  for (const auto& [rows, cols] : shapes) {
    for (int draw = 0; draw < 3; ++draw) {
      const std::vector<double> sv =
          singular_values(ns5_of(gaussian(rows * cols, seed++), rows, cols), rows, cols);
      INFO("(" << rows << ", " << cols << "): singular values in [" << sv.front() << ", " << sv.back()
               << "]");
      CHECK(static_cast<int64_t>(sv.size()) == std::min(rows, cols));
      CHECK(sv.front() >= 0.67);
      CHECK(sv.back() <= 1.21);
    }
  }
}

TEST_CASE("optim: NS5 maps each singular value as the quintic polynomial does", "[optim][muon]") {
  // U = Q1 diag(s) Q2^T with chosen s: NS5(U) = Q1 diag(f(s / ||s||)) Q2^T, f = ns5_map. Its singular
  // values against f's, sorted (f is not monotonic), to float32 roundoff; the rows <= cols and
  // rows > cols orientations alike.
  auto orthonormal_rows = [](int64_t k, int64_t n, uint64_t seed) {  // k orthonormal rows of length n
    const std::vector<float> g = gaussian(k * n, seed);
    std::vector<double> q(g.begin(), g.end());
    for (int64_t i = 0; i < k; ++i) {  // modified Gram-Schmidt
      for (int64_t j = 0; j < i; ++j) {
        double d = 0.0;
        for (int64_t t = 0; t < n; ++t) d += q[i * n + t] * q[j * n + t];
        for (int64_t t = 0; t < n; ++t) q[i * n + t] -= d * q[j * n + t];
      }
      double norm = 0.0;
      for (int64_t t = 0; t < n; ++t) norm += q[i * n + t] * q[i * n + t];
      for (int64_t t = 0; t < n; ++t) q[i * n + t] /= std::sqrt(norm);
    }
    return q;
  };
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{12, 20}, {20, 12}, {16, 16}}) {
    const int64_t m = std::min(rows, cols);
    const std::vector<double> q1 = orthonormal_rows(m, rows, 7), q2 = orthonormal_rows(m, cols, 8);
    std::vector<double> s(static_cast<size_t>(m));
    double norm = 0.0;
    for (int64_t i = 0; i < m; ++i) {  // from 1 down to 0.004 of the largest, geometrically
      s[static_cast<size_t>(i)] = std::pow(0.004, static_cast<double>(i) / static_cast<double>(m - 1));
      norm += s[static_cast<size_t>(i)] * s[static_cast<size_t>(i)];
    }
    std::vector<float> u(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double v = 0.0;
        for (int64_t i = 0; i < m; ++i) v += q1[i * rows + r] * s[static_cast<size_t>(i)] * q2[i * cols + c];
        u[static_cast<size_t>(r * cols + c)] = static_cast<float>(v);
      }
    std::vector<double> want(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      want[static_cast<size_t>(i)] = ns5_map(s[static_cast<size_t>(i)] / std::sqrt(norm));
    std::sort(want.begin(), want.end());
    const std::vector<double> got = singular_values(ns5_of(u, rows, cols), rows, cols);
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    INFO("(" << rows << ", " << cols << "): max |singular value - f(s)| " << worst);
    CHECK(worst < 1e-5);  // measured 8e-7 to 1.0e-6
  }
}

TEST_CASE("optim: Muon takes the hidden matrices, AdamW the rest with its own bits", "[optim][muon]") {
  // Two matrices of one shape, one of another, and two non-matrix segments around them.
  const int64_t P = 6 + 4 * 6 * 2 + 6 * 4 + 3;
  std::vector<ParamSegment> segs = {
      {0, 6, false}, {6, 24, true}, {30, 24, true}, {54, 24, true}, {78, 3, true}};
  segs[1].rows = segs[2].rows = 4, segs[1].cols = segs[2].cols = 6;
  segs[3].rows = 6, segs[3].cols = 4;
  OptimizerConfig c;
  c.name = OptimizerKind::Muon, c.lr = 2e-3, c.muon_lr = 0.05, c.muon_weight_decay = 0.1;
  Optimizer muon(c, segs, P);
  OptimizerConfig a = c;
  a.name = OptimizerKind::AdamW;
  Optimizer adamw(a, {segs[0], segs[4]}, P);
  std::vector<float> p = gaussian(P, 3), q = p;
  REQUIRE(muon.state().size() == 3);
  CHECK(muon.state()[0].size() == 9);   // AdamW's m over the 6 + 3 other elements
  CHECK(muon.state()[2].size() == 72);  // the matrices' momentum
  CHECK(muon.state_floats(2) == Approx(9 * 2 + 72 + 2 * (2 * 24 + 2 * 16)));
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = gaussian(P, 10 + step);
    muon.step(p.data(), g.data(), 1e-3);
    adamw.step(q.data(), g.data(), 1e-3);
  }
  for (int64_t i : {0, 5, 78, 80}) CHECK(p[i] == q[i]);  // the same AdamW, bit for bit
  for (int64_t i = 6; i < 78; ++i) CHECK(p[i] != q[i]);  // the matrices moved by Muon instead
  CHECK(newton_schulz_flops(segs, OptimizerKind::Muon) ==
        2 * newton_schulz_flops(4, 6) + newton_schulz_flops(6, 4));
  CHECK(newton_schulz_flops(4, 6) == 10.0 * 16 * (2 * 6 + 4));
  CHECK(newton_schulz_flops(segs, OptimizerKind::AdamW) == 0.0);
  CHECK(is_hidden_matrix("blocks.0.attn.wq.weight", {8, 8}));
  CHECK(is_hidden_matrix("decoder.blocks.1.cross.wk.weight", {8, 8}));
  CHECK_FALSE(is_hidden_matrix("blocks.0.attn.wq.bias", {8}));
  CHECK_FALSE(is_hidden_matrix("emb.weight", {11, 8}));
  CHECK_FALSE(is_hidden_matrix("head.weight", {11, 8}));
}

TEST_CASE("optim: Muon's step is the same at 1 and 2 threads", "[optim][muon]") {
  // Whole matrices per thread with one-thread GEMMs (the shapes with >= 2 matrices), the threaded
  // GEMMs of a single matrix: the same update as one thread, up to the summation order of a threaded
  // GEMM.
  std::vector<ParamSegment> segs;
  int64_t P = 0;
  for (const auto& [rows, cols, n] :
       std::vector<std::tuple<int64_t, int64_t, int>>{{32, 32, 4}, {64, 32, 2}, {32, 64, 1}})
    for (int i = 0; i < n; ++i) {
      ParamSegment s{P, rows * cols, true};
      s.rows = rows, s.cols = cols;
      segs.push_back(s);
      P += rows * cols;
    }
  OptimizerConfig c;
  c.name = OptimizerKind::Muon;
  auto run = [&](int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    Optimizer opt(c, segs, P);
    std::vector<float> p = gaussian(P, 5);
    for (int step = 0; step < 2; ++step) opt.step(p.data(), gaussian(P, 20 + step).data(), 1e-3);
    omp_set_num_threads(before);
    return p;
  };
  const std::vector<float> one = run(1), two = run(2);
  double worst = 0.0;
  for (size_t i = 0; i < one.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(one[i]) - two[i]));
  INFO("max difference " << worst);
  CHECK(worst < 1e-6);
}
