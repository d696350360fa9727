// Optimizers, learning-rate schedules and gradient clipping as flat loops over the model's one value
// buffer and one gradient buffer (llm.c style). The formulas follow torch.optim.AdamW / torch.optim.SGD
// and scripts/torch_lm.py's schedule, so the two trainers can be compared step for step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm {

// Learning rate at `step` (0-based), as torch_lm.py's lr_at:
//   warmup:  lr * (step + 1) / warmup                       while step < warmup
//   cosine:  min_lr + 0.5 (1 + cos(pi (step - warmup) / max(1, total - warmup))) (lr - min_lr),
//            min_lr from step >= total on
//   constant: lr
//   inverse_sqrt: lr * sqrt(max(warmup, 1) / (step + 1)), the original Transformer's decay
//            (continuous with the warmup at step + 1 = warmup)
struct LrSchedule {
  std::string name = "cosine";  // "cosine" | "constant" | "inverse_sqrt"
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 100;
  int64_t total = 2000;
  double at(int64_t step) const;
};

// A contiguous run of parameters in the flat buffers.
struct ParamSegment {
  int64_t offset = 0;
  int64_t size = 0;
  bool decay = false;  // weight decay applies (rank >= 2 tensors)
};

struct OptimizerConfig {
  std::string name = "adamw";  // "adamw" | "sgd"
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;  // sgd
};

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, std::vector<ParamSegment> segments, int64_t total_size);
  // One update of values (P,) from grads (P,) at learning rate lr.
  //   AdamW: p *= 1 - lr wd (decay segments); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  //   SGD:   g += wd p (decay segments); buf = momentum buf + g; p -= lr buf
  void step(float* values, const float* grads, double lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // AdamW: {m, v}; SGD: {momentum buffer}. Each (P,); saved in checkpoints.
  std::vector<std::vector<float>>& state() { return state_; }
  const std::vector<std::vector<float>>& state() const { return state_; }

 private:
  OptimizerConfig config_;
  std::vector<ParamSegment> segments_;
  std::vector<std::vector<float>> state_;
  int64_t t_ = 0;
};

// The global L2 norm of grads (P,), accumulated in double.
double grad_norm(const float* grads, int64_t n);
// Scales grads so that their global norm is at most max_norm (as torch.nn.utils.clip_grad_norm_,
// coefficient max_norm / (norm + 1e-6)); max_norm <= 0 leaves them. Returns the norm before clipping.
double clip_grad_norm(float* grads, int64_t n, double max_norm);

}  // namespace tfm
