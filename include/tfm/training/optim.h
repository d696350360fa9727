// Optimizers, learning-rate schedules and gradient clipping as flat loops over the model's one value
// buffer and one gradient buffer (llm.c style). The formulas follow torch.optim.AdamW / torch.optim.SGD
// and scripts/torch_lm.py's schedule and Muon, so the two trainers can be compared step for step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/config/train_config.h"
#include "tfm/engine/tensor.h"

namespace tfm {

// Learning rate at `step` (0-based), as torch_lm.py's lr_at:
//   warmup:  lr * (step + 1) / warmup                       while step < warmup
//   cosine:  min_lr + 0.5 (1 + cos(pi (step - warmup) / max(1, total - warmup))) (lr - min_lr),
//            min_lr from step >= total on
//   constant: lr
//   inverse_sqrt: lr * sqrt(max(warmup, 1) / (step + 1)), the original Transformer's decay
//            (continuous with the warmup at step + 1 = warmup)
//   wsd:     warmup-stable-decay (Hu et al. 2024, MiniCPM, sec. 4, with the linear cool-down of
//            Haegele et al. 2024): lr until s0 = total - floor(decay_fraction * total), then
//            lr + (min_lr - lr) * min(1, (step - s0 + 1) / max(1, total - s0)), min_lr at step total - 1
// (warmup = warmup_steps, total = train.max_steps; the options are train.lr_schedule.*,
// config/train_config.h.)
struct LrSchedule : LrScheduleConfig {
  double lr = 1e-3;      // train.optimizer.lr
  int64_t total = 2000;  // train.max_steps
  double at(int64_t step) const;
};
// The schedule of a run's options.
LrSchedule lr_schedule(const TrainConfig& train);

// Multi-token prediction's loss weight at optimizer step `step` (0-based) of train.max_steps = total:
// weight * (1 - step / total), from train.mtp_weight at step 0 linearly down to 0 at the end, so the
// last steps train for the next token alone, as the evaluation measures it (DeepSeek-V3, 2024, sec. 4.2,
// likewise lowers its weight from 0.3 to 0.1 late in training).
double mtp_weight_at(double weight, int64_t step, int64_t total);

// A contiguous run of parameters in the flat buffers.
struct ParamSegment {
  int64_t offset = 0;
  int64_t size = 0;
  bool decay = false;  // weight decay applies (rank >= 2 tensors)
  // A hidden layer's weight matrix (is_hidden_matrix), (out, in) = (rows, cols): Muon's under "muon".
  // rows = 0 for every other tensor.
  int64_t rows = 0, cols = 0;
};

// The tensors Muon updates under optimizer "muon" (docs/architecture.md, "Modern options"): the weight
// matrices of the hidden layers, every rank-2 tensor under "blocks." (a language model) or under
// "encoder.blocks." / "decoder.blocks." (the encoder-decoder's two stacks, the same layers). The
// embeddings, an untied head, learned positions, biases and gains are not: Muon is for hidden layers
// (Jordan et al. 2024), and the input and output layers keep AdamW.
bool is_hidden_matrix(const std::string& name, const Shape& shape);
class Model;
// The model's parameters as segments, in buffer order (decay and hidden matrices marked).
std::vector<ParamSegment> optimizer_segments(const Model& model);
// Muon's Newton-Schulz FLOPs for one (rows, cols) matrix per step, 2 per multiply-add as the model's
// FLOPs: five iterations of X X^T (m m n), A A (m m m) and B X (m m n), m = min(rows, cols),
// n = max(rows, cols): 10 m^2 (2 n + m). Not part of the model's FLOPs (MFU stays the model's).
double newton_schulz_flops(int64_t rows, int64_t cols);
// The sum over the segments Muon updates (0 for any other optimizer).
double newton_schulz_flops(const std::vector<ParamSegment>& segments, OptimizerKind optimizer);

// The options (OptimizerConfig, train.optimizer.*) are in config/train_config.h.

// Muon's momentum at `step` (0-based) of `total` (train.max_steps), as torch_lm.py's muon_momentum_at:
// mu = lo + (mu_max - lo) w (1 - c), lo = muon_momentum_min, mu_max = muon_momentum,
// w = min(1, step / warmup) (1 without a warmup), c = clamp((step - (total - cooldown) + 1) / cooldown, 0, 1)
// (0 without a cooldown); exactly muon_momentum when both are off.
double muon_momentum_at(const OptimizerConfig& config, int64_t step, int64_t total);

class Optimizer {
 public:
  // total_steps: train.max_steps, where Muon's momentum cooldown ends (needed only with one).
  Optimizer(OptimizerConfig config, std::vector<ParamSegment> segments, int64_t total_size,
            int64_t total_steps = 0);
  // One update of values (P,) from grads (P,) at learning rate lr.
  //   AdamW: p *= 1 - lr wd (decay segments); (b1, b2) = betas;
  //          m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  //   SGD:   g += wd p (decay segments); buf = momentum buf + g; p -= lr buf
  //   Muon (Jordan et al. 2024), on each hidden matrix W (out, in), at lr_m = muon_lr * lr / config.lr:
  //          M = mu M + G; U = G + mu M (Nesterov); W *= 1 - lr_m wd_m;
  //          W -= lr_m sqrt(max(1, out / in)) NS5(U); AdamW as above on every other segment.
  //          mu = muon_momentum_at(step) (muon_momentum unless its warmup or cooldown is on). Cautious
  //          weight decay: W_ij *= 1 - lr_m wd_m only where NS5(U)_ij W_ij >= 0 (the step moves W_ij
  //          towards 0 anyway), the sign read before the decay.
  //   EMA (ema_decay d > 0): E = W before the first step; after each, E = d E + (1 - d) W, over all P.
  //          NS5 (the quintic Newton-Schulz iteration): X = U / (||U||_F + 1e-7), in the orientation with
  //          fewer rows; five times A = X X^T, X = a X + (b A + c A A) X, (a, b, c) = (3.4445, -4.7750,
  //          2.0315); every singular value of U above ~0.002 ||U|| moves into [0.68, 1.21], approximating
  //          the orthogonal factor of U's SVD. Its products go through gemm(), in the run's precision
  //          (bfloat16 products under train.precision "bf16"; optim.cpp has the measurements), over the
  //          matrices of one shape at a time: whole matrices per thread when there are at least as many
  //          as threads, else threaded GEMMs.
  void step(float* values, const float* grads, double lr);

