#include "tfm/training/preflight.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/attention.h"
#include "tfm/nn/blocks.h"
#include "tfm/training/distributed.h"
#include "tfm/training/optim.h"

namespace tfm {
namespace {

constexpr double kFloat = 4.0;  // bytes per float32

std::string bytes_str(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024.0 && u < 6) b /= 1024.0, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string kv(const std::string& key, int64_t value) {
  return key + " = " + std::to_string(value);
}

// What the model costs for one micro-batch (each layer's cost(), nn/ and models/): B sequences of T
// tokens, or B pairs of S source and T target tokens.
Cost model_cost(const ModelConfig& mc, int64_t B, int64_t S, int64_t T) {
  return mc.source_vocab_size > 0 ? Seq2SeqModel::cost(mc, B, S, T) : LanguageModel::cost(mc, B, T);
}

// The keys of the model's size ("key = value"): what drives parameters, gradients and optimizer state.
std::vector<std::string> model_keys(const ModelConfig& mc) {
  std::vector<std::string> keys;
  if (mc.source_vocab_size > 0)
    keys = {kv("model.n_encoder_layers", mc.n_encoder_layers),
            kv("model.n_decoder_layers", mc.n_decoder_layers)};
  else
    keys = {kv("model.n_layers", mc.n_layers)};
  keys.push_back(kv("model.d_model", mc.d_model));
  keys.push_back(kv("model.d_ff", mc.d_ff));
  if (mc.positional_encoding == PositionalEncoding::Learned)
    keys.push_back(kv("model.max_seq_len", mc.max_seq_len));
  return keys;
}

// The optimizer's state in floats (optim.h): AdamW's two moments or SGD's momentum per parameter. Muon
// keeps one momentum per element of the blocks' matrices and AdamW's two moments for the rest, plus
// per thread the Newton-Schulz workspace of the largest matrix, the feed-forward's (F, C) or
// attention's (C, C). The blocks' parameters stand for their matrices: their biases and gains (AdamW's,
// 0.4% of a block at C = 128, 3% at C = 32) are counted once instead of twice.
double optimizer_floats(OptimizerKind optimizer, const ModelConfig& config, double P, int64_t threads) {
  if (optimizer != OptimizerKind::Muon) return (optimizer == OptimizerKind::AdamW ? 2.0 : 1.0) * P;
  const ModelConfig c = resolved(config);
  const double blocks =
      c.source_vocab_size > 0
          ? EncoderBlock::cost(c, 1, 1).parameters * static_cast<double>(c.n_encoder_layers) +
                DecoderBlock::cost(c, 1, 1, 1).parameters * static_cast<double>(c.n_decoder_layers)
          : EncoderBlock::cost(c, 1, 1).parameters * static_cast<double>(c.n_layers);
  return 2.0 * (P - blocks) + blocks +
         static_cast<double>(std::max<int64_t>(1, threads)) *
             Optimizer::newton_schulz_workspace(std::max(c.d_ff, c.d_model), c.d_model);
}

// (S = T for a language model.) `optimizer` is train.optimizer.name (unread without training).
MemoryEstimate estimate(const ModelConfig& mc, int64_t B, int64_t S, int64_t T, OptimizerKind optimizer,
                        int64_t threads, bool training) {
  MemoryEstimate e;
  const Cost cost = model_cost(mc, B, S, T);
  const double P = cost.parameters;
  e.parameters = kFloat * P;
  e.gradients = training ? kFloat * P : 0.0;
  e.optimizer = training ? kFloat * optimizer_floats(optimizer, mc, P, threads) : 0.0;
  // The tables computed per position (nn/layers.h, PositionTables) as far as the longest sequence reaches,
  // not model.max_seq_len: the sinusoidal (rows, C), or RoPE's cosines and sines (rows, Dk/2) in each
  // self-attention layer. Learned positions are parameters.
  const ModelConfig c = resolved(mc);
  const double rows = static_cast<double>(std::min(c.max_seq_len, std::max(S, T)));
  const double self_attention_layers =
      static_cast<double>(c.source_vocab_size > 0 ? c.n_encoder_layers + c.n_decoder_layers : c.n_layers);
  e.position_table = c.positional_encoding == PositionalEncoding::Sinusoidal
                         ? kFloat * rows * static_cast<double>(c.d_model)
                     : c.positional_encoding == PositionalEncoding::Rope
                         ? kFloat * rows * static_cast<double>(c.head_dim()) * self_attention_layers
                         : 0.0;
  // What the forward keeps for the backward, and the backward's largest temporary on top.
  e.activations = kFloat * (cost.activations + cost.transient);
  // The keys of the largest component drive the estimate; the others would be noise in a message.
  const double model_bytes = e.parameters + e.gradients + e.optimizer;
  std::vector<std::string> lengths;  // the keys of the sequences' lengths
  if (mc.source_vocab_size > 0)
    lengths = {kv("data.max_source_len", S - 1), kv("data.max_target_len", T - 1)};
  else
    lengths = {kv("train.seq_len", T)};
  if (e.position_table >= model_bytes && e.position_table >= e.activations) {
    e.drivers = lengths;
    e.drivers.push_back(kv("model.d_model", mc.d_model));
  } else if (e.activations >= model_bytes) {
    e.drivers = {kv("train.batch_size", B)};
    for (const std::string& k : lengths) e.drivers.push_back(k);
    for (const std::string& k : model_keys(mc)) e.drivers.push_back(k);
  } else {
    e.drivers = model_keys(mc);
  }
  return e;
}

// The first number on the line of `file` that starts with `key` (e.g. "MemAvailable:"), or -1.
double read_keyed(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) return std::strtod(line.c_str() + key.size(), nullptr);
  return -1;
}

// A single number in a file ("max" or missing: -1).
double read_number(const std::string& file) {
  std::ifstream in(file);
  std::string s;
  if (!(in >> s) || s == "max") return -1;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end != s.c_str() ? v : -1;
}

// The smallest headroom (limit - usage + reclaimable page cache) over the process's cgroup and its
// ancestors; -1 when no limit applies.
double cgroup_headroom(std::string* source) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  double best = -1;
  auto consider = [&](double limit, double usage, double inactive, const char* what) {
    // v1 reports "no limit" as a huge page-rounded number.
    if (limit < 0 || limit > 1e18 || usage < 0) return;
    const double headroom = std::max(0.0, limit - usage + std::max(0.0, inactive));
    if (best < 0 || headroom < best) best = headroom, *source = what;
  };
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    const bool v2 = line.compare(0, 2, "0:") == 0 && controllers.empty();
    const bool v1 = !v2 && ("," + controllers + ",").find(",memory,") != std::string::npos;
    if (!v1 && !v2) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    for (;;) {  // the group and each ancestor up to the root of the mount
      const std::string dir = root + (path == "/" ? "" : path);
      if (v2)
        consider(read_number(dir + "/memory.max"), read_number(dir + "/memory.current"),
                 read_keyed(dir + "/memory.stat", "inactive_file "), "cgroup v2 memory.max");
      else
        consider(read_number(dir + "/memory.limit_in_bytes"), read_number(dir + "/memory.usage_in_bytes"),
                 read_keyed(dir + "/memory.stat", "total_inactive_file "), "cgroup v1 memory.limit_in_bytes");
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return best;
}

}  // namespace

