// A training objective: how a batch is drawn, what the loss is, what evaluation measures and what
// the model is. The training loop (trainer.cpp: schedule, clipping, accumulation, logging, eval,
// checkpoints, signals, MPI) is written once against this interface; each objective lives in one
// file:
//   causal_lm  src/objectives/causal_lm.cpp  decoder-only: next-token prediction (sampling: models/sampling.h)
//   masked_lm  src/objectives/masked_lm.cpp  encoder-only: BERT's masked tokens (fill_mask below)
//   seq2seq    src/objectives/seq2seq.cpp    encoder-decoder over sentence pairs (translate below)
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tfm/analysis/attention_maps.h"
#include "tfm/config/config.h"
#include "tfm/data/token_cache.h"
#include "tfm/data/tokenizer.h"
#include "tfm/models/language_model.h"
#include "tfm/engine/random.h"
#include "tfm/models/encoder_decoder.h"

namespace tfm {

// Named figures of one evaluation, in display order; the first is always "loss". An evaluation
// abandoned on a stop request has none.
struct Metrics {
  std::vector<std::pair<std::string, double>> values;
  bool abandoned = false;
  double get(const std::string& name) const;  // NaN when absent
  bool has(const std::string& name) const;
  void set(const std::string& name, double value);
};

// One training micro-batch's loss (a scalar with its graph) and the real tokens it holds (padding
// and unmasked positions excluded where the objective says so), for tokens/s.
struct BatchLoss {
  Tensor loss;
  int64_t tokens = 0;
};

// One training micro-batch cut into shards of whole rows for data-parallel workers inside one process
// (train.data_parallel; trainer.cpp). losses[i] computes shard i's loss, with its graph, on any model
// of the objective's architecture (model() or a replica()); the shards' losses sum to the whole
// batch's loss (each is its own mean scaled by its share of the counted positions), so their
// gradients sum to the whole batch's gradient. A shard with no counted position returns an undefined
// tensor (nothing to add).
struct BatchShards {
  std::vector<std::function<Tensor(Model&)>> losses;
  int64_t tokens = 0;  // as BatchLoss::tokens, over the whole batch
};

// Rows [begin, end) of each of `parts` shards of B rows, as even as can be (the first B % parts get
// one more).
std::vector<std::pair<int64_t, int64_t>> shard_rows(int64_t B, int parts);

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  virtual Model& model() = 0;

  // Vocabularies for checkpoints: the input side's, and the target side's when it has its own.
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const Tokenizer* target_tokenizer() const { return nullptr; }

  // The next training micro-batch of the configured size, drawn with sampler_rng(), cut into `parts`
  // shards of whole rows (parts <= the batch's rows; one part: the whole batch), each shard's loss
  // computed in the model's current mode when its closure runs. The training loop's one path
  // (training/micro_batch.h).
  virtual BatchShards train_batch_shards(int parts) = 0;
  // The next training micro-batch as one shard on model(): its loss (a mean, ready for backward())
  // and its real tokens.
  BatchLoss train_batch();
  // A model of model()'s architecture for a data-parallel worker: model()'s parameter values (the
  // same storage, so an optimizer step is seen by both), its own gradient buffer (zeros) and dropout
  // generator, in model()'s mode.
  virtual std::unique_ptr<Model> replica() = 0;
  // The state of the training batch stream (checkpointed, so a resumed run draws the same batches).
  virtual Rng& sampler_rng() = 0;
  // One batch of the training shape with uniformly random ordinary tokens drawn from `rng` (no data
  // needed; seq2seq: random lengths, so padding is exercised), and the training loss of it as a
  // closure that reruns the model on its current weights: what `tfm gradcheck` differentiates. In
  // eval mode the closure is a deterministic function of the weights.
  virtual std::function<Tensor()> random_batch_loss(Rng& rng) = 0;
  // The loss, with its graph, of one batch of `split` drawn from a generator seeded with `seed`, in
  // the model's current mode: the same batch for the same seed (tfm heads measures every head on the
  // same batches).
  virtual Tensor split_batch_loss(const std::string& split, uint64_t seed) = 0;

  // Evaluation in eval mode without a graph over `batches` batches of `split` ("val" | "train"),
  // drawn from a fresh generator seeded with `seed` (the same batches at every evaluation). When
  // `stop` is set (SIGINT/SIGTERM during training) before a batch, the evaluation is abandoned:
  // Metrics::abandoned, no figures.
  virtual Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed,
                           const std::atomic<bool>* stop = nullptr) = 0;
  // The batches of `batches` that evaluate() runs: all of them where batches are drawn at random; at
  // most the split's size in batches where the split is walked in order (seq2seq).
  virtual int64_t evaluation_batches(const std::string& split, int64_t batches) const {
    (void)split;
    return batches;
  }

  // Training FLOPs per counted token, for MFU.
  virtual double train_flops_per_token() const = 0;
  // One line about the data for the log ("data: ...").
  virtual std::string describe_data() const = 0;
  // The shape of a training micro-batch for the log ("12 x 64 tokens").
  virtual std::string describe_batch() const = 0;
  // What to run next on a trained run in `dir` (the log's last line).
  virtual std::string usage_hint(const std::string& dir) const = 0;
  // Whether evaluate() can run (the data is loaded).
  virtual bool has_data() const = 0;
};

