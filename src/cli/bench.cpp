// tfm bench gemm: this machine's GEMM speed through our wrapper, per backend and precision: the peaks
// MFU is quoted against.
#include "tfm/analysis/bench.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "tfm/analysis/figures.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/platform.h"
#include "tfm/nn/blocks.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

struct BenchGemmOptions {
  int threads = 0;
  int64_t n = 1024;
  double seconds = 1.0;
  std::string config;
  int64_t vocab_size = 0;  // with --config: instead of the data's
  bool json = false;
};

// Every backend and precision: the square peak and, with --config, the step's products.
int run_bench_gemm(const BenchGemmOptions& o) {
  // The square product's A, B and C, and the copies the bf16 paths make of them: 7 n^2 floats, as the
  // peak RSS measures at n = 4096.
  MemoryEstimate square;
  square.activations = 7.0 * 4.0 * static_cast<double>(o.n) * static_cast<double>(o.n);
  square.drivers = {"--n = " + std::to_string(o.n)};
  check_flag_memory(square, "bench gemm");
  const int threads = platform::configure_threads(o.threads);
  struct Mode {
    GemmBackend backend;
    Precision precision;
    bool emulated;  // bf16 as sgemm on rounded operands (gemm.h): the same products, no bf16 kernel
  };
  // oneDNN runs bf16 kernels only where it can create its bf16 matmul (AVX-512); OpenBLAS never does.
  const bool onednn_bf16 = onednn_bf16_matmul_available();
  const Mode modes[] = {{GemmBackend::OpenBlas, Precision::Fp32, false},
                        {GemmBackend::OneDnn, Precision::Fp32, false},
                        {GemmBackend::OneDnn, Precision::Bf16, !onednn_bf16},
                        {GemmBackend::OpenBlas, Precision::Bf16, true}};
  const GemmBackend default_backend = resolve_gemm_backend(GemmBackendChoice::Auto);
  if (!o.json)
    fmt::print("{}; {}; {}; train.gemm_backend \"auto\" = {} (median of repeated runs over {:.2f} s each)\n",
               platform::cpu_name().c_str(), platform::blas_summary().c_str(), onednn_version().c_str(),
               gemm_backend_name(default_backend), o.seconds);
  std::string cache_problem;
  nlohmann::json out = {{"n", o.n},
                        {"cpu", platform::cpu_name()},
                        {"threads", threads},
                        {"blas", platform::blas_summary()},
                        {"onednn", onednn_version()},
                        {"default_backend", gemm_backend_name(default_backend)}};
  // With --config: the model as tfm info builds it, whose vocabularies (the data's) size the head, and a
  // training step's lengths (a seq2seq pair's longest source and target, <eos> and <bos> included).
  ModelConfig m;
  int64_t B = 0, T = 0, S = 0;
  std::string vocab;
  if (!o.config.empty()) {
    const Config c = load_config(o.config);
    const ConfigModel built = build_model(c, o.vocab_size, "bench gemm");  // its memory checked first
    m = built.config();
    B = c.train().batch_size;
    if (objective_capabilities(c.train().objective).encoder_decoder()) {
      const DataConfig d = c.data();
      S = d.max_source_len + 1, T = d.max_target_len + 1;
      vocab = fmt::format("vocabulary {} source + {} target", m.source_vocab_size, m.vocab_size);
    } else {
      T = c.train().seq_len;
      vocab = fmt::format("vocabulary {}", m.vocab_size);
    }
    vocab += " " + built.vocab_note;
    out["vocab_size"] = m.vocab_size;
    if (S > 0) out["source_vocab_size"] = m.source_vocab_size;
  }
  std::vector<std::vector<GemmTiming>> shapes;
  for (const Mode& mode : modes) {
    const GemmModeGuard guard(mode.precision, mode.backend);
    const GemmTiming peak = sized_by(square.drivers[0], [&] { return measure_gemm_peak(o.n, o.seconds); });
    // Training runs quote MFU against this peak (training_gemm_peak): this measurement replaces theirs.
    const std::string not_kept = store_training_gemm_peak(peak, o.seconds);
    // Each reason once (a busy machine's share differs by a point from mode to mode).
    if (!not_kept.empty() && cache_problem.find(not_kept.substr(0, not_kept.find(" ("))) == std::string::npos)
      cache_problem += (cache_problem.empty() ? "" : "; ") + not_kept;
    const bool busy = peak.core_share < kPeakMinCoreShare;
    nlohmann::json j = {{"backend", gemm_backend_name(mode.backend)},
                        {"precision", precision_name(mode.precision)},
                        {"peak_gflops", peak.gflops},
                        {"core_share", peak.core_share},
                        {"emulated", mode.emulated},
                        {"kept_for_training", not_kept.empty()}};
    if (!o.json)
      fmt::print("{:<8} {} {}^3: {:7.1f} GFLOP/s{}{}\n", gemm_backend_name(mode.backend),
                 precision_name(mode.precision), o.n, peak.gflops,
                 mode.emulated ? " (emulated: sgemm on rounded operands)" : "",
                 busy ? fmt::format(" (busy machine: {:.0f}% of the cores)", 100.0 * peak.core_share) : "");
    if (!o.config.empty()) {
      shapes.push_back(time_model_gemms(m, B, T, o.seconds / 4, S));
      for (const GemmTiming& t : shapes.back())
        j["shapes"].push_back({{"label", t.label},
                               {"M", t.M},
                               {"N", t.N},
                               {"K", t.K},
                               {"trans_a", t.trans_a},
                               {"trans_b", t.trans_b},
                               {"ms", t.median_ms},
                               {"gflops", t.gflops},
                               {"core_share", t.core_share}});
    }
    out["modes"].push_back(j);
  }
  if (o.json) {
    fmt::print("{}\n", out.dump().c_str());
    return kExitOk;
  }
  fmt::print("peaks for training runs' MFU: {}\n",
             cache_problem.empty() ? "kept in " + gemm_peak_cache_path() : cache_problem);
  if (!shapes.empty()) {
    fmt::print("\n{}: {}\n", o.config.c_str(), vocab.c_str());
    std::string columns;
    for (const Mode& mode : modes)
      columns += fmt::format("{}{} {}{}", columns.empty() ? "" : " | ", gemm_backend_name(mode.backend),
                             precision_name(mode.precision), mode.emulated ? " (emulated)" : "");
    fmt::print("{:<46} {:>6} {:>6} {:>6}  {}\n", "GFLOP/s of a training step's products", "M", "N", "K",
               columns.c_str());
    bool busy = false;  // a product timed while another program had part of the cores
    for (size_t i = 0; i < shapes[0].size(); ++i) {
      const GemmTiming& t = shapes[0][i];
      fmt::print("{:<46} {:6} {:6} {:6} ", t.label.c_str(), t.M, t.N, t.K);
      for (const auto& mode_shapes : shapes) {
        const bool cell_busy = mode_shapes[i].core_share < kPeakMinCoreShare;
        busy = busy || cell_busy;
        fmt::print(" {:10.1f}{}", mode_shapes[i].gflops, cell_busy ? "*" : " ");
      }
      fmt::print("\n");
    }
    if (busy)
      fmt::print(
          "* timed while the machine was busy (under {:.0f}% of the cores): below this machine's rate; "
          "run again on a quiet machine (or with --threads 1)\n",
          100.0 * kPeakMinCoreShare);
  }
  return kExitOk;
}