std::string MemoryEstimate::summary() const {
  std::string s;
  const auto add = [&s](const char* name, double bytes) {
    if (bytes > 0) s += (s.empty() ? "" : ", ") + std::string(name) + " " + bytes_str(bytes);
  };
  add("parameters", parameters);
  add("gradients", gradients);
  add("optimizer", optimizer);
  add("activations", activations);
  add("position table", position_table);
  return s + "; total " + bytes_str(total());
}

double parameter_count(const ModelConfig& mc) {
  return model_cost(mc, 1, 1, 1).parameters;
}

MemoryEstimate estimate_memory(const Config& config, const ModelConfig& mc, bool training) {
  const TrainConfig train = config.train();
  const int64_t B = train.batch_size;
  const OptimizerKind optimizer = train.optimizer.name;
  const int64_t threads = training_threads(config);
  MemoryEstimate e;
  if (mc.source_vocab_size > 0) {  // sources end with <eos>; decoder inputs start with <bos>
    const DataConfig d = config.data();
    e = estimate(mc, B, d.max_source_len + 1, d.max_target_len + 1, optimizer, threads, training);
  } else {
    const int64_t T = train.seq_len;
    e = estimate(mc, B, T, T, optimizer, threads, training);
  }
  // train.data_parallel: every worker but the first has a replica with its own gradient buffer (the
  // weights are shared; the activations are the same batch split between the workers). 0 = one
  // worker per thread, as the trainer resolves it.
  // Each replica also computes its own position tables.
  if (training) {
    const double workers = static_cast<double>(data_parallel_workers(config, training_threads(config)));
    e.gradients *= workers;
    e.position_table *= workers;
  }
  if (training && train.optimizer.ema_decay > 0) e.optimizer += e.parameters;  // train.ema_decay's copy
  return e;
}

