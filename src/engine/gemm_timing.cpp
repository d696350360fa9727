#include "tfm/engine/gemm_timing.h"

#include <fmt/format.h>
#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"

namespace tfm {

namespace {
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of every thread of this process.
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Operands are tensors, the kind of memory the model's products use (the pool's: 2 MiB pages for the
// large ones).
GemmTiming time_gemm_on_tensors(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a,
                                bool trans_b, double min_seconds) {
  Rng rng(1);
  const Tensor a = Tensor::uniform({M, K}, rng, -1.0f, 1.0f);
  const Tensor b = Tensor::uniform({K, N}, rng, -1.0f, 1.0f);
  Tensor c = Tensor::zeros({M, N});
  const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  using clock = std::chrono::steady_clock;
  gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);  // warm-up
  std::vector<double> ms;
  const CoreShareMeter meter;
  const auto start = clock::now();
  while (ms.size() < 3 || std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    if (ms.size() >= 10000) break;
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  GemmTiming t{label, M, N, K, trans_a, trans_b, ms[ms.size() / 2], 0.0};
  t.gflops = 2.0 * M * N * K / (t.median_ms * 1e-3) / 1e9;
  t.threads = std::max(gemm_backend() == GemmBackend::OneDnn ? omp_get_max_threads() : blas_threads(), 1);
  t.core_share = meter.share(t.threads);
  return t;
}
}  // namespace

CoreShareMeter::CoreShareMeter() : cpu_start_(process_cpu_seconds()), wall_start_(wall_seconds()) {}

double CoreShareMeter::share(int threads) const {
  const double wall = wall_seconds() - wall_start_, cpu = process_cpu_seconds() - cpu_start_;
  const int usable = std::max(1, std::min(threads, platform::available_cores()));
  return wall > 0 ? std::min(cpu / (wall * usable), 1.0) : 1.0;
}

double rate_while_running(const GemmTiming& t) {
  return t.core_share > 0 ? t.gflops / t.core_share : t.gflops;
}

GemmTiming time_gemm(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                     double min_seconds) {
  // The pool's peak is set back once the operands are released: a run's "tensors peaked at" is the
  // model's, not this product's.
  const size_t peak_before = memory::stats().peak_live_bytes;
  const GemmTiming t = time_gemm_on_tensors(label, M, N, K, trans_a, trans_b, min_seconds);
  memory::restore_peak(peak_before);
  return t;
}

GemmTiming measure_gemm_peak(int64_t n, double min_seconds) {
  return time_gemm("square", n, n, n, false, false, min_seconds);
}

namespace {
constexpr const char* kPeakCacheFormat = "tfm gemm peaks 1";
constexpr size_t kPeakMaxEntries = 64;            // the oldest go first
constexpr uint64_t kPeakCacheMaxBytes = 1 << 20;  // 64 entries are ~20 KB
constexpr double kPeakMaxGflops = 1e7;            // 10 PFLOP/s: anything above is not a measurement
constexpr const char* kNoCacheDirectory = "not kept: neither XDG_CACHE_HOME nor HOME is set";

// What the peak depends on, one entry each: the machine and its CPU, the OpenBLAS kernels and threads,
// OpenMP's threads (oneDNN's), the backend and precision of the products (with oneDNN's release and an
// ISA limit set for it), and whether this tfm is a sanitizer build (its bf16 rounding is slower).
std::string peak_key() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const GemmBackend backend = gemm_backend();
  std::string key = std::string(host) + " | " + platform::cpu_name() + " | OpenBLAS " + blas_core_name() +
                    ", " + std::to_string(blas_threads()) + " thread(s); OpenMP " +
                    std::to_string(omp_get_max_threads()) + " thread(s) | " + gemm_backend_name(backend) +
                    " " + precision_name(gemm_precision());
  if (backend == GemmBackend::OneDnn) {
    key += " (" + onednn_version();
    if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA"))
      key += std::string(", ONEDNN_MAX_CPU_ISA=") + isa;
    key += ")";
  }
#if defined(__SANITIZE_ADDRESS__)
  key += " | sanitizers";
#endif
  return key + " | n " + std::to_string(kTrainingPeakN);
}

std::string utc_text(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

int64_t now_seconds() {
  return static_cast<int64_t>(std::time(nullptr));
}

// The cache's entries ({} when there is no file yet); IoError when it cannot be read or is not one.
nlohmann::json read_peak_cache(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return nlohmann::json::object();
  require_regular_or_absent(path);  // a link there is not read either
  const std::string bytes = read_file(path, kPeakCacheMaxBytes);
  const nlohmann::json j = parse_json_strict(bytes.data(), bytes.size(), path);
  const bool ok = j.is_object() && j.contains("format") && j["format"].is_string() &&
                  j["format"].get<std::string>() == kPeakCacheFormat && j.contains("peaks") &&
                  j["peaks"].is_object();
  if (!ok)
    throw IoError(path + ": not a GEMM peak cache (expected {\"format\": \"" + kPeakCacheFormat +
                  "\", \"peaks\": {...}})");
  return j["peaks"];
}

// Whether a cache entry holds a plausible rate and a time of measurement that fits an int64_t.
bool valid_entry(const nlohmann::json& e) {
  return e.is_object() && e.contains("gflops") && e["gflops"].is_number() && e["gflops"].get<double>() > 0 &&
         e["gflops"].get<double>() < kPeakMaxGflops && e.contains("unix_time") &&
         e["unix_time"].is_number_integer() &&
         (!e["unix_time"].is_number_unsigned() ||  // JSON's positive integers read as unsigned
          e["unix_time"].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
}

// Whether an entry measured at `when` is still used now: not older than kTrainingPeakMaxAgeDays and
// not from the future (compared without a subtraction that could overflow).
bool fresh(int64_t when) {
  const int64_t now = now_seconds();
  return when <= now && when > now - int64_t{kTrainingPeakMaxAgeDays} * 24 * 3600;
}

void write_peak_cache(const std::string& path, nlohmann::json peaks) {
  // The entries that are whole, newest first, at most kPeakMaxEntries of them.
  std::vector<std::pair<int64_t, std::string>> by_age;
  for (auto it = peaks.begin(); it != peaks.end(); ++it)
    if (valid_entry(it.value())) by_age.emplace_back(it.value()["unix_time"].get<int64_t>(), it.key());
  std::sort(by_age.rbegin(), by_age.rend());
  nlohmann::json kept = nlohmann::json::object();
  for (size_t i = 0; i < by_age.size() && i < kPeakMaxEntries; ++i)
    kept[by_age[i].second] = peaks[by_age[i].second];
  const nlohmann::json doc = {{"format", kPeakCacheFormat}, {"peaks", kept}};
  write_file_atomically(path, doc.dump(2) + "\n");
}

// The cache's entries, or {} and why not in `problem`.
nlohmann::json read_peaks_or_none(const std::string& path, std::string& problem) {
  try {
    return read_peak_cache(path);
  } catch (const std::exception& e) {  // IoError, or a JSON value of an unexpected type
    problem = std::string("the cache could not be read: ") + e.what();
    return nlohmann::json::object();
  }
}

// Adds (or replaces) this setup's entry and writes the cache; "" or why it was not written.
std::string store_peak(const std::string& path, double gflops, nlohmann::json peaks) {
  const int64_t now = now_seconds();
  try {
    peaks[peak_key()] = {{"gflops", gflops}, {"unix_time", now}, {"measured", utc_text(now)}};
    write_peak_cache(path, std::move(peaks));
    return "";
  } catch (const std::exception& e) {
    return std::string("the cache was not written: ") + e.what();
  }
}

// Why a timing is not one to keep for later runs, "" when it is.
std::string busy_problem(const GemmTiming& peak) {
  if (peak.core_share >= kPeakMinCoreShare) return "";
  const int cores = platform::available_cores();
  if (peak.threads > cores)
    return fmt::format(
        "not kept: {} threads on {} core(s) wait on each other (the product had {:.0f}% of the cores); "
        "threads up to the cores measure a peak to keep",
        peak.threads, cores, 100.0 * peak.core_share);
  return fmt::format(
      "not kept: the machine was busy (the product had {:.0f}% of its {} core(s)); `tfm bench gemm` on a "
      "quiet machine keeps one",
      100.0 * peak.core_share, peak.threads);
}

// An exclusive lock on PATH.lock, so that runs starting together time the peak once and the others read
// that timing; none when it cannot be had (each then times it).
std::optional<ExclusiveFileLock> lock_peak_cache(const std::string& path) {
  std::optional<ExclusiveFileLock> lock;
  try {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    lock.emplace(path + ".lock");
  } catch (const std::exception&) {
  }
  return lock;
}
}  // namespace

std::string gemm_peak_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/tfm/gemm_peaks.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/tfm/gemm_peaks.json";
  return "";
}

std::optional<double> mfu_peak_from_environment() {
  const char* given = std::getenv("TFM_MFU_PEAK");
  if (!given || !*given) return std::nullopt;
  char* end = nullptr;
  const double gflops = std::strtod(given, &end);
  if (end == given || *end != '\0' || !(gflops > 0) || gflops > kPeakMaxGflops)
    throw ConfigError(fmt::format("TFM_MFU_PEAK: expected a number of GFLOP/s in (0, {:g}], got \"{}\"",
                                  kPeakMaxGflops, given));
  return gflops;
}

GemmPeak training_gemm_peak() {
  GemmPeak peak;
  if (const std::optional<double> given = mfu_peak_from_environment()) {
    peak.gflops = *given;
    peak.from_environment = true;
    return peak;
  }
  const std::string path = gemm_peak_cache_path();
  if (path.empty()) {
    peak.gflops = measure_gemm_peak(kTrainingPeakN, kTrainingPeakSeconds).gflops;
    peak.measured = utc_text(now_seconds());
    peak.cache_problem = kNoCacheDirectory;
    return peak;
  }
  const auto lock = lock_peak_cache(path);
  nlohmann::json peaks = read_peaks_or_none(path, peak.cache_problem);
  const auto it = peaks.find(peak_key());
  if (it != peaks.end() && valid_entry(*it) && fresh((*it)["unix_time"].get<int64_t>())) {
    peak.gflops = (*it)["gflops"].get<double>();
    peak.measured = utc_text((*it)["unix_time"].get<int64_t>());
    peak.from_cache = true;
    return peak;
  }
  const GemmTiming timed = measure_gemm_peak(kTrainingPeakN, kTrainingPeakSeconds);
  peak.gflops = timed.gflops;
  peak.measured = utc_text(now_seconds());
  std::string problem = busy_problem(timed);
  if (problem.empty()) {
    problem = store_peak(path, peak.gflops, std::move(peaks));
  } else {
    // Not kept, but this run's MFU needs a peak: the rate the product had while it ran.
    peak.gflops = rate_while_running(timed);
    problem += fmt::format(
        "; the peak above is the {:.1f} GFLOP/s timed over the wall clock scaled to the whole core(s): the "
        "rate "
        "while the product ran",
        timed.gflops);
  }
  peak.written_to_cache = problem.empty();
  if (!problem.empty()) peak.cache_problem += (peak.cache_problem.empty() ? "" : "; ") + problem;
  return peak;
}

std::string store_training_gemm_peak(const GemmTiming& peak, double seconds) {
  if (peak.M != kTrainingPeakN || peak.N != kTrainingPeakN || peak.K != kTrainingPeakN)
    return fmt::format("not kept: training runs measure n = {}", kTrainingPeakN);
  if (seconds < kTrainingPeakSeconds)
    return fmt::format("not kept: timed for less than a training run's {:g} s", kTrainingPeakSeconds);
  if (std::string busy = busy_problem(peak); !busy.empty()) return busy;
  const std::string path = gemm_peak_cache_path();
  if (path.empty()) return kNoCacheDirectory;
  const auto lock = lock_peak_cache(path);
  std::string unread;  // an unreadable cache is replaced by one holding this entry
  return store_peak(path, peak.gflops, read_peaks_or_none(path, unread));
}

}  // namespace tfm
