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

// The peak a training run quotes MFU against: the square product of kTrainingPeakN on this machine,
// with the current threads, backend and precision. The first run on a setup times it for
// kTrainingPeakSeconds and keeps it in the user's cache (gemm_peak_cache_path()); later runs read it
// there, for kTrainingPeakMaxAgeDays, rather than spend their first 0.3 s timing it again (most of a
// short run). Runs starting together time it once (a lock beside the cache). `tfm bench gemm` replaces
// the entry with its own timing (store_training_gemm_peak). A cache that cannot be read or written
// never stops a run: the peak is timed, and `cache_problem` says what went wrong.
constexpr int64_t kTrainingPeakN = 1024;
constexpr double kTrainingPeakSeconds = 0.3;
constexpr int kTrainingPeakMaxAgeDays = 30;
struct GemmPeak {
  double gflops = 0.0;
  std::string measured;           // when, UTC: "2026-11-26 11:40 UTC"
  bool from_cache = false;        // read from the cache, not timed by this run
  bool written_to_cache = false;  // timed by this run and kept for the next ones
  std::string cache_problem;      // what went wrong with the cache, "" when nothing did
};
GemmPeak training_gemm_peak();
// Keeps `gflops`, timed now at size n for `seconds` in the current setup, as training runs' peak, when
// it is one a run would time (n is kTrainingPeakN, timed at least kTrainingPeakSeconds). Returns why it
// was not kept, "" when it was.
std::string store_training_gemm_peak(int64_t n, double seconds, double gflops);
// ${XDG_CACHE_HOME:-$HOME/.cache}/tfm/gemm_peaks.json; "" when neither variable is set.
std::string gemm_peak_cache_path();

}  // namespace tfm
