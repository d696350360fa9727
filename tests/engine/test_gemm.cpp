// The GEMM wrapper on both backends and in both precisions, against a double-precision product:
// every transpose combination, leading dimensions wider than the matrices, alpha and beta.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/gemm_timing.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/random.h"

using namespace tfm;

namespace {

struct Operands {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb;
  std::vector<float> a, b, c;
};

// op(A) (M, K), op(B) (K, N), C (M, N), each stored with a leading dimension 3 wider than needed.
Operands make(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed) {
  Operands o{M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 3, N + 3, ta, tb, {}, {}, {}};
  Rng rng(seed);
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = rng.uniform() * 2.0f - 1.0f;
  };
  fill(o.a, (ta ? K : M) * o.lda);
  fill(o.b, (tb ? N : K) * o.ldb);
  fill(o.c, M * o.ldc);
  return o;
}

float at_a(const Operands& o, int64_t i, int64_t k) {
  return o.ta ? o.a[k * o.lda + i] : o.a[i * o.lda + k];
}
float at_b(const Operands& o, int64_t k, int64_t j) {
  return o.tb ? o.b[j * o.ldb + k] : o.b[k * o.ldb + j];
}

// alpha op(A) op(B) + beta C in double; `round` first rounds the operands to bfloat16. The operands are
// copied out first, op(A) (M, K) and op(B) transposed (N, K), so that the product's loop is plain
// arithmetic on pointers: test code compiles at -O0 (CMakeLists.txt), where calling at_a, at_b and the
// rounding for every multiply-add took 3.5 of this file's 4.9 s.
std::vector<double> reference(const Operands& o, float alpha, float beta, bool round) {
  auto r = [round](float x) { return static_cast<double>(round ? from_bf16(to_bf16(x)) : x); };
  std::vector<double> a(static_cast<size_t>(o.M * o.K)), b_t(static_cast<size_t>(o.N * o.K));
  for (int64_t i = 0; i < o.M; ++i)
    for (int64_t k = 0; k < o.K; ++k) a[i * o.K + k] = r(at_a(o, i, k));
  for (int64_t j = 0; j < o.N; ++j)
    for (int64_t k = 0; k < o.K; ++k) b_t[j * o.K + k] = r(at_b(o, k, j));
  std::vector<double> out(o.c.begin(), o.c.end());
  for (int64_t i = 0; i < o.M; ++i) {
    const double* a_row = a.data() + i * o.K;
    for (int64_t j = 0; j < o.N; ++j) {
      const double* b_col = b_t.data() + j * o.K;
      double s = 0;
      for (int64_t k = 0; k < o.K; ++k) s += a_row[k] * b_col[k];
      out[i * o.ldc + j] = alpha * s + beta * static_cast<double>(o.c[i * o.ldc + j]);
    }
  }
  return out;
}

std::vector<float> run(const Operands& o, float alpha, float beta, const float* a = nullptr) {
  std::vector<float> c = o.c;
  gemm(o.ta, o.tb, o.M, o.N, o.K, alpha, a ? a : o.a.data(), o.lda, o.b.data(), o.ldb, beta, c.data(), o.ldc);
  return c;
}

double max_diff(const std::vector<float>& got, const std::vector<double>& want) {
  double d = 0;
  for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::fabs(got[i] - want[i]));
  return d;
}

const GemmBackend kBackends[] = {GemmBackend::OpenBlas, GemmBackend::OneDnn};

}  // namespace

TEST_CASE("gemm: float32 on both backends matches a double product", "[gemm]") {
  for (GemmBackend backend : kBackends)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const GemmModeGuard mode(Precision::Fp32, backend);
          INFO(gemm_backend_name(backend) << " ta " << ta << " tb " << tb << " beta " << beta);
          const Operands o = make(37, 29, 53, ta, tb, 7);
          const std::vector<float> got = run(o, 0.5f, beta);
          CHECK(max_diff(got, reference(o, 0.5f, beta, false)) < 1e-5);
          // The padding between rows of C is left alone.
          for (int64_t i = 0; i < o.M; ++i)
            for (int64_t j = o.N; j < o.ldc; ++j) CHECK(got[i * o.ldc + j] == o.c[i * o.ldc + j]);
        }
}