int64_t training_threads(const Config& config) {
  const int64_t key = config.train().threads;
  if (key > 0) return key;
  const int64_t cores = platform::available_cores();
  return dist::active() ? std::max<int64_t>(1, cores / dist::local_size()) : cores;
}

std::vector<std::string> thread_warnings(int64_t threads, int64_t workers, int64_t local_ranks,
                                         int64_t process_cores, int64_t machine_cores) {
  std::vector<std::string> warnings;
  if (threads > process_cores)
    warnings.push_back(
        fmt::format("train.threads = {} is more than the {} core(s) this process may use: "
                    "threads beyond the cores wait on each other, slower than "
                    "train.threads = {}{}",
                    threads, process_cores, process_cores, local_ranks > 1 ? "" : " (or 0, all cores)"));
  else if (local_ranks > 1 && threads * local_ranks > machine_cores)
    warnings.push_back(
        fmt::format("train.threads: {} ranks x {} thread(s) on this machine's {} core(s): "
                    "threads beyond the cores wait on each other, slower than {} thread(s) a "
                    "rank",
                    local_ranks, threads, machine_cores, std::max<int64_t>(1, machine_cores / local_ranks)));
  if (workers > threads)
    warnings.push_back(
        fmt::format("train.data_parallel: {} workers on {} thread(s) take turns on them, "
                    "slower than {} (0 = one per thread)",
                    workers, threads, threads));
  return warnings;
}

int64_t data_parallel_workers(const Config& config, int64_t threads) {
  const TrainConfig train = config.train();
  const int64_t dp = train.data_parallel;
  return std::max<int64_t>(1, std::min<int64_t>(dp == 0 ? threads : dp, train.batch_size));
}

MemoryEstimate estimate_training_memory(const Config& config, int64_t vocab_size) {
  return estimate_memory(config, config.model(vocab_size), true);
}

MemoryEstimate estimate_inference_memory(const ModelConfig& mc, int64_t B, int64_t T) {
  return estimate(mc, B, T, T, OptimizerKind::AdamW, 1, false);  // not training: no optimizer state counted
}

