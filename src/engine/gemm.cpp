#include "tfm/engine/gemm.h"

#include <cblas.h>
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tfm/engine/error.h"

namespace tfm {
namespace {

std::atomic<uint64_t> g_flops{0};
std::atomic<Precision> g_precision{Precision::Fp32};
// TFM_GEMM_BACKEND or oneDNN; a bad value is reported when the CLI resolves train.gemm_backend.
GemmBackend default_backend() {
  try {
    return resolve_gemm_backend(GemmBackendChoice::Auto);
  } catch (const ConfigError&) {
    return GemmBackend::OneDnn;
  }
}
std::atomic<GemmBackend> g_backend{default_backend()};

// ---- bfloat16 rounding ----

// One row of n floats rounded to bfloat16: its bits (uint16_t) or its value as a float (for sgemm on
// rounded operands).
template <class Out>
void round_row_bf16(const float* s, int64_t n, Out* d) {
  int64_t c = 0;
#ifdef __AVX512BF16__
  if constexpr (std::is_same_v<Out, uint16_t>)
    for (; c + 16 <= n; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(s + c))));
#endif
  for (; c < n; ++c) {
    if constexpr (std::is_same_v<Out, uint16_t>)
      d[c] = to_bf16(s[c]);
    else
      d[c] = from_bf16(to_bf16(s[c]));
  }
}

// src (rows, cols) with leading dimension ld -> dst (rows, cols) packed, rounded to bfloat16.
template <class Out>
void round_rows_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, Out* dst) {
  // Threads only for big operands outside a parallel region (attention calls gemm per head from its
  // own threads); a small one does not even enter an OpenMP region (~1 us each).
  if (rows * cols > (1 << 18) && !omp_in_parallel()) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) round_row_bf16(src + r * ld, cols, dst + r * cols);
  } else {
    for (int64_t r = 0; r < rows; ++r) round_row_bf16(src + r * ld, cols, dst + r * cols);
  }
}

// A thread's grow-only scratch: steady-state products allocate nothing.
template <class T>
T* scratch(std::vector<T>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// ---- the registered weight buffer's bfloat16 copy ----
struct Mirror {
  std::mutex mu;
  const float* base = nullptr;
  int64_t n = 0;
  std::vector<uint16_t> bf16;
  std::atomic<uint64_t> version{0}, mirrored{~uint64_t{0}};
};
Mirror& mirror() {
  static Mirror m;
  return m;
}

// The bfloat16 copy of `p` when it lies in the registered buffer (refreshed if the weights changed).
const uint16_t* mirrored(const float* p) {
  Mirror& m = mirror();
  const float* base = m.base;
  if (base == nullptr || p < base || p >= base + m.n) return nullptr;
  if (m.mirrored.load(std::memory_order_acquire) != m.version.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(m.mu);
    const uint64_t v = m.version.load(std::memory_order_acquire);
    if (m.mirrored.load(std::memory_order_relaxed) != v) {
      // As rows of 4096, so that a big buffer is rounded on all threads.
      const int64_t rows = m.n / 4096, tail = m.n - rows * 4096;
      round_rows_bf16(m.base, rows, 4096, 4096, m.bf16.data());
      round_row_bf16(m.base + rows * 4096, tail, m.bf16.data() + rows * 4096);
      m.mirrored.store(v, std::memory_order_release);
    }
  }
  return m.bf16.data() + (p - base);
}

// What a thread's operand buffer holds: the rounding of (src, rows, cols, ld), made inside the
// outermost SameOperandsScope numbered `scope` (0: outside any). Reusable only inside that same scope:
// a pointer rounded before it may hold other values by now.
struct RoundedFrom {
  const float* src = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  uint64_t scope = 0;
};
thread_local int t_same_operands = 0;  // depth of nested scopes
thread_local uint64_t t_scope = 0;     // number of the current outermost scope

// op(X) (rows, cols) stored with leading dimension ld as a bfloat16 matrix: the mirror (same ld), or
// rounded into `buf` (packed, ld = stored columns), or what `buf` already holds of it (`held`).
const uint16_t* bf16_operand(const float* x, bool trans, int64_t rows, int64_t cols, int64_t ld,
                             std::vector<uint16_t>& buf, RoundedFrom& held, int64_t& ld_out) {
  if (const uint16_t* w = mirrored(x)) {
    ld_out = ld;
    return w;
  }
  const int64_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  ld_out = stored_cols;
  const uint64_t scope = t_same_operands > 0 ? t_scope : 0;
  if (scope != 0 && held.scope == scope && held.src == x && held.rows == stored_rows &&
      held.cols == stored_cols && held.ld == ld)
    return buf.data();
  uint16_t* d = scratch(buf, stored_rows * stored_cols);
  round_rows_bf16(x, stored_rows, stored_cols, ld, d);
  held = RoundedFrom{x, stored_rows, stored_cols, ld, scope};
  return d;
}

// ---- OpenBLAS ----
void sgemm_openblas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

using Sgemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                       int64_t, float, float*, int64_t);

