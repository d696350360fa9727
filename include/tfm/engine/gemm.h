// The one GEMM wrapper: every matrix product in tfm goes through here.
//   C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C,  all row-major,
// op(X) = X^T when trans is set. With beta = 1 a backward pass accumulates straight into a gradient.
//
// Below the model, two process-wide settings decide how a product runs (the trainer sets them, so
// every layer and objective gets them without knowing):
//  - the backend: OpenBLAS cblas_sgemm, or oneDNN (dnnl_sgemm for float32, matmul for bfloat16);
//  - the precision: float32, or bfloat16 operands with float32 accumulation and a float32 C (what
//    torch.autocast does for matrix products). Operands are rounded to bfloat16 (nearest even) at the
//    GEMM; a registered weight buffer is rounded once per optimizer step instead (WeightMirror).
//    OpenBLAS has no bfloat16 kernels here: it runs sgemm on the rounded values (the same products,
//    exact in float32; only the summation order differs), for tests, not speed. oneDNN does the same
//    for products under 2^20 multiply-adds, where its bf16 matmul costs more per call than it saves, and
//    for all of them on a CPU without AVX-512, where oneDNN has no bf16 matmul.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/engine/enum_names.h"

namespace tfm {

// The train.precision and train.gemm_backend options (config/train_config.h binds them); spelled by
// enum_names: "fp32", "bf16"; "openblas", "onednn"; "auto", "openblas", "onednn".
enum class Precision { Fp32, Bf16 };
enum class GemmBackend { OpenBlas, OneDnn };
// The backend a config asks for: Auto takes TFM_GEMM_BACKEND when set, else oneDNN.
enum class GemmBackendChoice { Auto, OpenBlas, OneDnn };
// The precision a config asks for (train.precision): "auto", "fp32", "bf16".
enum class PrecisionChoice { Auto, Fp32, Bf16 };
template <>
const std::vector<std::string>& enum_names<PrecisionChoice>();
template <>
const std::vector<std::string>& enum_names<Precision>();
template <>
const std::vector<std::string>& enum_names<GemmBackend>();
template <>
const std::vector<std::string>& enum_names<GemmBackendChoice>();

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C (M, N) = alpha * op(A) op(B) + bias, bias (N) added to every row: a linear layer's forward. oneDNN's
// bf16 matmul adds it in the kernel; the other paths copy it into C's rows and accumulate onto it.
void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// Whether oneDNN can run bf16 matmul kernels on this CPU (it needs AVX-512); without them bf16
// products run as sgemm on rounded operands, as under OpenBLAS.
bool onednn_bf16_matmul_available();

// The CPU's native bfloat16 instructions that oneDNN's bf16 matmul kernels use, as CPUID and the OS
// (XCR0) report them: AVX512_BF16 (vdpbf16ps) and AMX-BF16 (tile products).
struct CpuBf16 {
  bool avx512_bf16 = false, amx_bf16 = false;
};
CpuBf16 cpu_bf16();
// train.precision "auto" decided: bf16 when oneDNN runs the products and the CPU has native bf16
// instructions (AMX-BF16 or AVX512_BF16: bf16 matmuls then run ~1.5-2x fp32's rate), else fp32 (without
// them oneDNN's bf16 is emulated on AVX-512 or absent, and OpenBLAS has no bf16 kernels: no faster).
// "fp32" and "bf16" stay themselves. `reason` says why, for the start-up log ("avx512_bf16").
struct ResolvedPrecision {
  Precision precision = Precision::Fp32;
  std::string reason;
};
ResolvedPrecision resolve_precision(PrecisionChoice choice, GemmBackend backend, const CpuBf16& cpu);
// The same on this machine's CPU.
ResolvedPrecision resolve_precision(PrecisionChoice choice, GemmBackend backend);

// Floating-point operations issued through gemm() since start (2*M*N*K each), for MFU figures.
uint64_t gemm_flops();

void set_gemm_precision(Precision p);
Precision gemm_precision();
void set_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();
const char* precision_name(Precision p);
const char* gemm_backend_name(GemmBackend b);
// "fp32" | "bf16" (train.precision); anything else is a ConfigError naming `where`.
Precision parse_precision(const std::string& name, const std::string& where = "train.precision");
// "openblas" | "onednn" | "auto" (train.gemm_backend). "auto" takes TFM_GEMM_BACKEND when set, else
// oneDNN (faster on the model's shapes in both precisions, `tfm bench gemm`).
GemmBackend resolve_gemm_backend(const std::string& name, const std::string& where = "train.gemm_backend");
GemmBackend resolve_gemm_backend(GemmBackendChoice choice);

// Sets precision and backend for a scope and restores the previous ones when it ends.
class GemmModeGuard {
 public:
  GemmModeGuard(Precision p, GemmBackend b);
  ~GemmModeGuard();
  GemmModeGuard(const GemmModeGuard&) = delete;
  GemmModeGuard& operator=(const GemmModeGuard&) = delete;