MemoryEstimate estimate_translation_memory(const ModelConfig& mc, int64_t sources, int64_t beam, int64_t S,
                                           int64_t max_len) {
  const ModelConfig c = resolved(mc);
  const double R = static_cast<double>(sources) * static_cast<double>(beam);  // rows: one per hypothesis
  const double C = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab_size);
  const double layers = static_cast<double>(c.n_decoder_layers);
  MemoryEstimate e;
  e.parameters = kFloat * parameter_count(c);
  // Each row's copy of its source's encoder output; the decoder's self- and cross-attention caches,
  // twice while a step reorders them; one step's feed-forward; the logits, their log-softmax and its
  // copy (R, V); one source's beam * V candidates (24 bytes each, up to twice that as the vector grows).
  const double caches = 2.0 * layers * R * (static_cast<double>(S) + static_cast<double>(max_len)) * C;
  e.activations = kFloat * (R * static_cast<double>(S) * C + 2.0 * caches +
                            R * (static_cast<double>(c.d_ff) + 4.0 * C) + 3.0 * R * V) +
                  48.0 * static_cast<double>(beam) * V;
  e.drivers = {"--beam = " + std::to_string(beam)};
  if (sources > 1) e.drivers.push_back(std::to_string(sources) + " --text");
  return e;
}

MemoryEstimate estimate_attention_memory(const ModelConfig& mc, int64_t B, int64_t n) {
  const Cost cost = MultiHeadAttention::cost(resolved(mc), B, n, n);
  MemoryEstimate e;
  e.parameters = kFloat * cost.parameters;
  e.gradients = kFloat * cost.parameters;
  const double input = static_cast<double>(B) * static_cast<double>(n) * static_cast<double>(mc.d_model);
  // A lone layer's backward holds the gradients of what its forward kept beside it: three times the
  // forward's share is within 0.9-1.1x of the peaks bench attention measures (d_model 64 to 1024).
  e.activations = kFloat * (3.0 * (cost.activations + cost.transient) + 2.0 * input);
  return e;
}

std::function<void(const ModelConfig&)> memory_check(const Config& config, MemoryCheck check) {
  return [config, check](const ModelConfig& mc) {
    check_memory(estimate_memory(config, mc, check.training), config, check.what, check.processes);
  };
}

AvailableMemory available_memory() {
  AvailableMemory a;
  if (const char* env = std::getenv("TFM_AVAILABLE_MEMORY_MB"); env && *env) {
    a.bytes = std::strtod(env, nullptr) * 1024.0 * 1024.0;
    a.source = "TFM_AVAILABLE_MEMORY_MB";
    return a;
  }
  const double kib = read_keyed("/proc/meminfo", "MemAvailable:");
  a.bytes = kib >= 0 ? kib * 1024.0 : -1;
  a.source = "MemAvailable";
  std::string cg_source;
  const double cg = cgroup_headroom(&cg_source);
  if (cg >= 0 && (a.bytes < 0 || cg < a.bytes)) a.bytes = cg, a.source = cg_source;
  return a;
}

namespace {

// ConfigError "DRIVERS: WHAT needs an estimated ..., more than the ... available ...; ADVICE" when
// `processes` copies of the estimate do not fit.
void refuse_if_over(const MemoryEstimate& estimate, const std::string& what, int processes,
                    const std::string& advice) {
  const AvailableMemory avail = available_memory();
  if (avail.bytes < 0) return;  // nothing to compare with (no /proc): let the allocator decide
  const double need = estimate.total() * std::max(1, processes);
  if (need <= avail.bytes) return;
  std::string keys;
  for (const std::string& k : estimate.drivers) keys += (keys.empty() ? "" : ", ") + k;
  std::ostringstream os;
  os << keys << ": " << what << " needs an estimated " << bytes_str(need);
  if (processes > 1)
    os << " (" << processes << " ranks on this machine, each " << bytes_str(estimate.total()) << ")";
  os << " (" << estimate.summary() << "), more than the " << bytes_str(avail.bytes)
     << " available to this process (" << avail.source << "); " << advice;
  throw ConfigError(os.str());
}

}  // namespace

void check_memory(const MemoryEstimate& estimate, const Config& config, const std::string& what,
                  int processes) {
  if (config.train().skip_memory_check) return;
  refuse_if_over(estimate, what, processes,
                 "make them smaller, or set train.skip_memory_check=true to go on anyway");
}

void check_flag_memory(const MemoryEstimate& estimate, const std::string& what) {
  refuse_if_over(estimate, what, 1, "make them smaller");
}

}  // namespace tfm
