// The options of training: one struct per family, each default written once, here. The config table
// (config/config.h) binds every train.* key to its member, as it binds model.* to ModelConfig
// (nn/model_config.h), so a key's default, type and allowed values come from this file;
// Config::train() gives the resolved struct, and training reads its options from it.
// The plain option structs live here, below training, so that the config layer can bind them;
// training/optim.h runs them.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/engine/enum_names.h"
#include "tfm/engine/gemm.h"

namespace tfm {

// Each option enum is spelled by enum_names<E>() (engine/enum_names.h), in declaration order.
enum class ObjectiveKind { CausalLm, MaskedLm, Seq2Seq };  // "causal_lm", "masked_lm", "seq2seq"
// "adamw", "sgd", "muon" (Muon on the hidden matrices, AdamW on the rest)
enum class OptimizerKind { AdamW, Sgd, Muon };
// "cosine", "constant", "inverse_sqrt", "wsd"
enum class ScheduleKind { Cosine, Constant, InverseSqrt, Wsd };

template <>
const std::vector<std::string>& enum_names<ObjectiveKind>();
template <>
const std::vector<std::string>& enum_names<OptimizerKind>();
template <>
const std::vector<std::string>& enum_names<ScheduleKind>();

// train.optimizer.*: the update rule (training/optim.h has the formulas).
struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::AdamW;
  double lr = 1e-3;  // the schedule's peak: Muon's rate is muon_lr * (rate of the step / lr)
  std::array<double, 2> betas = {0.9, 0.99};                             // AdamW's (beta1, beta2)
  double eps = 1e-8;                                                     // AdamW's; not a key
  double weight_decay = 0.1;                                             // of rank >= 2 tensors
  double momentum = 0.9;                                                 // sgd
  double muon_lr = 0.02, muon_momentum = 0.95, muon_weight_decay = 0.0;  // muon
  // Muon's momentum schedule (modded-nanogpt's): from muon_momentum_min up to muon_momentum over the
  // first warmup steps, back down to muon_momentum_min over the last cooldown steps (0 = off).
  int64_t muon_momentum_warmup_steps = 0, muon_momentum_cooldown_steps = 0;
  double muon_momentum_min = 0.85;
  // Muon's weight decay only where the update and the weight agree in sign (Chen et al. 2025).
  bool muon_cautious_weight_decay = false;
  // train.ema_decay: an exponential moving average of the weights, updated after every step (0 = off).
  double ema_decay = 0.0;
};

// train.lr_schedule.*: the learning rate over the steps (LrSchedule in training/optim.h runs it).
struct LrScheduleConfig {
  ScheduleKind name = ScheduleKind::Cosine;
  int64_t warmup_steps = 100;
  double decay_fraction = 0.2;  // wsd
  // Derived by the key table (train.optimizer.lr / 10): this default is what the default lr gives.
  double min_lr = 1e-4;
};

// train.*: everything of a training run that is not the model or the data.
struct TrainConfig {
  ObjectiveKind objective = ObjectiveKind::CausalLm;
  double mask_prob = 0.15;  // masked_lm
  int64_t batch_size = 12;  // B
  // T: derived by the key table (model.max_seq_len); this default is the default model's.
  int64_t seq_len = 64;
  int64_t grad_accum_steps = 1;
  int64_t max_steps = 2000;
  double grad_clip = 1.0;  // 0 = off
  bool skip_nonfinite = false;
  // Multi-token prediction's loss weight at step 0 (model.mtp_heads > 0), decaying linearly to 0 at
  // max_steps (mtp_weight_at, training/optim.h).
  double mtp_weight = 0.3;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  int64_t eval_interval = 250;
  int64_t eval_steps = 20;   // 0 = the whole validation split
  double target_loss = 0.0;  // 0 = off
  double max_seconds = 0.0;  // 0 = off
  int64_t log_interval = 10;
  int64_t checkpoint_interval = 250;  // 0 = only at the end
  int64_t threads = 0;                // 0 = all cores
  // Derived by the key table (from the micro-batch's feed-forward product); the default model's is 0.
  int64_t data_parallel = 0;
  // "auto" is decided at start-up (resolve_precision, engine/gemm.h); a run's config and checkpoints
  // record the precision it resolved to.
  PrecisionChoice precision = PrecisionChoice::Fp32;
  GemmBackendChoice gemm_backend = GemmBackendChoice::Auto;
  bool skip_memory_check = false;
};

}  // namespace tfm
