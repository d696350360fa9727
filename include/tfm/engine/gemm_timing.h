// This machine's GEMM speed through tfm::gemm, in the current backend and precision: the square peak
// that MFU figures are quoted against (the training log, tfm bench gemm) and the timing of one shape.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tfm {

struct GemmTiming {
  std::string label;  // what the shape is for, e.g. "fc1 forward"
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  double median_ms = 0.0;
  double gflops = 0.0;  // 2*M*N*K / median time
  // The CPU time the process got while timing, over the wall time times the product's threads: ~1 on
  // a quiet machine, 0.5 when another program had half of each core (the rate is then that much low).
  double core_share = 1.0;
  int threads = 1;  // the product's threads (OpenBLAS's, or OpenMP's for oneDNN)
};

// The share of its cores a timed piece of work got: started at construction, read by share(). The
// process's CPU time over the wall time times the cores its `threads` can use (no more than the
// machine's: more threads than cores are not a busy machine). Threads that wait for a descheduled one
// may spin (and count): a busy machine can only read higher than it was, never lower.
class CoreShareMeter {
 public:
  CoreShareMeter();
  double share(int threads) const;  // in (0, 1]; 1 when no time has passed

 private:
  double cpu_start_, wall_start_;
};

// The rate the product ran at while it had its cores: gflops / core_share. On a busy machine the timed
// rate is that much below the machine's (another program had the rest of the time), and a run's MFU
// against it would read above 100%; a quiet timing (core_share ~1) is its own rate.
double rate_while_running(const GemmTiming& timing);

// Times C = op(A) op(B) for at least min_seconds (after a warm-up) and returns the median.
GemmTiming time_gemm(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                     double min_seconds);
// The square n x n x n product in the current backend and precision: its rate is the measured peak for
// MFU.
GemmTiming measure_gemm_peak(int64_t n = 1024, double min_seconds = 1.0);
// A peak timed with less than this share of its cores (GemmTiming::core_share) was timed on a busy
// machine: it is reported, and used by the run that timed it, but never kept for later runs (a test
// suite beside a compiler had timed 60 of this core's 96 GFLOP/s, and every later run's MFU was 1.6x).
constexpr double kPeakMinCoreShare = 0.8;

// The peak a training run quotes MFU against: the square product of kTrainingPeakN on this machine,
// with the current threads, backend and precision. The first run on a setup times it for
// kTrainingPeakSeconds and keeps it in the user's cache (gemm_peak_cache_path()); later runs read it
// there, for kTrainingPeakMaxAgeDays, rather than spend their first 0.3 s timing it again (most of a
// short run). Runs starting together time it once (a lock beside the cache). `tfm bench gemm` replaces
// the entry with its own timing (store_training_gemm_peak). A timing made on a busy machine is not kept
// (kPeakMinCoreShare). A cache that cannot be read or written never stops a run: the peak is timed,
// and `cache_problem` says what went wrong. The environment variable TFM_MFU_PEAK (GFLOP/s, e.g. what
// `tfm bench gemm` printed on a quiet machine) gives the peak instead: nothing is timed or cached, for
// a machine whose load would spoil every timing (a shared one, a test suite); a value that is not a
// number in (0, 1e7] is a ConfigError naming the variable.
constexpr int64_t kTrainingPeakN = 1024;
constexpr double kTrainingPeakSeconds = 0.3;
constexpr int kTrainingPeakMaxAgeDays = 30;
struct GemmPeak {
  double gflops = 0.0;
  std::string measured;           // when, UTC: "2026-11-26 11:40 UTC"
  bool from_cache = false;        // read from the cache, not timed by this run
  bool written_to_cache = false;  // timed by this run and kept for the next ones
  bool from_environment = false;  // TFM_MFU_PEAK's: neither timed nor cached
  std::string cache_problem;      // what went wrong with the cache, "" when nothing did
};
GemmPeak training_gemm_peak();
// TFM_MFU_PEAK's figure, none when it is unset or empty; ConfigError naming it when it is not a number in
// (0, 1e7]. A training checks it with its other input, before anything is written.
std::optional<double> mfu_peak_from_environment();
// Keeps `peak`, timed now (measure_gemm_peak) for `seconds` in the current setup, as training runs'
// peak, when it is one a run would time (n is kTrainingPeakN, timed at least kTrainingPeakSeconds) on a
// machine that was not busy. Returns why it was not kept, "" when it was.
std::string store_training_gemm_peak(const GemmTiming& peak, double seconds);
// ${XDG_CACHE_HOME:-$HOME/.cache}/tfm/gemm_peaks.json; "" when neither variable is set.
std::string gemm_peak_cache_path();

}  // namespace tfm