TEST_CASE("gemm: bfloat16 products are float32 sums of rounded operands, on both backends", "[gemm]") {
  for (GemmBackend backend : kBackends)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const GemmModeGuard mode(Precision::Bf16, backend);
          INFO(gemm_backend_name(backend) << " ta " << ta << " tb " << tb << " beta " << beta);
          const Operands o = make(41, 67, 96, ta, tb, 11);
          const std::vector<float> got = run(o, 0.25f, beta);
          // Exactly the product of the rounded operands, up to float32 summation...
          CHECK(max_diff(got, reference(o, 0.25f, beta, true)) < 1e-5);
          // ...and within bfloat16's error (8 bits: ~2^-9 relative per operand, K terms of |x| < 1) of the
          // float32 product, but measurably not equal to it: the operands were rounded.
          const double d = max_diff(got, reference(o, 0.25f, beta, false));
          CHECK(d < 0.25 * 96 * 2 * std::ldexp(1.0, -9) / 4);
          CHECK(d > 1e-4);
        }
}

TEST_CASE("gemm: gemm_bias adds the bias to every row, on every path", "[gemm]") {
  // 37x29x53 runs as sgemm in both precisions; 130x97x90 (over 2^20 multiply-adds) with alpha 1 on
  // oneDNN's bf16 matmul, which adds the bias in its kernel (with alpha != 1 it would scale the bias too).
  for (float alpha : {1.0f, 0.5f})
    for (GemmBackend backend : kBackends)
      for (Precision precision : {Precision::Fp32, Precision::Bf16})
        for (bool large : {false, true})
          for (bool ta : {false, true})
            for (bool tb : {false, true}) {
              const GemmModeGuard mode(precision, backend);
              INFO(gemm_backend_name(backend) << " " << precision_name(precision) << " large " << large
                                              << " ta " << ta << " tb " << tb << " alpha " << alpha);
              const Operands o = large ? make(130, 97, 90, ta, tb, 5) : make(37, 29, 53, ta, tb, 5);
              std::vector<float> bias(static_cast<size_t>(o.N));
              for (int64_t j = 0; j < o.N; ++j) bias[j] = 0.1f * static_cast<float>(j % 7) - 0.3f;
              std::vector<float> got = o.c;
              gemm_bias(o.ta, o.tb, o.M, o.N, o.K, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, bias.data(),
                        got.data(), o.ldc);
              std::vector<double> want = reference(o, alpha, 0.0f, precision == Precision::Bf16);
              for (int64_t i = 0; i < o.M; ++i)
                for (int64_t j = 0; j < o.N; ++j) want[i * o.ldc + j] += bias[j];
              CHECK(max_diff(got, want) < 1e-5);
              for (int64_t i = 0; i < o.M; ++i)  // C's row padding is left alone
                for (int64_t j = o.N; j < o.ldc; ++j) CHECK(got[i * o.ldc + j] == o.c[i * o.ldc + j]);
            }
}

TEST_CASE("gemm: bfloat16 from OpenMP threads, as attention calls it per head", "[gemm]") {
  for (GemmBackend backend : kBackends) {
    const GemmModeGuard mode(Precision::Bf16, backend);
    // A small product and one above the size that runs on all threads outside a parallel region.
    for (const Operands& o : {make(16, 24, 32, false, true, 3), make(128, 96, 128, true, false, 4)}) {
      const std::vector<double> want = reference(o, 1.0f, 0.0f, true);
      std::vector<double> diffs(4, 0.0);
#pragma omp parallel for num_threads(2)
      for (int i = 0; i < 4; ++i) diffs[static_cast<size_t>(i)] = max_diff(run(o, 1.0f, 0.0f), want);
      for (double d : diffs) CHECK(d < 1e-5);
      CHECK(max_diff(run(o, 1.0f, 0.0f), want) < 1e-5);  // and the same shape outside one
    }
  }
}