// How make_objective builds an objective.
struct ObjectiveOptions {
  // Read the data files (training, eval); without, only the model is built and evaluate() and
  // train_batch() throw (sampling, translation, export need no data file).
  bool load_data = true;
  int rank = 0;  // MPI rank: each rank draws its own batches
  // When set, called with the model's config once the vocabularies are known, before the model is
  // allocated: the pre-flight memory check (training/preflight.h) refuses a model that cannot fit.
  std::function<void(const ModelConfig&)> check_model;
};

// mc, after options.check_model(mc) when it is set: what each objective builds its model from.
inline const ModelConfig& checked_model(const ModelConfig& mc, const ObjectiveOptions& options) {
  if (options.check_model) options.check_model(mc);
  return mc;
}

// replica() for an objective whose model is an M (LanguageModel, Seq2SeqModel): built from the same
// config and seed, then re-seated on `model`'s values.
template <class M>
std::unique_ptr<Model> replica_of(const M& model, uint64_t seed) {
  auto m = std::make_unique<M>(model.config(), seed);
  m->share_values_of(model);
  m->set_training(model.training());
  return m;
}

// Builds the objective `train.objective` names and its model (initialised from `seed`).
// Vocabularies come from `vocabulary` when given (a checkpoint's: resume, eval, sampling), else from
// the data.
std::unique_ptr<Objective> make_objective(const Config& config, const Vocabulary* vocabulary,
                                          const ObjectiveOptions& options);

// Whether a stop request is pending (evaluate() checks it between batches).
inline bool stop_requested(const std::atomic<bool>* stop) { return stop != nullptr && stop->load(); }

// causal_lm's evaluation: the mean loss over `batches` random (B, T) windows of `tokens`, drawn from
// a generator seeded with `seed`, in eval mode without a graph; nullopt when abandoned on `stop`.
std::optional<double> evaluate(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T,
                               int64_t batches, uint64_t seed, const std::atomic<bool>* stop);
// The same, never abandoned: the mean loss.
inline double evaluate(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T, int64_t batches,
                       uint64_t seed) {
  return *evaluate(model, tokens, B, T, batches, seed, nullptr);
}

// How a text objective reaches its token cache: data.cache_dir, and (log) a line on stderr for every
// cache built and why. tfm data prepare and eval --dump-logits read the data this way too.
TokenCacheOptions token_cache_options(const Config& config, bool log);

// ---- what each objective's model does at inference ----

// masked_lm's rule (BERT's, docs/architecture.md): each position of x is chosen with probability
// mask_prob; a chosen one becomes mask_id (80%), a uniformly random ordinary token in [0, ordinary)
// (10%) or stays (10%). y gets the original token at chosen positions and kNotMasked elsewhere. When
// no position was chosen one is, so the loss is defined. Returns the number chosen.
constexpr int32_t kNotMasked = -100;  // cross_entropy's ignore_index
int64_t mask_tokens(std::vector<int32_t>& x, std::vector<int32_t>& y, Rng& rng, double mask_prob, int32_t mask_id,
                    int64_t ordinary);

// masked_lm: every "[MASK]" in `text` is one masked position; the top_k candidates per position
// with their probabilities, in order of the positions.
struct MaskCandidates {
  int64_t position = 0;  // token index in the encoded text
  std::vector<std::pair<std::string, double>> candidates;
};
struct FillMaskResult {
  std::vector<int32_t> tokens;  // the encoded input, [MASK] = mask id
  std::vector<MaskCandidates> masks;
};
constexpr const char* kMaskToken = "[MASK]";
FillMaskResult fill_mask(Objective& objective, const std::string& text, int64_t top_k);

// seq2seq: translations of `texts` (each encoded with the source vocabulary, unknown symbols as <unk>,
// truncated to data.max_source_len), detokenized; greedy or beam search as `options` say
// (options.max_len 0 = data.max_target_len + 1; more than the model's max_seq_len: ConfigError naming
// --max-len). `source` names the texts in errors (a flag, or "stdin line 3"). No texts: only the run and
// the options are checked.
std::vector<std::string> translate_texts(Objective& objective, const std::vector<std::string>& texts,
                                         const TranslateOptions& options,
                                         const std::string& source = "--text");

// The attention maps of a seq2seq run on one pair (analysis.h): `source` read as translate reads it,
// `target` teacher-forced (empty: the run's greedy translation of the source).
PairAttention pair_attention(Objective& objective, const std::string& source, const std::string& target);

}  // namespace tfm