// ---- tfm bench attention ----

struct BenchAttentionOptions {
  std::vector<int64_t> lengths = {64, 128, 256, 512, 1024, 2048, 4096};
  int64_t d_model = 128, heads = 4, kv_heads = 0, batch = 1;
  bool causal = false, json = false, no_plot = false;
  int threads = 0;
  double seconds = 0.3;
  std::string out;
};

int run_bench_attention(const BenchAttentionOptions& o) {
  if (o.d_model % o.heads != 0)
    throw ConfigError("--heads: " + std::to_string(o.heads) + " does not divide --d-model " +
                      std::to_string(o.d_model));
  if (o.kv_heads > 0 && o.heads % o.kv_heads != 0)
    throw ConfigError("--kv-heads: " + std::to_string(o.kv_heads) + " does not divide --heads " +
                      std::to_string(o.heads));
  for (size_t i = 1; i < o.lengths.size(); ++i)
    if (o.lengths[i] <= o.lengths[i - 1])
      throw ConfigError("--seq-lens: expected increasing lengths, got " + std::to_string(o.lengths[i - 1]) +
                        " then " + std::to_string(o.lengths[i]));
  if (o.lengths.size() < 2)
    throw ConfigError("--seq-lens: give two or more lengths (the exponents are fitted)");
  if (!o.out.empty()) check_output_path("--out", o.out);
  ModelConfig c;
  c.d_model = o.d_model, c.n_heads = o.heads, c.n_kv_heads = o.kv_heads;
  // The longest length costs the most: refused before the layer is built when it cannot fit.
  MemoryEstimate need = estimate_attention_memory(c, o.batch, o.lengths.back());
  need.drivers = {"--d-model = " + std::to_string(o.d_model),
                  "--seq-lens up to " + std::to_string(o.lengths.back()),
                  "--batch = " + std::to_string(o.batch)};
  check_flag_memory(need, "bench attention");
  const int threads = platform::configure_threads(o.threads);
  const std::vector<AttentionTiming> t =
      sized_by(need.drivers[0] + ", " + need.drivers[1] + ", " + need.drivers[2],
               [&] { return time_attention(c, o.causal, o.batch, o.lengths, o.seconds); });
  // Exponents over the upper half of the lengths, where the n^2 terms weigh most.
  const size_t from = t.size() / 2 == t.size() - 1 ? 0 : t.size() / 2;
  std::vector<double> n, ms, flops, peak, matrix;
  for (size_t i = from; i < t.size(); ++i) {
    n.push_back(static_cast<double>(t[i].n));
    ms.push_back(t[i].median_ms);
    flops.push_back(t[i].flops);
    peak.push_back(std::max(t[i].peak_bytes, 1.0));
    matrix.push_back(t[i].matrix_bytes);
  }
  const double a_time = fitted_exponent(n, ms), a_flops = fitted_exponent(n, flops);
  const double a_mem = fitted_exponent(n, peak), a_matrix = fitted_exponent(n, matrix);
  nlohmann::json j = {{"d_model", o.d_model},
                      {"heads", o.heads},
                      {"kv_heads", o.kv_heads > 0 ? o.kv_heads : o.heads},
                      {"batch", o.batch},
                      {"causal", o.causal},
                      {"threads", threads},
                      {"fit_from_n", t[from].n},
                      {"time_exponent", a_time},
                      {"flops_exponent", a_flops},
                      {"memory_exponent", a_mem},
                      {"matrix_exponent", a_matrix}};
  for (const AttentionTiming& x : t)
    j["lengths"].push_back({{"n", x.n},
                            {"ms", x.median_ms},
                            {"flops", x.flops},
                            {"gflops", x.flops / (x.median_ms * 1e-3) / 1e9},
                            {"peak_bytes", x.peak_bytes},
                            {"attention_matrix_bytes", x.matrix_bytes},
                            {"core_share", x.core_share}});
  // Lengths timed while another program had part of the cores: their times, and the exponent fitted
  // through them, are not this machine's.
  std::string busy;
  for (const AttentionTiming& x : t)
    if (x.core_share < kPeakMinCoreShare) busy += (busy.empty() ? "" : ", ") + std::to_string(x.n);
  std::string report;
  if (!o.out.empty()) {
    make_output_dir(o.out);
    report = o.out + "/bench_attention.json";
    write_file_atomically(report, j.dump(1) + "\n");
  }
  if (o.json) {
    fmt::print("{}\n", j.dump().c_str());
  } else {
    fmt::print(
        "one attention layer, forward + backward: d_model {}, {} heads ({} kv), batch {}, {}, {} thread(s)\n",
        o.d_model, o.heads, o.kv_heads > 0 ? o.kv_heads : o.heads, o.batch,
        o.causal ? "causal" : "bidirectional", threads);
    fmt::print("{:>8} {:>11} {:>9} {:>14} {:>22}\n", "n", "ms", "GFLOP/s", "peak MiB",
               "B*H*n^2 floats (MiB)");
    for (const AttentionTiming& x : t)
      fmt::print("{:8} {:11.3f} {:9.1f} {:14.2f} {:22.2f}{}\n", x.n, x.median_ms,
                 x.flops / (x.median_ms * 1e-3) / 1e9, x.peak_bytes / (1 << 20), x.matrix_bytes / (1 << 20),
                 x.core_share < kPeakMinCoreShare
                     ? fmt::format("  (busy machine: {:.0f}% of the cores)", 100.0 * x.core_share)
                     : "");
    fmt::print(
        "fitted over n >= {}: time ~ n^{:.2f} (the formula's FLOPs, O(n^2 d + n d^2){}: n^{:.2f}); "
        "memory ~ n^{:.2f} (an unfused layer's attention matrices: n^{:.2f})\n",
        t[from].n, a_time, o.causal ? " over the n(n+1)/2 (query, key) pairs a causal pass computes" : "",
        a_flops, a_mem, a_matrix);
    if (!busy.empty())
      fmt::print(
          "the machine was busy while n = {} ran: their times, and the time exponent, are not this "
          "machine's; run again on a quiet machine (or with --threads 1)\n",
          busy.c_str());
    fmt::print(
        "tfm's fused attention keeps no (B, H, n, n) matrix: it recomputes the probabilities from Q, K and\n"
        "each row's max and 1/sum in the backward, so its memory grows with n d, not h n^2.\n");
  }
  if (report.empty()) return kExitOk;
  if (!o.json) fmt::print("wrote {}\n", report.c_str());
  if (!o.no_plot) write_figure(o.out + "/bench_attention.svg", bench_attention_figure(j), o.json);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench",
                                   "Measure this machine: GEMM GFLOP/s per backend and precision (the peaks "
                                   "MFU is quoted against), and one attention layer against sequence length");
  bench->require_subcommand(1);
  bench->footer("\nExamples:\n  tfm bench gemm\n  tfm bench attention --seq-lens 128,256,512 --causal\n");
  auto o = std::make_shared<BenchGemmOptions>();
  auto* gemm = bench->add_subcommand(
      "gemm",
      "GEMM GFLOP/s of OpenBLAS and oneDNN in fp32 and bf16: square peak, and a config's matrix products");
  gemm->add_option("--threads", o->threads, "Threads (0 = all cores)")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
  gemm->add_option("--n", o->n,
                   "Size of the square product (refused before it starts when it cannot fit in memory)")
      ->capture_default_str()
      ->check(integer_in(16, 8192));
  gemm->add_option("--seconds", o->seconds, "Time to spend per measurement")
      ->capture_default_str()
      ->check(number_in(0.01, 60.0));
  gemm->add_option(
          "--config", o->config,
          "Also time the matrix products of this config's training step (its vocabularies from "
          "its data, as tfm info finds them; a seq2seq model's encoder, decoder and cross-attention)")
      ->type_name("FILE");
  gemm->add_option("--vocab-size", o->vocab_size,
                   "With --config: the vocabulary, when the data file is not at hand")
      ->check(integer_in(1, kMaxFlagCount));
  gemm->add_flag("--json", o->json, "One JSON object instead of a table");
  gemm->footer(
      "\nExamples:\n  tfm bench gemm\n  tfm bench gemm --config configs/shakespeare_char_large.json\n"
      "On AVX-512 CPUs tfm uses OpenBLAS's SkylakeX kernels (see the first line); compare with\n"
      "  TFM_NO_REEXEC=1 tfm bench gemm\n");
  auto a = std::make_shared<BenchAttentionOptions>();
  auto* att = bench->add_subcommand(
      "attention",
      "Forward + backward time and memory of one multi-head attention layer against sequence length");
  att->add_option("--seq-lens", a->lengths,
                  "Sequence lengths, increasing (with --d-model and --batch, refused before it starts when "
                  "the longest cannot fit in memory)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  att->add_option("--d-model", a->d_model, "Model width C")
      ->capture_default_str()
      ->check(integer_in(1, 65536));
  att->add_option("--heads", a->heads, "Attention heads H (must divide --d-model)")
      ->capture_default_str()
      ->check(integer_in(1, 4096));
  att->add_option("--kv-heads", a->kv_heads, "Key/value heads (0 = --heads; GQA/MQA below it)")
      ->capture_default_str()
      ->check(integer_in(0, 4096));
  att->add_option("--batch", a->batch, "Sequences per step")
      ->capture_default_str()
      ->check(integer_in(1, 4096));
  att->add_flag(
      "--causal", a->causal,
      "Causal mask: the pass skips the keys after each query, and its FLOPs (GFLOP/s, the formula's "
      "exponent) count the n(n+1)/2 (query, key) pairs it computes, not n^2");
  att->add_option("--threads", a->threads, "Threads (0 = all cores)")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
  att->add_option("--seconds", a->seconds, "Time to spend per length")
      ->capture_default_str()
      ->check(number_in(0.001, 60.0));
  att->add_option("--out", a->out, "Write DIR/bench_attention.json and DIR/bench_attention.svg")
      ->type_name("DIR");
  att->add_flag("--no-plot", a->no_plot, "With --out: do not draw DIR/bench_attention.svg");
  att->add_flag("--json", a->json, "One JSON object instead of the table");
  att->footer(
      "\nA self-attention layer costs time O(n^2 d + n d^2) (Vaswani et al. 2017, table 1) and, unfused,\n"
      "memory O(h n^2) for the attention matrices. The exponents are fitted (least squares in log-log) over "
      "the upper half of the lengths.\n"
      "FLOPs are 3 x the forward's matrix products (projections, scores, weighted sums) over the (query,\n"
      "key) pairs the pass computes: n^2, or n(n+1)/2 with --causal, so GFLOP/s compare across both.\n"
      "Examples:\n  tfm bench attention\n  tfm bench attention --seq-lens 128,256,512,1024 --d-model 256 "
      "--heads 8 --out runs/bench\n");
  return {{gemm, [o] { return run_bench_gemm(*o); }}, {att, [a] { return run_bench_attention(*a); }}};
}

}  // namespace tfm::cli