// bfloat16 products as sgemm on operands rounded to bfloat16 values: the same products (exact in
// float32), float32 sums. OpenBLAS's only bf16 (Debian's build has no sbgemm), and oneDNN's for small
// products, where its bf16 matmul costs more per call than it saves (attention's 64x64x32 blocks:
// ~2x slower than sgemm).
void bf16_by_sgemm(Sgemm sgemm, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
  thread_local std::vector<float> fa, fb;
  auto rounded = [](const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf) {
    float* d = scratch(buf, rows * cols);
    round_rows_bf16(x, rows, cols, ld, d);
    return d;
  };
  const float* a = rounded(A, ta ? K : M, ta ? M : K, lda, fa);
  const float* b = rounded(B, tb ? N : K, tb ? K : N, ldb, fb);
  sgemm(ta, tb, M, N, K, alpha, a, ta ? M : K, b, tb ? K : N, beta, C, ldc);
}

// ---- oneDNN ----
dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One matmul primitive per shape, transposes, leading dimensions and scalars, with its memory objects,
// per thread: a product then takes no lock and allocates nothing (oneDNN's own primitive cache makes
// the second thread's copy cheap).
struct MatmulKey {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb;
  float alpha, beta;
  int threads;
  bool bias;
  bool operator==(const MatmulKey& o) const {
    return M == o.M && N == o.N && K == o.K && lda == o.lda && ldb == o.ldb && ldc == o.ldc && ta == o.ta &&
           tb == o.tb && alpha == o.alpha && beta == o.beta && threads == o.threads && bias == o.bias;
  }
};
struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc,
                      int64_t{k.ta} * 4 + int64_t{k.tb} * 2 + int64_t{k.bias}, int64_t{k.threads}})
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    uint32_t ab[2];
    std::memcpy(&ab[0], &k.alpha, 4);
    std::memcpy(&ab[1], &k.beta, 4);
    return static_cast<size_t>((h ^ ab[0]) * 1099511628211ull ^ ab[1]);
  }
};
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory a, b, c, scratchpad, bias;
  size_t scratch_bytes = 0;
};