  const OptimizerConfig& config() const { return config_; }
  // The EMA of the weights (P,), nullptr without ema_decay.
  float* ema() { return config_.ema_decay > 0 ? state_.back().data() : nullptr; }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // AdamW: {m, v}, each (P,); SGD: {momentum buffer} (P,); Muon: {m, v} of its AdamW part (the
  // segments that are not hidden matrices, in buffer order) and the hidden matrices' momentum (in
  // buffer order); with ema_decay > 0 the EMA of the weights (P,) last. Saved in checkpoints.
  std::vector<std::vector<float>>& state() { return state_; }
  const std::vector<std::vector<float>>& state() const { return state_; }
  // Floats of state() plus Muon's Newton-Schulz workspace for `threads` threads: what the memory
  // pre-flight estimates.
  double state_floats(int threads) const;
  // Muon's Newton-Schulz workspace per thread: two copies of its largest matrix and two m x m products.
  static double newton_schulz_workspace(int64_t rows, int64_t cols);

 private:
  // A contiguous run of elements updated elementwise (AdamW or SGD), with its offset into the state.
  struct Span {
    int64_t offset = 0, size = 0, state = 0;
    bool decay = false;
  };
  // A hidden matrix Muon updates: its offset, shape and its momentum's offset into state_[2].
  struct Matrix {
    int64_t offset = 0, rows = 0, cols = 0, state = 0;
  };
  void muon_step(float* values, const float* grads, double lr);
  void update_ema(const float* values);

  OptimizerConfig config_;
  int64_t total_size_ = 0, total_steps_ = 0;
  std::vector<Span> spans_;
  std::vector<std::vector<Matrix>> shapes_;    // Muon's matrices, grouped by shape
  std::vector<std::vector<float>> workspace_;  // per thread, grown on first use
  std::vector<std::vector<float>> state_;
  int64_t t_ = 0;
};

// The global L2 norm of grads (P,), accumulated in double.
double grad_norm(const float* grads, int64_t n);
// Scales grads so that their global norm is at most max_norm (as torch.nn.utils.clip_grad_norm_,
// coefficient max_norm / (norm + 1e-6)); max_norm <= 0 leaves them. Returns the norm before clipping.
double clip_grad_norm(float* grads, int64_t n, double max_norm);

}  // namespace tfm
