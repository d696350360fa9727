#include "tfm/engine/gemm_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/random.h"

namespace tfm {

GemmTiming time_gemm(const std::string& label, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                     double min_seconds) {
  // Plain vectors, not tensors: the timing stays out of the tensor pool and its statistics (a run's
  // "tensors peaked at" is the model's, not this 1024-square product's).
  Rng rng(1);
  auto uniform = [&rng](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 2.0f * rng.uniform() - 1.0f;
    return v;
  };
  const std::vector<float> a = uniform(M * K), b = uniform(K * N);
  std::vector<float> c(static_cast<size_t>(M * N), 0.0f);
  const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  using clock = std::chrono::steady_clock;
  gemm(trans_a, trans_b, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);  // warm-up
  std::vector<double> ms;
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
  return t;
}

double measure_gemm_peak_gflops(int64_t n, double min_seconds) {
  return time_gemm("square", n, n, n, false, false, min_seconds).gflops;
}

namespace {
constexpr const char* kPeakCacheFormat = "tfm gemm peaks 1";
constexpr int64_t kPeakMaxAgeSeconds = 30 * 24 * 3600;
constexpr size_t kPeakMaxEntries = 64;            // the oldest go first
constexpr uint64_t kPeakCacheMaxBytes = 1 << 20;  // 64 entries are ~15 KB
constexpr const char* kNoCacheDirectory = "not kept: neither XDG_CACHE_HOME nor HOME is set";

// What the peak depends on, one entry each: the CPU, the OpenBLAS kernels and threads, the backend
// and precision of the products (and oneDNN's release when it computes them).
std::string peak_key() {
  const GemmBackend backend = gemm_backend();
  std::string key = platform::cpu_name() + " | OpenBLAS " + blas_core_name() + ", " +
                    std::to_string(blas_threads()) + " thread(s) | " + gemm_backend_name(backend) + " " +
                    precision_name(gemm_precision());
  if (backend == GemmBackend::OneDnn) key += " (" + onednn_version() + ")";
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
  const std::string bytes = read_file(path, kPeakCacheMaxBytes);
  const nlohmann::json j = parse_json_strict(bytes.data(), bytes.size(), path);
  if (!j.is_object() || j.value("format", "") != kPeakCacheFormat || !j.contains("peaks") ||
      !j["peaks"].is_object())
    throw IoError(path + ": not a GEMM peak cache (expected {\"format\": \"" + kPeakCacheFormat +
                  "\", \"peaks\": {...}})");
  return j["peaks"];
}

// Whether a cache entry holds a positive rate and the integer time it was measured.
bool valid_entry(const nlohmann::json& e) {
  return e.is_object() && e.contains("gflops") && e["gflops"].is_number() && e["gflops"].get<double>() > 0 &&
         e.contains("unix_time") && e["unix_time"].is_number_integer();
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
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the cache directory: " + ec.message());
  const nlohmann::json doc = {{"format", kPeakCacheFormat}, {"peaks", kept}};
  write_file_atomically(path, doc.dump(2) + "\n");
}

std::string store_peak(const std::string& path, const std::string& key, double gflops, nlohmann::json peaks) {
  const int64_t now = now_seconds();
  peaks[key] = {{"gflops", gflops}, {"unix_time", now}, {"measured", utc_text(now)}};
  try {
    write_peak_cache(path, std::move(peaks));
    return "";
  } catch (const Error& e) {
    return std::string("the cache was not written: ") + e.what();
  }
}
}  // namespace

std::string gemm_peak_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/tfm/gemm_peaks.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/tfm/gemm_peaks.json";
  return "";
}

GemmPeak training_gemm_peak() {
  const std::string path = gemm_peak_cache_path(), key = peak_key();
  GemmPeak peak;
  nlohmann::json peaks = nlohmann::json::object();
  if (!path.empty()) {
    try {
      peaks = read_peak_cache(path);
    } catch (const Error& e) {
      peak.note = std::string("the cache could not be read: ") + e.what();
    }
    const auto it = peaks.find(key);
    if (it != peaks.end() && valid_entry(*it)) {
      const int64_t when = (*it)["unix_time"].get<int64_t>();
      const int64_t age = now_seconds() - when;  // one from the future is measured again too
      if (age >= 0 && age < kPeakMaxAgeSeconds) {
        peak.gflops = (*it)["gflops"].get<double>();
        peak.measured = utc_text(when);
        peak.cached = true;
        return peak;
      }
    }
  }
  peak.gflops = measure_gemm_peak_gflops(kTrainingPeakN, kTrainingPeakSeconds);
  peak.measured = utc_text(now_seconds());
  const std::string problem =
      path.empty() ? kNoCacheDirectory : store_peak(path, key, peak.gflops, std::move(peaks));
  peak.kept = problem.empty();
  if (!problem.empty()) peak.note += (peak.note.empty() ? "" : "; ") + problem;
  return peak;
}

std::string remember_gemm_peak(int64_t n, double seconds, double gflops) {
  if (n != kTrainingPeakN)
    return fmt::format("not kept for training runs: they measure n = {}", kTrainingPeakN);
  if (seconds < kTrainingPeakSeconds)
    return fmt::format("not kept for training runs: timed for less than their {:g} s", kTrainingPeakSeconds);
  const std::string path = gemm_peak_cache_path();
  if (path.empty()) return kNoCacheDirectory;
  nlohmann::json peaks = nlohmann::json::object();
  try {
    peaks = read_peak_cache(path);
  } catch (const Error&) {
    // Replaced by a cache holding this entry.
  }
  return store_peak(path, peak_key(), gflops, std::move(peaks));
}

}  // namespace tfm