Matmul make_matmul(const MatmulKey& k) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // op(A) (M, K) and op(B) (K, N) as strided views: a transpose is swapped strides, no copy.
  const dnnl::memory::desc a({k.M, k.K}, dt::bf16, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  const dnnl::memory::desc b({k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  const dnnl::memory::desc c({k.M, k.N}, dt::f32, dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  // A caller-owned scratchpad per thread: the library's shared one is not safe under concurrent calls.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(k.beta);
    attr.set_post_ops(po);
  }
  // The bias (1, N): one float32 row broadcast over the M rows, added in the kernel.
  const dnnl::memory::desc bias({1, k.N}, dt::f32, dims{k.N, 1});
  const dnnl::matmul::primitive_desc pd(
      k.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr, engine());
  const dnnl::memory::desc pad = pd.scratchpad_desc();
  return Matmul{dnnl::matmul(pd),
                dnnl::memory(a, engine(), nullptr),
                dnnl::memory(b, engine(), nullptr),
                dnnl::memory(c, engine(), nullptr),
                dnnl::memory(pad, engine(), nullptr),
                k.bias ? dnnl::memory(bias, engine(), nullptr) : dnnl::memory(),
                pad.get_size()};
}

// Below this many multiply-adds a bf16 product runs as sgemm on rounded operands (bf16_by_sgemm).
constexpr int64_t kMatmulMinMacs = int64_t{1} << 20;

void bf16_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                 const float* bias = nullptr) {
  thread_local std::vector<uint16_t> ba, bb;
  thread_local RoundedFrom held_a, held_b;
  thread_local std::vector<uint8_t> pad;
  int64_t la = 0, lb = 0;
  const uint16_t* a = bf16_operand(A, ta, M, K, lda, ba, held_a, la);
  const uint16_t* b = bf16_operand(B, tb, K, N, ldb, bb, held_b, lb);
  // A primitive splits its work over the thread count it was created with; called from a parallel
  // region (attention's per-head products) it runs on one thread, and is created under, and cached
  // with, that count.
  const int threads = omp_get_max_threads();
  const bool serial = threads > 1 && omp_in_parallel();
  if (serial) omp_set_num_threads(1);
  thread_local std::unordered_map<MatmulKey, Matmul, MatmulKeyHash> cache;
  const MatmulKey key{M, N, K, la, lb, ldc, ta, tb, alpha, beta, serial ? 1 : threads, bias != nullptr};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_matmul(key)).first;
  Matmul& mm = it->second;
  thread_local dnnl::stream stream(engine());
  mm.a.set_data_handle(const_cast<uint16_t*>(a));
  mm.b.set_data_handle(const_cast<uint16_t*>(b));
  mm.c.set_data_handle(C);
  mm.scratchpad.set_data_handle(scratch(pad, static_cast<int64_t>(mm.scratch_bytes) + 1));
  if (bias) mm.bias.set_data_handle(const_cast<float*>(bias));
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.a.get()},
                                  {DNNL_ARG_WEIGHTS, mm.b.get()},
                                  {DNNL_ARG_DST, mm.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, mm.scratchpad.get()},
                                  {DNNL_ARG_BIAS, bias ? mm.bias.get() : nullptr}};
  const dnnl_status_t s = dnnl_primitive_execute(mm.prim.get(), stream.get(), bias ? 5 : 4, args);
  TFM_CHECK(s == dnnl_success, "gemm", "oneDNN bf16 matmul failed with status ", static_cast<int>(s), " on (",
            M, ", ", N, ", ", K, ")");
  if (serial) omp_set_num_threads(threads);
}

void sgemm_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t s =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  TFM_CHECK(s == dnnl_success, "gemm", "dnnl_sgemm failed with status ", static_cast<int>(s), " on (", M,
            ", ", N, ", ", K, ")");
}

// Which kernel runs a product: the precision and backend in use, and for bf16 on oneDNN, its size.
bool bf16_now(int64_t K) {
  return g_precision.load(std::memory_order_relaxed) == Precision::Bf16 && K > 0;
}
bool onednn_now() {
  return g_backend.load(std::memory_order_relaxed) == GemmBackend::OneDnn;
}
bool bf16_matmul(int64_t M, int64_t N, int64_t K) {
  return bf16_now(K) && onednn_now() && M * N * K >= kMatmulMinMacs && onednn_bf16_matmul_available();
}

}  // namespace

