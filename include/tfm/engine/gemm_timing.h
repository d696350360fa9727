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

// The peak a training run quotes MFU against: the square product of kTrainingPeakN, for this CPU and
// the current threads, backend and precision. Measured the first time (for kTrainingPeakSeconds) and
// kept in the user's cache (gemm_peak_cache_path()), read from there later: measuring cost every start
// its first 0.3 s, most of a short run. An entry is measured again once 30 days old, and `tfm bench
// gemm` replaces it with its own measurement (remember_gemm_peak). The cache never stops a run: one
// that cannot be read is measured over, one that cannot be written is left as it is, and `note` says
// why.
constexpr int64_t kTrainingPeakN = 1024;
constexpr double kTrainingPeakSeconds = 0.3;
struct GemmPeak {
  double gflops = 0.0;
  std::string measured;  // when, UTC: "2026-11-26 11:40 UTC"
  bool cached = false;   // read from the cache rather than measured now
  bool kept = false;     // measured now and written to the cache
  std::string note;      // what went wrong with the cache, "" when nothing did
};
GemmPeak training_gemm_peak();
// Keeps `gflops`, measured now in the current setup at size n for `seconds`, as the training peak
// when it is one (n is kTrainingPeakN, timed at least as long as a run would). Returns why it was not
// kept, "" when it was.
std::string remember_gemm_peak(int64_t n, double seconds, double gflops);
// ${XDG_CACHE_HOME:-$HOME/.cache}/tfm/gemm_peaks.json; "" when neither variable is set.
std::string gemm_peak_cache_path();

}  // namespace tfm