TEST_CASE("gemm: inside ThreadInvariantProducts a product has the same bits at 1 and 2 threads", "[gemm]") {
  // Shapes where the libraries' own threading changed the last bits between 1 and 2 threads on an AVX2
  // EPYC (a decode step's 1 x N x K with a long K; short, wide products), one cut into 3 x 2 tiles with
  // edges (the tiles are 64 x 256), and one whose full tiles reach 2^20 multiply-adds: oneDNN's bf16
  // matmul on a CPU that has it (AVX-512), with the bias added in its kernel, tile by tile.
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 64, 256}, {1, 300, 1024}, {6, 64, 512},
                          {7, 56, 256}, {150, 300, 40}, {130, 300, 64}};
  const int threads_before = omp_get_max_threads();
  auto product_at = [](const Operands& o, int threads, const float* bias) {
    set_blas_threads(threads);
    omp_set_num_threads(threads);
    const ThreadInvariantProducts same_bits;
    std::vector<float> c = o.c;
    if (bias)
      gemm_bias(o.ta, o.tb, o.M, o.N, o.K, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, bias, c.data(), o.ldc);
    else
      gemm(o.ta, o.tb, o.M, o.N, o.K, 0.5f, o.a.data(), o.lda, o.b.data(), o.ldb, 1.0f, c.data(), o.ldc);
    return c;
  };
  for (GemmBackend backend : kBackends)
    for (Precision precision : {Precision::Fp32, Precision::Bf16})
      for (const Shape& s : shapes)
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (bool with_bias : {false, true}) {
              const GemmModeGuard mode(precision, backend);
              INFO(gemm_backend_name(backend)
                   << " " << precision_name(precision) << " " << s.M << "x" << s.N << "x" << s.K << " ta "
                   << ta << " tb " << tb << " bias " << with_bias);
              const Operands o = make(s.M, s.N, s.K, ta, tb, 13);
              std::vector<float> bias(static_cast<size_t>(o.N));
              for (int64_t j = 0; j < o.N; ++j) bias[j] = 0.01f * static_cast<float>(j % 11);
              const float* b = with_bias ? bias.data() : nullptr;
              const std::vector<float> one = product_at(o, 1, b), two = product_at(o, 2, b);
              CHECK(one == two);  // bit for bit, C's row padding included
              // The tiles make the whole product: against the double one (rounded operands in bf16).
              std::vector<double> want = reference(o, with_bias ? 1.0f : 0.5f, with_bias ? 0.0f : 1.0f,
                                                   precision == Precision::Bf16);
              if (with_bias)
                for (int64_t i = 0; i < o.M; ++i)
                  for (int64_t j = 0; j < o.N; ++j) want[i * o.ldc + j] += bias[j];
              for (int64_t i = 0; i < o.M; ++i)  // and C's row padding left alone
                for (int64_t j = o.N; j < o.ldc; ++j) want[i * o.ldc + j] = o.c[i * o.ldc + j];
              CHECK(max_diff(two, want) < 1e-4);
            }
  set_blas_threads(threads_before);
  omp_set_num_threads(threads_before);
}

TEST_CASE("gemm: a registered weight buffer is re-rounded after weights_changed", "[gemm]") {
  const GemmModeGuard mode(Precision::Bf16, GemmBackend::OneDnn);
  Operands o = make(8, 12, 16, false, true, 5);
  std::vector<float> weights = o.a;  // A lives in the registered buffer
  const WeightMirror mirror(weights.data(), static_cast<int64_t>(weights.size()));
  CHECK(max_diff(run(o, 1.0f, 0.0f, weights.data()), reference(o, 1.0f, 0.0f, true)) < 1e-5);
  for (float& w : weights) w *= -2.0f;
  o.a = weights;
  weights_changed(weights.data());
  CHECK(max_diff(run(o, 1.0f, 0.0f, weights.data()), reference(o, 1.0f, 0.0f, true)) < 1e-5);
  // One buffer at a time.
  CHECK_THROWS_WITH(WeightMirror(o.b.data(), 4), Catch::StartsWith("WeightMirror"));
}