 private:
  Precision precision_;
  GemmBackend backend_;
};

// Registers [base, base + n) (the model's flat parameter buffer) for the scope: a bfloat16 product
// reads an operand inside it from a bfloat16 copy of the whole buffer, made on first use after each
// weights_changed() (Optimizer::step calls it), instead of rounding the weight in every GEMM.
// One buffer at a time; outside the scope every operand is rounded at the GEMM.
class WeightMirror {
 public:
  WeightMirror(const float* base, int64_t n);
  ~WeightMirror();
  WeightMirror(const WeightMirror&) = delete;
  WeightMirror& operator=(const WeightMirror&) = delete;
};
// The values of the registered buffer starting at `values` changed (no-op for any other pointer).
void weights_changed(const float* values);

// Inside the scope, a bfloat16 product on this thread may reuse the rounding of an operand that the
// previous product rounded from the same memory (pointer, stored shape, leading dimension) instead of
// rounding it again. The caller promises that memory read as an operand more than once inside the
// scope holds the same values each time: a backward's dY, read by both its dX and its dW product.
// Scopes nest; outside them nothing is reused (a rounding made before the scope never is).
class SameOperandsScope {
 public:
  SameOperandsScope();
  ~SameOperandsScope();
  SameOperandsScope(const SameOperandsScope&) = delete;
  SameOperandsScope& operator=(const SameOperandsScope&) = delete;
};

// Inside the scope, on this thread, a product's bits do not depend on the thread count. Left to
// themselves the libraries do not promise that: oneDNN's sgemm splits K over the threads for a short,
// wide product (a decode step's 1 x N x K) and adds the parts, and both libraries hand an edge of C to
// another kernel when they cut it for another thread count (on an AVX2 EPYC, 1 and 2 threads differed in
// the last bits for 18% of the shapes tried with oneDNN, 42% with OpenBLAS). Inside the scope the wrapper
// cuts C itself into tiles fixed by (M, N) alone, 64 rows by 256 columns with K whole, and computes each
// with one single-threaded library call, the tiles spread over the threads (a product under 2^20
// multiply-adds, most of a decode step's, runs its tiles on the calling thread: no team to wake). generate()
// holds one, so a seed gives the same text at any thread count. Training does not: the libraries' own
// threading is faster for its long-K weight gradients (a run's losses may differ in the last bits between
// thread counts).
class ThreadInvariantProducts {
 public:
  ThreadInvariantProducts();
  ~ThreadInvariantProducts();
  ThreadInvariantProducts(const ThreadInvariantProducts&) = delete;
  ThreadInvariantProducts& operator=(const ThreadInvariantProducts&) = delete;
};

// float32 -> bfloat16, round to nearest even (NaN stays NaN), and back.
uint16_t to_bf16(float x);
float from_bf16(uint16_t h);

// OpenBLAS threads (set once at start-up; 0 = leave OpenBLAS's choice).
void set_blas_threads(int n);
int blas_threads();
// The OpenBLAS core type in use (e.g. "Haswell", "SkylakeX") and its build configuration.
const char* blas_core_name();
const char* blas_config();
// oneDNN's version and threading runtime, e.g. "oneDNN 2.6.3 (OpenMP)".
std::string onednn_version();

}  // namespace tfm
