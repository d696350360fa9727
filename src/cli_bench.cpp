// tfm bench gemm: this machine's sgemm speed through our GEMM wrapper, the peak MFU is quoted against.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "tfm/bench.h"
#include "tfm/config.h"
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

int run_bench_gemm(const BenchGemmOptions& o) {
  const int threads = platform::configure_threads(o.threads);
  const double peak = measure_gemm_peak_gflops(o.n, o.seconds);
  nlohmann::json out = {{"peak_gflops", peak}, {"n", o.n}, {"threads", threads}, {"blas", platform::blas_summary()}};
  std::vector<GemmTiming> shapes;
  if (!o.config.empty()) {
    const Config c = load_config(o.config);
    const ModelConfig m = c.model(256);  // the vocabulary only sizes the head; 256 covers char and byte
    check_memory(estimate_training_memory(c, 256), c, "bench gemm");  // its matrices are a step's (preflight.h)
    shapes = time_model_gemms(m, c.integer("train.batch_size"), c.integer("train.seq_len"), o.seconds / 4);
    for (const GemmTiming& t : shapes)
      out["shapes"].push_back({{"label", t.label}, {"M", t.M}, {"N", t.N}, {"K", t.K}, {"trans_a", t.trans_a},
                               {"trans_b", t.trans_b}, {"ms", t.median_ms}, {"gflops", t.gflops}});
  }
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("%s\nsgemm %ld x %ld x %ld: %.1f GFLOP/s (median of repeated runs over %.1f s)\n",
              platform::blas_summary().c_str(), static_cast<long>(o.n), static_cast<long>(o.n),
              static_cast<long>(o.n), peak, o.seconds);
  if (!shapes.empty()) {
    std::printf("\n%-36s %8s %8s %8s  %9s %10s  %s\n", "matrix product of a training step", "M", "N", "K", "ms",
                "GFLOP/s", "of peak");
    for (const GemmTiming& t : shapes)
      std::printf("%-36s %8ld %8ld %8ld  %9.3f %10.1f  %5.1f%%\n", t.label.c_str(), static_cast<long>(t.M),
                  static_cast<long>(t.N), static_cast<long>(t.K), t.median_ms, t.gflops, 100.0 * t.gflops / peak);
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure this machine: sgemm GFLOP/s (the peak MFU is quoted against)");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchGemmOptions>();
  auto* gemm = bench->add_subcommand("gemm", "sgemm GFLOP/s: square peak, and a config's matrix products");
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