TEST_CASE("gemm: SameOperandsScope reuses an operand's rounding inside its scope only", "[gemm]") {
  const GemmModeGuard mode(Precision::Bf16, GemmBackend::OneDnn);
  // 128^3 = 2^21 multiply-adds: oneDNN's bf16 matmul, which rounds into the thread's operand buffers.
  Operands o = make(128, 128, 128, false, false, 9);
  const std::vector<double> before = reference(o, 1.0f, 0.0f, true);
  auto change_a = [&] {  // new values at the same address
    for (float& x : o.a) x = -0.5f * x + 0.25f;
  };
  SECTION("a rounding made outside, or before, a scope is never reused") {
    CHECK(max_diff(run(o, 1.0f, 0.0f), before) < 1e-4);
    change_a();
    CHECK(max_diff(run(o, 1.0f, 0.0f), reference(o, 1.0f, 0.0f, true)) < 1e-4);
    const SameOperandsScope same;
    change_a();
    CHECK(max_diff(run(o, 1.0f, 0.0f), reference(o, 1.0f, 0.0f, true)) < 1e-4);
  }
  SECTION("inside one scope the second product reads the first one's rounding") {
    if (!onednn_bf16_matmul_available()) {  // sgemm on rounded operands rounds each product anew
      WARN("this CPU has no oneDNN bf16 matmul (no AVX-512): the operand reuse of its path is not exercised");
      return;
    }
    const SameOperandsScope same;
    CHECK(max_diff(run(o, 1.0f, 0.0f), before) < 1e-4);
    change_a();  // breaks the scope's promise on purpose: the old rounding shows through
    CHECK(max_diff(run(o, 1.0f, 0.0f), before) < 1e-4);
  }
  SECTION("dY read as op(A) = dY, then as op(A) = dY^T, as a linear backward does") {
    const SameOperandsScope same;
    CHECK(max_diff(run(o, 1.0f, 0.0f), before) < 1e-4);
    Operands t = o;  // the same stored A, now transposed: (M, K) = (128, 128) read as A^T
    t.ta = true;
    std::vector<float> c = t.c;
    gemm(true, false, t.M, t.N, t.K, 1.0f, o.a.data(), t.lda, t.b.data(), t.ldb, 0.0f, c.data(), t.ldc);
    CHECK(max_diff(c, reference(t, 1.0f, 0.0f, true)) < 1e-4);
  }
}

TEST_CASE("gemm: bfloat16 rounding is to nearest even and keeps specials", "[gemm]") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);                             // tie: even
  CHECK(from_bf16(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));  // tie: even
  CHECK(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) ==
        1.0f + std::ldexp(1.0f, -7));
  CHECK(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(from_bf16(to_bf16(-0.0f)) == 0.0f);
}

TEST_CASE("gemm: precision and backend names are checked", "[gemm]") {
  CHECK(parse_precision("bf16") == Precision::Bf16);
  CHECK(resolve_gemm_backend("openblas") == GemmBackend::OpenBlas);
  CHECK_THROWS_WITH(parse_precision("fp16"), Catch::StartsWith("train.precision: expected"));
  CHECK_THROWS_AS(resolve_gemm_backend("mkl"), ConfigError);
}

TEST_CASE("gemm: a peak timed on a busy machine is the rate while the product ran", "[gemm]") {
  tfm::GemmTiming t;
  t.gflops = 60.0;
  t.core_share = 0.5;  // another program had half the core: the wall-clock rate is half the product's
  CHECK(tfm::rate_while_running(t) == Approx(120.0));
  t.core_share = 1.0;
  CHECK(tfm::rate_while_running(t) == Approx(60.0));
  t.core_share = 0.0;  // not measured: the timed rate as it is
  CHECK(tfm::rate_while_running(t) == Approx(60.0));
}

TEST_CASE("gemm: a core share is of the cores the threads can use, never of more threads than cores",
          "[gemm]") {
  const tfm::CoreShareMeter meter;
  volatile double x = 0;  // one thread's work: CPU time the meter sees
  for (int i = 0; i < 20000000; ++i) x = x + 1e-9 * i;
  const int cores = tfm::platform::available_cores();
  const double one = meter.share(1), all = meter.share(cores), many = meter.share(1 << 20);
  INFO("share of 1 thread " << one << ", of " << cores << " cores " << all << ", of 2^20 threads " << many);
  CHECK(one > 0);
  CHECK(one <= 1.0);
  // 2^20 threads on `cores` cores can take no more than every core: a share of the cores, not of the
  // threads (which read as a busy machine and scaled the MFU peak up).
  CHECK(many == Approx(all).epsilon(0.2));
  CHECK(many >= 0.8 * one / cores);
}
