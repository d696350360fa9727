// A training objective: how a batch is drawn, what the loss is, what evaluation measures and what
// the model is. The training loop (trainer.cpp: schedule, clipping, accumulation, logging, eval,
// checkpoints, signals, MPI) is written once against this interface; each objective lives in one
// file:
// - causal_lm (src/objectives/causal_lm.cpp): decoder-only, next-token prediction (sampling:
//   models/sampling.h);
// - masked_lm (src/objectives/masked_lm.cpp): encoder-only, BERT's masked tokens (fill_mask:
//   inference.h);
// - seq2seq (src/objectives/seq2seq.cpp): an encoder-decoder over sentence pairs (translate_texts:
//   inference.h).
// Callers ask an objective what it can do (capabilities()), never its name.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/random.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/model.h"

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

// One shard's loss, with its graph. `loss` is the objective's: the train loss train.log and
// metrics.jsonl report, comparable across variants. `auxiliary`, when defined, is an auxiliary training
// term of the same forward, scaled like `loss` (by the shard's share) but not weighted: causal_lm's
// multi-token prediction loss (model.mtp_heads, LanguageModel::mtp_loss). The training step
// differentiates loss + w * auxiliary, w its scheduled weight (train.mtp_weight: mtp_weight_at,
// training/optim.h), and logs the auxiliary apart (train_mtp_loss).
struct ShardLoss {
  Tensor loss;
  Tensor auxiliary;
};

// One training micro-batch's loss (a scalar with its graph) and the real tokens it holds (padding
// and unmasked positions excluded where the objective says so), for tokens/s; its auxiliary term as
// ShardLoss's.
struct BatchLoss {
  Tensor loss;
  int64_t tokens = 0;
  Tensor auxiliary;
};

// One training micro-batch cut into shards of whole rows for data-parallel workers inside one process
// (train.data_parallel; trainer.cpp). losses[i] computes shard i's loss, with its graph, on any model
// of the objective's architecture (model() or a replica()); the shards' losses (and auxiliary terms)
// sum to the whole batch's (each is its own mean scaled by its share of the counted positions), so
// their gradients sum to the whole batch's gradient. A shard with no counted position returns
// undefined tensors (nothing to add).
struct BatchShards {
  std::vector<std::function<ShardLoss(Model&)>> losses;
  int64_t tokens = 0;  // as BatchLoss::tokens, over the whole batch
  // The positions the batch's loss is the mean over: its targets (masked_lm: the masked ones; seq2seq:
  // the real target tokens). Gradient accumulation and data parallelism over ranks weight each batch by
  // it, so that their update is the mean over every counted position, as one larger batch's.
  int64_t counted = 0;
};

// What an objective trains on.
enum class TrainingData {
  Text,   // one text file's token stream (data.format "text")
  Pairs,  // sentence pairs (data.format "pairs")
};
// The model an objective trains.
enum class ModelKind {
  CausalDecoder,         // a LanguageModel with model.causal true
  BidirectionalEncoder,  // a LanguageModel with model.causal false
  EncoderDecoder,        // a Seq2SeqModel
};
// What a trained model does at inference (objectives/inference.h, models/sampling.h).
enum class Inference {
  Sample,     // continues a prompt: generate() (tfm sample)
  FillMask,   // predicts each [MASK]: fill_mask() (tfm fill-mask)
  Translate,  // maps a source sentence to a target one: translate_texts(), pair_attention() (tfm translate)
};

// What an objective needs and what its trained model can do: what callers ask instead of its name.
struct ObjectiveCapabilities {
  TrainingData data = TrainingData::Text;
  ModelKind model = ModelKind::CausalDecoder;
  Inference inference = Inference::Sample;
  // The command that runs `inference` on a trained run, for messages ("tfm sample").
  std::string inference_command;
  // How evaluate() draws its batches: true when it walks the split in order (the same pairs every
  // time, at most the split's size: evaluation_batches()), false when it draws random batches from
  // its seed.
  bool evaluates_in_order = false;
  // The figures evaluate() reports, in order ("loss" first).
  std::vector<std::string> metrics;
  // Ids the model has past its tokenizer's (masked_lm's [MASK]): model.vocab_size is the tokenizer's
  // size plus these.
  int64_t extra_ids = 0;

  // Whether the model is a LanguageModel (per-layer head gates: tfm heads, --mask-heads, logits).
  bool language_model() const { return model != ModelKind::EncoderDecoder; }
  bool encoder_decoder() const { return model == ModelKind::EncoderDecoder; }  // two vocabularies
};

// The capabilities of train.objective's `kind`, known before any data is read (Objective::capabilities()
// returns the same): what a command that has only the config decides by.
ObjectiveCapabilities objective_capabilities(ObjectiveKind kind);

class Objective {
 public:
  virtual ~Objective() = default;
  // train.objective's value: for the log, messages and file metadata, not for deciding behaviour
  // (capabilities() is for that).
  virtual std::string name() const = 0;
  virtual ObjectiveCapabilities capabilities() const = 0;
  virtual Model& model() = 0;

  // The llama.cpp architecture of a GGUF export of this run (models/gguf_export.h); ConfigError naming
  // every reason llama.cpp cannot run it when it cannot.
  virtual GgufArchitecture gguf_architecture() const = 0;

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
  // drawn from a fresh generator seeded with `seed` (the same batches at every evaluation); batches 0
  // (train.eval_steps 0): the whole split once, every token scored once, in order (text: windows of
  // train.seq_len, the tail a shorter one; seq2seq: every pair), the same value at every call. When
  // `stop` is set (SIGINT/SIGTERM during training) before a batch, the evaluation is abandoned:
  // Metrics::abandoned, no figures.
  virtual Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed,
                           const std::atomic<bool>* stop = nullptr) = 0;
  // The batches of `batches` that evaluate() runs: all of them where batches are drawn at random; at
  // most the split's size in batches where the split is walked in order (seq2seq); for batches 0 the
  // forward batches the whole split takes.
  virtual int64_t evaluation_batches(const std::string& split, int64_t batches) const {
    (void)split;
    return batches;
  }

  // Training FLOPs per counted token, for MFU.
  virtual double train_flops_per_token() const = 0;
  // One line about the data for the log ("data: ...").
  virtual std::string describe_data() const = 0;
  // A hash of the data the splits are cut from (a text corpus's token ids and document ends, a seq2seq
  // run's pairs), kept in checkpoints so that a resume can say when the data changed under it; 0 without
  // data. The split itself (data.val_fraction, train.seq_len) cannot change on a resume.
  virtual uint64_t data_hash() const = 0;
  // What about the data deserves a warning in the log (a split far from data.val_fraction).
  virtual std::vector<std::string> data_warnings() const { return {}; }
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
  // A stop request (training's): tokenizing the corpus for its cache stops and throws Interrupted.
  const std::atomic<bool>* stop = nullptr;
};

// Builds the objective `train.objective` names and its model (initialised from `seed`).
// Vocabularies come from `vocabulary` when given (a checkpoint's: resume, eval, sampling), else from
// the data.
std::unique_ptr<Objective> make_objective(const Config& config, const Vocabulary* vocabulary,
                                          const ObjectiveOptions& options);

}  // namespace tfm
