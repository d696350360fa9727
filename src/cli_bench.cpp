// tfm bench gemm: this machine's GEMM speed through our wrapper, per backend and precision: the peaks
// MFU is quoted against.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "tfm/bench.h"
#include "tfm/config.h"
#include "tfm/gemm.h"
#include "tfm/preflight.h"
#include "tfm/platform.h"

namespace tfm::cli {
namespace {

struct BenchGemmOptions {
  int threads = 0;
  int64_t n = 1024;
  double seconds = 1.0;
  std::string config;
  bool json = false;
};

// Every backend and precision: the square peak and, with --config, the step's products.
int run_bench_gemm(const BenchGemmOptions& o) {
  const int threads = platform::configure_threads(o.threads);
  struct Mode {
    GemmBackend backend;
    Precision precision;
    const char* note;
  };
  const Mode modes[] = {{GemmBackend::openblas, Precision::fp32, ""},
                        {GemmBackend::onednn, Precision::fp32, ""},
                        {GemmBackend::onednn, Precision::bf16, ""},
                        {GemmBackend::openblas, Precision::bf16, " (emulated: sgemm on rounded operands)"}};
  const GemmBackend default_backend = resolve_gemm_backend("auto", "TFM_GEMM_BACKEND");
  nlohmann::json out = {{"n", o.n}, {"threads", threads}, {"blas", platform::blas_summary()},
                        {"onednn", onednn_version()}, {"default_backend", gemm_backend_name(default_backend)}};
  ModelConfig m;
  int64_t B = 0, T = 0;
  if (!o.config.empty()) {
    const Config c = load_config(o.config);
    m = c.model(256);  // the vocabulary only sizes the head; 256 covers char and byte
    check_memory(estimate_training_memory(c, 256), c, "bench gemm");  // its matrices are a step's (preflight.h)
    B = c.integer("train.batch_size");
    T = c.integer("train.seq_len");
  }
  std::vector<std::vector<GemmTiming>> shapes;
  for (const Mode& mode : modes) {
    const GemmModeGuard guard(mode.precision, mode.backend);
    const double peak = measure_gemm_peak_gflops(o.n, o.seconds);
    nlohmann::json j = {{"backend", gemm_backend_name(mode.backend)}, {"precision", precision_name(mode.precision)},
                        {"peak_gflops", peak}};
    if (!o.json)
      std::printf("%-8s %s %ld^3: %7.1f GFLOP/s%s\n", gemm_backend_name(mode.backend), precision_name(mode.precision),
                  static_cast<long>(o.n), peak, mode.note);
    if (!o.config.empty()) {
      shapes.push_back(time_model_gemms(m, B, T, o.seconds / 4));
      for (const GemmTiming& t : shapes.back())
        j["shapes"].push_back({{"label", t.label}, {"M", t.M}, {"N", t.N}, {"K", t.K}, {"trans_a", t.trans_a},
                               {"trans_b", t.trans_b}, {"ms", t.median_ms}, {"gflops", t.gflops}});
    }
    out["modes"].push_back(j);
  }
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("%s; %s; train.gemm_backend \"auto\" = %s (median of repeated runs over %.2f s each)\n",
              platform::blas_summary().c_str(), onednn_version().c_str(), gemm_backend_name(default_backend),
              o.seconds);
  if (!shapes.empty()) {
    std::printf("\n%-36s %6s %6s %6s  %s\n", "GFLOP/s of a training step's products", "M", "N", "K",
                "openblas fp32 | onednn fp32 | onednn bf16 | openblas bf16 (emulated)");
    for (size_t i = 0; i < shapes[0].size(); ++i) {
      const GemmTiming& t = shapes[0][i];
      std::printf("%-36s %6ld %6ld %6ld ", t.label.c_str(), static_cast<long>(t.M), static_cast<long>(t.N),
                  static_cast<long>(t.K));
      for (const auto& mode_shapes : shapes) std::printf(" %10.1f", mode_shapes[i].gflops);
      std::printf("\n");
    }
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure this machine: GEMM GFLOP/s per backend and precision (the peaks MFU is quoted against)");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchGemmOptions>();
  auto* gemm = bench->add_subcommand("gemm", "GEMM GFLOP/s of OpenBLAS and oneDNN in fp32 and bf16: square peak, and a config's matrix products");
  gemm->add_option("--threads", o->threads, "Threads (0 = all cores)")->capture_default_str()->check(integer_in(0, 1024));
  gemm->add_option("--n", o->n, "Size of the square product")->capture_default_str()->check(integer_in(16, 8192));
  gemm->add_option("--seconds", o->seconds, "Time to spend per measurement")->capture_default_str()->check(
      number_in(0.01, 60.0));
  gemm->add_option("--config", o->config, "Also time the matrix products of this config's training step")
      ->type_name("FILE");
  gemm->add_flag("--json", o->json, "One JSON object instead of a table");
  gemm->footer(
      "\nExamples:\n  tfm bench gemm\n  tfm bench gemm --config configs/shakespeare_char_large.json\n"
      "On AVX-512 CPUs tfm uses OpenBLAS's SkylakeX kernels (see the first line); compare with\n"
      "  TFM_NO_REEXEC=1 tfm bench gemm\n");
  return {{gemm, [o] { return run_bench_gemm(*o); }}};
}

}  // namespace tfm::cli
