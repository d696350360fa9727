// Pre-flight memory check: a config that cannot fit is refused before anything large is allocated
// (the model, its position table, the optimizer state), with the keys that drive the estimate, the
// estimate and the memory available to the process. `tfm info` prints the same estimate, and a test
// keeps it honest against the peak a training step measures (memory::stats()).
// Legend: B batch, T time, C = d_model, H heads, Hkv key/value heads, F = d_ff, L layers, V vocabulary.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/models/model.h"

namespace tfm {

// Bytes, as doubles: an absurd config (n_layers = 1e5, batch_size = 1e8) must not overflow the estimate.
struct MemoryEstimate {
  double parameters = 0;   // the flat value buffer (4 P)
  double gradients = 0;    // the flat gradient buffer (training only)
  double optimizer = 0;    // AdamW's two moments, SGD's momentum or Muon's state (training only)
  double activations = 0;  // what the forward keeps for the backward, plus the largest transients
  // The sinusoidal table or RoPE's, as far as the longest sequence reaches (learned positions are parameters)
  double position_table = 0;
  // Config keys behind the estimate with their values, the largest component's first ("key = value").
  std::vector<std::string> drivers;
  double total() const { return parameters + gradients + optimizer + activations + position_table; }
  // "parameters 3.1 MiB, gradients 3.1 MiB, ...; total 12.0 MiB"
  std::string summary() const;
};

// Parameters of the model a config describes, from its layers' cost() without building it (equals
// LanguageModel::parameter_count(), or Seq2SeqModel's when mc.source_vocab_size > 0; a test checks
// every model option).
double parameter_count(const ModelConfig& mc);

// The model `mc` (a language model, or an encoder-decoder when mc.source_vocab_size > 0) under
// config's batch: (B, T) = (train.batch_size, train.seq_len), or B pairs of data.max_source_len and
// data.max_target_len tokens (+1 each for <eos>, <bos>); training adds gradients, train.optimizer.name's
// state and the backward's activations.
MemoryEstimate estimate_memory(const Config& config, const ModelConfig& mc, bool training);
// train.data_parallel's workers for a run with `threads` threads: 0 = one per thread, else the key's
// value, never more than the rows of a micro-batch (train.batch_size).
int64_t data_parallel_workers(const Config& config, int64_t threads);
// The threads a training process of this config runs: train.threads, or for 0 all cores, shared among
// the ranks on this machine under mpirun (at least 1 each). The trainer and the estimate both ask here.
int64_t training_threads(const Config& config);
// What a run's log warns of when its threads outnumber its cores (threads beyond the cores wait on each
// other: the kernels' and MFU's figures fall): `threads` beyond the `process_cores` this process may use
// (its affinity: under mpirun, the core it is bound to), or `local_ranks` processes of `threads` beyond
// the `machine_cores`; and data-parallel `workers` beyond `threads` (the extra ones share a thread).
// Empty when none holds.
std::vector<std::string> thread_warnings(int64_t threads, int64_t workers, int64_t local_ranks,
                                         int64_t process_cores, int64_t machine_cores);
// estimate_memory of config.model(vocab_size), training.
MemoryEstimate estimate_training_memory(const Config& config, int64_t vocab_size);
// Evaluation or sampling without a graph: the parameters and one forward of (B, T) tokens.
MemoryEstimate estimate_inference_memory(const ModelConfig& mc, int64_t B, int64_t T);
// Beam search (Seq2SeqModel::translate) of `sources` sentences of up to S tokens, `beam` hypotheses each,
// up to max_len target tokens: the decoder's caches of sources * beam rows, their (rows, V)
// log-probabilities and each source's beam * V candidates. drivers name the flags (--beam, and the
// --text count above one).
MemoryEstimate estimate_translation_memory(const ModelConfig& mc, int64_t sources, int64_t beam, int64_t S,
                                           int64_t max_len);
// `tfm bench attention`'s layer at its longest length n: weights and their gradients, the input and its
// gradient, and the forward's activations and the backward's largest temporary (no drivers set).
MemoryEstimate estimate_attention_memory(const ModelConfig& mc, int64_t B, int64_t n);

struct AvailableMemory {
  double bytes = 0;
  std::string source;  // "MemAvailable" | "cgroup v2 limit" | "cgroup v1 limit" | "TFM_AVAILABLE_MEMORY_MB"
};
// The memory this process can still use: the smaller of /proc/meminfo's MemAvailable and what its
// cgroup (v2 memory.max, or v1 memory.limit_in_bytes, of its group and every ancestor) leaves. The
// environment variable TFM_AVAILABLE_MEMORY_MB overrides both (to rehearse a smaller machine).
AvailableMemory available_memory();

// Throws ConfigError when `processes` copies of the estimate (MPI ranks on this machine) exceed the
// available memory, unless train.skip_memory_check is true. The message starts with the driving keys
// and states the estimate and the available figure; `what` names the command ("train", "eval", ...).
void check_memory(const MemoryEstimate& estimate, const Config& config, const std::string& what,
                  int processes = 1);

// The same refusal for a command's own sizes (flags such as --beam or --d-model, named with their values
// in estimate.drivers): ConfigError advising to make them smaller. train.skip_memory_check does not
// apply (nothing here is a config key); TFM_AVAILABLE_MEMORY_MB does, as everywhere.
void check_flag_memory(const MemoryEstimate& estimate, const std::string& what);

// What a command that builds a model asks make_objective to check (ObjectiveOptions::check_model): each
// objective calls it between reading its vocabularies and building its model, so every objective's
// model is covered.
struct MemoryCheck {
  std::string what;       // the command, for the message: "train", "eval", "loading runs/x/last.ckpt"
  bool training = false;  // gradients, optimizer state and the backward's activations too
  int processes = 1;      // MPI ranks on this machine
};
// A check of a model config: check_memory(estimate_memory(config, mc, check.training), ...).
std::function<void(const ModelConfig&)> memory_check(const Config& config, MemoryCheck check);

}  // namespace tfm