// oneDNN 2.x has bf16 matmul kernels only on CPUs with AVX-512 (avx512_core; native bf16 instructions
// with avx512_bf16); elsewhere (AVX2-only CPUs) it cannot create the primitive. Asked once, by creating
// one; where it fails, every bf16 product runs as sgemm on rounded operands (the same products).
bool onednn_bf16_matmul_available() {
  static const bool available = [] {
    try {
      make_matmul(MatmulKey{64, 64, 64, 64, 64, 64, false, false, 1.0f, 0.0f, 1, false});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

namespace {

// One product as the backend and precision decide, threaded by the library as it likes. With `bias`,
// C = alpha op(A) op(B) + bias and beta is unused: oneDNN's bf16 matmul adds the bias in the kernel; the
// other paths start C's rows as the bias and accumulate onto them (no second pass over C).
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (bias != nullptr) {
    // oneDNN's output scale (alpha) would scale the bias too.
    if (alpha == 1.0f && bf16_matmul(M, N, K)) {
      bf16_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, bias);
      return;
    }
#pragma omp parallel for if (M * N > (int64_t{1} << 20))
    for (int64_t i = 0; i < M; ++i) std::memcpy(C + i * ldc, bias, sizeof(float) * N);
    beta = 1.0f;
  }
  const Sgemm sgemm = onednn_now() ? sgemm_onednn : sgemm_openblas;
  if (bf16_matmul(M, N, K))
    bf16_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else if (bf16_now(K))
    bf16_by_sgemm(sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The tiles of a product inside a ThreadInvariantProducts scope: C's rows and columns cut at fixed
// multiples, K whole.
constexpr int64_t kTileRows = 64, kTileCols = 256;
thread_local int t_thread_invariant = 0;  // depth of nested ThreadInvariantProducts scopes

// Below this many multiply-adds a product's tiles run one after another on the calling thread: a team
// costs more to start and join than it saves, and when the other core is busy, waiting for its thread
// costs a scheduler slice per product. Sampling 300 tokens of shakespeare_char, a team per decode-step
// product, took 4.73 s beside a busy loop and 0.13 s this way (AVX2 EPYC); quiet, 0.26x the wall time
// (5 A/B pairs). Decided by the shape alone, so the bits stay the same at any thread count.
constexpr int64_t kTeamWork = int64_t{1} << 20;

// The product as tiles fixed by (M, N), each one single-threaded library call: the library runs serially
// inside an active parallel region, or with one thread allowed outside one. The tiles are spread over the
// threads, so the thread count decides who computes a tile, never how.
void product_in_tiles(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                      const float* bias) {
  const int64_t row_tiles = (M + kTileRows - 1) / kTileRows, col_tiles = (N + kTileCols - 1) / kTileCols;
  const auto tile = [&](int64_t t) {
    const int64_t i0 = t / col_tiles * kTileRows, j0 = t % col_tiles * kTileCols;
    const int64_t m = std::min(kTileRows, M - i0), n = std::min(kTileCols, N - j0);
    // op(A)'s rows i0.. and op(B)'s columns j0..: a transposed operand is stored the other way round.
    const float* a = ta ? A + i0 : A + i0 * lda;
    const float* b = tb ? B + j0 * ldb : B + j0;
    product(ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, C + i0 * ldc + j0, ldc, bias ? bias + j0 : nullptr);
  };
  if (row_tiles * col_tiles == 1 || M * N * K < kTeamWork) {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int64_t t = 0; t < row_tiles * col_tiles; ++t) tile(t);
    omp_set_num_threads(threads);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < row_tiles * col_tiles; ++t) tile(t);
}

void gemm_any(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M == 0 || N == 0) return;
  g_flops.fetch_add(static_cast<uint64_t>(2 * M * N * K), std::memory_order_relaxed);
  // A worker thread of a parallel region (attention's per-head products) already runs the library serially.
  if (t_thread_invariant > 0 && !omp_in_parallel())
    product_in_tiles(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  else
    product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_any(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  gemm_any(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, bias);
}

ThreadInvariantProducts::ThreadInvariantProducts() {
  ++t_thread_invariant;
}
ThreadInvariantProducts::~ThreadInvariantProducts() {
  --t_thread_invariant;
}

uint64_t gemm_flops() {
  return g_flops.load(std::memory_order_relaxed);
}

void set_gemm_precision(Precision p) {
  g_precision.store(p);
}
Precision gemm_precision() {
  return g_precision.load();
}
void set_gemm_backend(GemmBackend b) {
  g_backend.store(b);
}
GemmBackend gemm_backend() {
  return g_backend.load();
}
const char* precision_name(Precision p) {
  return name_of(p).c_str();
}
const char* gemm_backend_name(GemmBackend b) {
  return name_of(b).c_str();
}

template <>
const std::vector<std::string>& enum_names<Precision>() {
  static const std::vector<std::string> names = {"fp32", "bf16"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<GemmBackend>() {
  static const std::vector<std::string> names = {"openblas", "onednn"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<GemmBackendChoice>() {
  static const std::vector<std::string> names = {"auto", "openblas", "onednn"};
  return names;
}

Precision parse_precision(const std::string& name, const std::string& where) {
  if (const auto p = enum_from<Precision>(name)) return *p;
  throw ConfigError(where + ": expected " + enum_choices<Precision>() + ", got \"" + name + "\"");
}

namespace {
GemmBackendChoice parse_gemm_backend(const std::string& name, const std::string& where) {
  if (const auto choice = enum_from<GemmBackendChoice>(name)) return *choice;
  throw ConfigError(where + ": expected " + enum_choices<GemmBackendChoice>() + ", got \"" + name + "\"");
}
}  // namespace

template <>
const std::vector<std::string>& enum_names<PrecisionChoice>() {
  static const std::vector<std::string> names = {"auto", "fp32", "bf16"};
  return names;
}

CpuBf16 cpu_bf16() {
  CpuBf16 f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  // The OS must save the registers: OSXSAVE, then XCR0's opmask/ZMM bits (5-7) for AVX-512 and its tile
  // bits (17-18) for AMX.
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || __get_cpuid_max(0, nullptr) < 7) return f;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  const bool zmm = (xcr0 & 0xE6) == 0xE6, tiles = (xcr0 & (3ull << 17)) == (3ull << 17);
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx512f = (b & (1u << 16)) != 0;
  f.amx_bf16 = tiles && (d & (1u << 22)) != 0;  // CPUID.(7, 0):EDX[22]
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = zmm && avx512f && (a & (1u << 5)) != 0;  // CPUID.(7, 1):EAX[5]
  return f;
}

ResolvedPrecision resolve_precision(PrecisionChoice choice, GemmBackend backend, const CpuBf16& cpu) {
  if (choice == PrecisionChoice::Fp32) return {Precision::Fp32, "train.precision \"fp32\""};
  if (choice == PrecisionChoice::Bf16) return {Precision::Bf16, "train.precision \"bf16\""};
  if (backend != GemmBackend::OneDnn) return {Precision::Fp32, "the openblas backend has no bf16 kernels"};
  if (cpu.amx_bf16) return {Precision::Bf16, "amx_bf16"};
  if (cpu.avx512_bf16) return {Precision::Bf16, "avx512_bf16"};
  return {Precision::Fp32, "no avx512_bf16 or amx_bf16 on this CPU: bf16 would be emulated"};
}

ResolvedPrecision resolve_precision(PrecisionChoice choice, GemmBackend backend) {
  return resolve_precision(choice, backend, cpu_bf16());
}

GemmBackend resolve_gemm_backend(GemmBackendChoice choice) {
  if (choice == GemmBackendChoice::Auto) {
    const char* env = std::getenv("TFM_GEMM_BACKEND");
    if (env && *env) choice = parse_gemm_backend(env, "TFM_GEMM_BACKEND");
  }
  return choice == GemmBackendChoice::OpenBlas ? GemmBackend::OpenBlas : GemmBackend::OneDnn;
}

GemmBackend resolve_gemm_backend(const std::string& name, const std::string& where) {
  return resolve_gemm_backend(parse_gemm_backend(name, where));
}

GemmModeGuard::GemmModeGuard(Precision p, GemmBackend b)
    : precision_(gemm_precision()), backend_(gemm_backend()) {
  set_gemm_precision(p);
  set_gemm_backend(b);
}
GemmModeGuard::~GemmModeGuard() {
  set_gemm_precision(precision_);
  set_gemm_backend(backend_);
}

WeightMirror::WeightMirror(const float* base, int64_t n) {
  Mirror& m = mirror();
  std::lock_guard<std::mutex> lock(m.mu);
  TFM_CHECK(m.base == nullptr, "WeightMirror", "expected no registered buffer, got one of ", m.n, " floats");
  m.bf16.assign(static_cast<size_t>(n), 0);
  m.n = n;
  m.version.fetch_add(1);
  m.base = base;
}
WeightMirror::~WeightMirror() {
  Mirror& m = mirror();
  std::lock_guard<std::mutex> lock(m.mu);
  m.base = nullptr;
  m.n = 0;
  std::vector<uint16_t>().swap(m.bf16);
}
SameOperandsScope::SameOperandsScope() {
  if (t_same_operands++ == 0) ++t_scope;
}
SameOperandsScope::~SameOperandsScope() {
  --t_same_operands;
}

void weights_changed(const float* values) {
  Mirror& m = mirror();
  if (values == m.base) m.version.fetch_add(1, std::memory_order_release);
}

uint16_t to_bf16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}
int blas_threads() {
  return openblas_get_num_threads();
}
const char* blas_core_name() {
  return openblas_get_corename();
}
const char* blas_config() {
  return openblas_get_config();
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                                             : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + runtime + " threads)";
}

}  // namespace tfm
