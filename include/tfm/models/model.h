// What every model shares, whatever its architecture (language model: language_model.h; encoder-
// decoder: encoder_decoder.h): its parameters in one flat value buffer and one flat gradient buffer
// with a table of named views into them, so zero-grad, clipping and the optimizers are flat loops
// (llm.c style), and the trainer, checkpoints and export see only this.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/random.h"
#include "tfm/engine/tensor.h"
#include "tfm/nn/model_config.h"
#include "tfm/nn/module.h"

namespace tfm {

// A parameter: its export name (docs/architecture.md), and a view into the flat value buffer whose
// gradient is the matching view into the flat gradient buffer.
struct NamedParameter {
  std::string name;
  Tensor value;
  int64_t offset = 0;  // into the flat buffers
  bool decay = false;  // AdamW weight decay applies (rank >= 2, head mixing matrices excepted)
};

// FLOPs per token, counted as 2 per multiply-add of the matrix products (Kaplan et al. 2020's
// convention, the one MFU figures use): a model's Cost::flops over the tokens of its batch.
struct FlopCount {
  double forward_per_token = 0;  // at sequence length T (attention is O(T^2 C) per sequence)
  double train_per_token = 0;    // forward + backward (backward = 2x forward)
};
FlopCount flops_per_token(const Cost& forward, double tokens);

class MultiHeadAttention;

// Whether a parameter is a learned position table (max_seq_len, C): pos.weight, or an encoder-decoder's
// src_pos.weight and tgt_pos.weight (model.positional_encoding "learned").
bool is_position_table(const std::string& parameter_name);

// Initialises every parameter of `root` as docs/architecture.md says, in named_parameters() order from
// Rng(seed): matrices and embeddings N(0, 0.02), the residual branches' output projections (*wo.weight,
// *fc2.weight) N(0, 0.02 / sqrt(2 * residual_layers)), biases 0, norm gains 1, head mixing matrices
// (*mix_logits, *mix_weights) identities; each then requires a gradient. The models call it on their
// module tree (Model::adopt_parameters); a layer built on its own (a MultiHeadAttention, a
// DecoderBlock) holds zeros that require no gradient until it is called on it.
void init_parameters(Module& root, uint64_t seed, int64_t residual_layers = 1);

// The flat buffers (named views in export order), training mode and the dropout generator.
class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::vector<NamedParameter>& parameters() const { return parameters_; }
  const NamedParameter* find_parameter(const std::string& name) const;
  Tensor flat_values() const;  // (P,)
  Tensor flat_grads() const;   // (P,)
  int64_t parameter_count() const { return size_; }
  // Component -> count (embedding, positions, attention, feed-forward, norms, head), summing to the
  // total; classified by parameter name.
  std::vector<std::pair<std::string, int64_t>> parameter_breakdown() const;

  // The sum of the layers' auxiliary losses from the last forward (top-k head gating's
  // load balancing), cleared by reading; undefined when there is none. The training step adds it to
  // the objective's loss.
  Tensor take_auxiliary_loss();
  // loss + take_auxiliary_loss() (loss itself when there is none): the loss a training step
  // differentiates, and the one tfm gradcheck checks.
  Tensor with_auxiliary_loss(const Tensor& loss);
  // Top-k head gating: per attention layer (in module order, named as its parameters' prefix), the
  // fraction of the tokens each head served since the last call; the counts restart. Empty without
  // gating.
  std::vector<std::pair<std::string, std::vector<double>>> take_head_usage();
  // Points every parameter's value at `source`'s value buffer (same architecture): a data-parallel
  // replica reads the master's weights with no copy; its gradients stay its own.
  void share_values_of(const Model& source);

  void set_training(bool on);  // dropout is active only in training mode
  bool training() const;
  Rng& dropout_rng() { return dropout_rng_; }  // its state goes into checkpoints

 protected:
  Model() = default;
  // Moves every parameter of `root` into the flat buffers and initialises it (init_parameters), the
  // head mixing matrices not decayed; dropout draws from init_seed + 1. Derived constructors call it
  // once, after building their module tree.
  void adopt_parameters(Module& root, uint64_t init_seed, int64_t residual_layers);

 private:
  Module* root_ = nullptr;
  // The attention layers with top-k gating, found once in adopt_parameters: the training step asks
  // them for the balance term without walking the module tree (and asks nobody without gating).
  std::vector<MultiHeadAttention*> gated_;
  std::shared_ptr<Storage> values_, grads_;
  int64_t size_ = 0;
  std::vector<NamedParameter> parameters_;
  Rng dropout_rng_{0};
};

}  // namespace tfm
