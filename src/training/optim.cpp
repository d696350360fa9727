#include "tfm/training/optim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <utility>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/models/model.h"

namespace tfm {

LrSchedule lr_schedule(const TrainConfig& train) {
  LrSchedule s;
  static_cast<LrScheduleConfig&>(s) = train.lr_schedule;
  s.lr = train.optimizer.lr;
  s.total = train.max_steps;
  return s;
}

double LrSchedule::at(int64_t step) const {
  const int64_t warmup = warmup_steps;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (name == ScheduleKind::Constant) return lr;
  if (name == ScheduleKind::InverseSqrt)
    return lr * std::sqrt(static_cast<double>(std::max<int64_t>(warmup, 1)) / static_cast<double>(step + 1));
  if (name == ScheduleKind::Wsd) {
    // MiniCPM's warmup-stable-decay (Hu et al. 2024, sec. 4): the peak held as long as possible, so a
    // run can be continued from any checkpoint of the stable phase, then a short linear cool-down.
    const int64_t s0 = total - static_cast<int64_t>(std::floor(decay_fraction * static_cast<double>(total)));
    if (step < s0) return lr;
    const double progress =
        static_cast<double>(step - s0 + 1) / static_cast<double>(std::max<int64_t>(1, total - s0));
    return lr + (min_lr - lr) * std::min(1.0, progress);
  }
  if (step >= total) return min_lr;
  const double ratio =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

double mtp_weight_at(double weight, int64_t step, int64_t total) {
  if (total <= 0) return 0.0;
  const double left =
      1.0 - static_cast<double>(std::clamp<int64_t>(step, 0, total)) / static_cast<double>(total);
  return weight * left;
}

bool is_hidden_matrix(const std::string& name, const Shape& shape) {
  if (shape.size() != 2) return false;
  for (const char* stack : {"blocks.", "encoder.blocks.", "decoder.blocks."})
    if (name.rfind(stack, 0) == 0) return true;
  return false;
}

std::vector<ParamSegment> optimizer_segments(const Model& model) {
  std::vector<ParamSegment> segs;
  for (const NamedParameter& p : model.parameters()) {
    ParamSegment s{p.offset, p.value.numel(), p.decay};
    if (is_hidden_matrix(p.name, p.value.shape())) s.rows = p.value.shape()[0], s.cols = p.value.shape()[1];
    segs.push_back(s);
  }
  return segs;
}

double newton_schulz_flops(int64_t rows, int64_t cols) {
  const double m = static_cast<double>(std::min(rows, cols)), n = static_cast<double>(std::max(rows, cols));
  return 10.0 * m * m * (2.0 * n + m);
}

double newton_schulz_flops(const std::vector<ParamSegment>& segments, OptimizerKind optimizer) {
  double flops = 0.0;
  if (optimizer == OptimizerKind::Muon)
    for (const ParamSegment& s : segments)
      if (s.rows > 0) flops += newton_schulz_flops(s.rows, s.cols);
  return flops;
}

double Optimizer::newton_schulz_workspace(int64_t rows, int64_t cols) {
  const double m = static_cast<double>(std::min(rows, cols));
  return 2.0 * static_cast<double>(rows) * static_cast<double>(cols) + 2.0 * m * m;
}

double muon_momentum_at(const OptimizerConfig& config, int64_t step, int64_t total) {
  const int64_t warmup = config.muon_momentum_warmup_steps, cooldown = config.muon_momentum_cooldown_steps;
  if (warmup <= 0 && cooldown <= 0) return config.muon_momentum;
  const double s = static_cast<double>(step);
  const double w = warmup > 0 ? std::min(1.0, s / static_cast<double>(warmup)) : 1.0;
  const double c =
      cooldown > 0
          ? std::clamp((s - static_cast<double>(total - cooldown) + 1.0) / static_cast<double>(cooldown), 0.0,
                       1.0)
          : 0.0;
  const double lo = config.muon_momentum_min;
  return lo + (config.muon_momentum - lo) * w * (1.0 - c);
}

Optimizer::Optimizer(OptimizerConfig config, std::vector<ParamSegment> segments, int64_t total_size,
                     int64_t total_steps)
    : config_(std::move(config)), total_size_(total_size), total_steps_(total_steps) {
  const bool muon = config_.name == OptimizerKind::Muon;
  TFM_CHECK(!muon || config_.lr > 0, "Optimizer", "muon needs the schedule's peak lr > 0, got ", config_.lr);
  TFM_CHECK(config_.muon_momentum_cooldown_steps <= 0 || total_steps > 0, "Optimizer",
            "a momentum cooldown needs the run's total steps");
  std::map<std::pair<int64_t, int64_t>, size_t> shape_index;
  int64_t elementwise = 0, matrices = 0;
  for (const ParamSegment& s : segments) {
    TFM_CHECK(s.offset >= 0 && s.size >= 0 && s.offset + s.size <= total_size, "Optimizer", "segment [",
              s.offset, ", ", s.offset + s.size, ") outside the buffer of ", total_size);
    if (muon && s.rows > 0) {
      TFM_CHECK(s.rows * s.cols == s.size, "Optimizer", "matrix (", s.rows, ", ", s.cols, ") at ", s.offset,
                " does not hold its segment of ", s.size);
      const auto [it, fresh] = shape_index.emplace(std::make_pair(s.rows, s.cols), shapes_.size());
      if (fresh) shapes_.emplace_back();
      shapes_[it->second].push_back({s.offset, s.rows, s.cols, matrices});
      matrices += s.size;
    } else {
      // AdamW and SGD keep their state at the parameters' offsets (P floats per buffer, as checkpoints
      // always held it); Muon's AdamW part packs the segments it updates.
      spans_.push_back({s.offset, s.size, muon ? elementwise : s.offset, s.decay});
      elementwise += s.size;
    }
  }
  if (muon)
    state_ = {std::vector<float>(elementwise, 0.0f), std::vector<float>(elementwise, 0.0f),
              std::vector<float>(matrices, 0.0f)};
  else
    state_.assign(config_.name == OptimizerKind::AdamW ? 2 : 1, std::vector<float>(total_size, 0.0f));
  if (config_.ema_decay > 0) state_.emplace_back(static_cast<size_t>(total_size), 0.0f);
}

double Optimizer::state_floats(int threads) const {
  double floats = 0.0, workspace = 0.0;
  for (const auto& s : state_) floats += static_cast<double>(s.size());
  for (const auto& group : shapes_)
    workspace = std::max(workspace, newton_schulz_workspace(group.front().rows, group.front().cols));
  return floats + std::max(1, threads) * workspace;
}

namespace {
// Runs fn(segment, begin, end) over every segment, split evenly over the threads inside ONE parallel
// region: a step is one fork/join whatever the number of tensors (it was one per tensor over 32k
// elements, and the smaller tensors ran on one thread). Elementwise, so the bits do not depend on
// the thread count.
template <class Span, class Fn>
void for_each_share(const std::vector<Span>& spans, int64_t total, const Fn& fn) {
#pragma omp parallel if (total > (1 << 15))
  {
    const int64_t nth = omp_get_num_threads(), tid = omp_get_thread_num();
    for (const Span& seg : spans) {
      const int64_t begin = seg.offset + seg.size * tid / nth, end = seg.offset + seg.size * (tid + 1) / nth;
      fn(seg, begin, end);
    }
  }
}
// The update of n elements. Plain restrict pointers and scalars, no captured references: the
// compiler then keeps everything in registers and vectorises (through a lambda's captures it reloaded
// every pointer after each store and ran scalar sqrt/div, 7.7% of a small-config step). The same
// formula; where the vector code fuses a multiply-add the scalar code did not, the last bit can differ
// (grad norms after 100 steps agreed to 7 digits).
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                 int64_t n, float keep, float b1, float one_minus_b1, float b2, float one_minus_b2,
                 float bc2_sqrt, float eps, float step_size) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] * b1 + gi * one_minus_b1;
    const float vi = v[i] * b2 + one_minus_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float denom = __builtin_sqrtf(vi) / bc2_sqrt + eps;  // v >= 0: no errno path needed
    p[i] = p[i] * keep - step_size * (mi / denom);
  }
}

void sgd_range(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, float wd,
               float mu, float lr) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    buf[i] = mu * buf[i] + gi;
    p[i] -= lr * buf[i];
  }
}

// Muon's orthogonalisation (Jordan et al. 2024): the quintic Newton-Schulz iteration, its coefficients
// tuned so that five steps from a Frobenius norm of 1 push every singular value into a band around 1 (not
// to 1: its slope at 0 is a = 3.4445 for speed, at the price of convergence), i.e. roughly U_svd V_svd^T.
// x (rows, cols) holds U / (||U|| + 1e-7) and is overwritten; xn (rows, cols) and a, b (m, m),
// m = min(rows, cols), are workspace. Returns x or xn, whichever holds the result. A tall matrix
// (rows > cols) is iterated as its transpose Y = X^T without moving it: A = Y Y^T = X^T X and
// Y' = a Y + B Y, i.e. X' = a X + X B^T, so the Gram matrix is always the small m x m one.
float* newton_schulz5(float* x, int64_t rows, int64_t cols, float* xn, float* a, float* b) {
  constexpr float ka = 3.4445f, kb = -4.7750f, kc = 2.0315f;
  const bool wide = rows <= cols;
  const int64_t m = wide ? rows : cols, n = wide ? cols : rows, mm = m * m, size = rows * cols;
  for (int iteration = 0; iteration < 5; ++iteration) {
    gemm(!wide, wide, m, m, n, 1.0f, x, cols, x, cols, 0.0f, a, m);  // A = X X^T
    for (int64_t i = 0; i < mm; ++i) b[i] = kb * a[i];
    gemm(false, false, m, m, m, kc, a, m, a, m, 1.0f, b, m);  // B = b A + c A A
    for (int64_t i = 0; i < size; ++i) xn[i] = ka * x[i];
    if (wide)
      gemm(false, false, m, n, m, 1.0f, b, m, x, cols, 1.0f, xn, cols);  // X' = a X + B X
    else
      gemm(false, true, n, m, m, 1.0f, x, cols, b, m, 1.0f, xn, cols);  // X' = a X + X B^T
    std::swap(x, xn);
  }
  return x;
}

}  // namespace

void Optimizer::step(float* values, const float* grads, double lr) {
  ++t_;
  if (config_.ema_decay > 0 && t_ == 1) std::copy(values, values + total_size_, ema());  // E = W_0
  const int64_t total = static_cast<int64_t>(state_[0].size());
  if (config_.name == OptimizerKind::AdamW || config_.name == OptimizerKind::Muon) {
    float* m = state_[0].data();
    float* v = state_[1].data();
    // Scalars computed in double as torch does with Python floats, applied in float.
    const auto [beta1, beta2] = config_.betas;
    const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
    const float one_minus_b1 = static_cast<float>(1.0 - beta1);
    const float one_minus_b2 = static_cast<float>(1.0 - beta2);
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t_));
    const float step_size = static_cast<float>(lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(config_.eps);
    const float decayed = static_cast<float>(1.0 - lr * config_.weight_decay);
    for_each_share(spans_, total, [&](const Span& seg, int64_t begin, int64_t end) {
      const int64_t s = seg.state + (begin - seg.offset);
      adamw_range(values + begin, grads + begin, m + s, v + s, end - begin, seg.decay ? decayed : 1.0f, b1,
                  one_minus_b1, b2, one_minus_b2, bc2_sqrt, eps, step_size);
    });
    // The schedule scales both rates by one factor, as torch_lm.py does (base lr * factor).
    if (config_.name == OptimizerKind::Muon) muon_step(values, grads, config_.muon_lr * (lr / config_.lr));
  } else {
    float* buf = state_[0].data();
    const float mu = static_cast<float>(config_.momentum), lr_f = static_cast<float>(lr);
    const float wd_f = static_cast<float>(config_.weight_decay);
    for_each_share(spans_, total, [&](const Span& seg, int64_t begin, int64_t end) {
      sgd_range(values + begin, grads + begin, buf + seg.state + (begin - seg.offset), end - begin,
                seg.decay ? wd_f : 0.0f, mu, lr_f);
    });
  }
  if (config_.ema_decay > 0) update_ema(values);
  weights_changed(values);  // bfloat16 products re-round the weights once, on their next use
}

void Optimizer::update_ema(const float* values) {
  float* __restrict e = ema();
  const float* __restrict w = values;
  const float d = static_cast<float>(config_.ema_decay),
              one_minus_d = static_cast<float>(1.0 - config_.ema_decay);
  const int64_t n = total_size_;
  // Elementwise: the same bits at any thread count.
#pragma omp parallel for simd if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) e[i] = e[i] * d + w[i] * one_minus_d;
}

void Optimizer::muon_step(float* values, const float* grads, double lr) {
  const float mu = static_cast<float>(muon_momentum_at(config_, t_ - 1, total_steps_));
  const float keep = static_cast<float>(1.0 - lr * config_.muon_weight_decay);
  const bool cautious = config_.muon_cautious_weight_decay;
  float* momentum = state_[2].data();
  // One matrix on the calling thread: momentum, Nesterov's look-ahead, NS5 and the update.
  auto update = [&](const Matrix& w, std::vector<float>& ws) {
    const int64_t size = w.rows * w.cols, m = std::min(w.rows, w.cols);
    if (static_cast<int64_t>(ws.size()) < 2 * size + 2 * m * m)
      ws.resize(static_cast<size_t>(2 * size + 2 * m * m));
    float* x = ws.data();
    float* p = values + w.offset;
    const float* g = grads + w.offset;
    float* mom = momentum + w.state;
    double squares = 0.0;
    for (int64_t i = 0; i < size; ++i) {
      const float mi = mom[i] * mu + g[i];  // M = mu M + G
      mom[i] = mi;
      x[i] = g[i] + mu * mi;  // U = G + mu M
      squares += static_cast<double>(x[i]) * x[i];
    }
    const float norm = static_cast<float>(std::sqrt(squares)) + 1e-7f;
    for (int64_t i = 0; i < size; ++i) x[i] /= norm;
    const float* o = newton_schulz5(x, w.rows, w.cols, x + size, x + 2 * size, x + 2 * size + m * m);
    // NS5(U)'s entries have an RMS of about 1 / sqrt(max(out, in)); the factor makes it 1 / sqrt(in) for a
    // tall matrix as for a wide or square one (Jordan et al. 2024).
    const float step =
        static_cast<float>(lr * std::sqrt(std::max(1.0, static_cast<double>(w.rows) / w.cols)));
    if (cautious)
      for (int64_t i = 0; i < size; ++i) p[i] = (o[i] * p[i] >= 0.0f ? p[i] * keep : p[i]) - step * o[i];
    else
      for (int64_t i = 0; i < size; ++i) p[i] = p[i] * keep - step * o[i];
  };
  // NS5's products run in the run's precision (train.precision), like the model's: its result only
  // steers the direction of the update. Measured on the 2-core development machine with other builds
  // running (lower quartile of 100 / 10 interleaved optimizer steps, oneDNN): configs/shakespeare_char.json's
  // step (2.5 GFLOP of NS5) took 24.7 ms with NS5 in fp32 and 14.6 ms in bf16 on one thread (AdamW's
  // step alone: 0.5 ms); configs/shakespeare_char_large.json's (102 GFLOP) 984 ms and 592 ms on two
  // threads (AdamW: 11 ms). The small config trained in bf16 with Muon and wsd for 500 steps reached a
  // validation loss of 1.8847 with NS5 in bf16 against 1.8788 in fp32 (mean of 3 seeds, which alone moved
  // it by up to 0.03), in 0.85x the time. fp32 runs keep fp32 NS5, as the reference computes it
  // (tests/training/test_optim_reference.cpp).
  const int threads = omp_get_max_threads();
  if (static_cast<int>(workspace_.size()) < threads) workspace_.resize(static_cast<size_t>(threads));
  for (const std::vector<Matrix>& group : shapes_) {
    const int64_t k = static_cast<int64_t>(group.size());
    if (threads == 1 || k < threads) {  // few matrices of this shape: the GEMMs use the threads
      for (const Matrix& w : group) update(w, workspace_[0]);
      continue;
    }
    // At least one matrix per thread: each thread takes whole matrices, with one-thread GEMMs (as the
    // data-parallel workers do), instead of a fork/join inside each of the 15 small products.
    std::exception_ptr error;
#pragma omp parallel
    {
      omp_set_num_threads(1);  // this thread's GEMMs (oneDNN, nested regions) run on it alone
      std::vector<float>& ws = workspace_[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (int64_t i = 0; i < k; ++i) {
        try {
          update(group[static_cast<size_t>(i)], ws);
        } catch (...) {
#pragma omp critical(tfm_muon_error)
          if (!error) error = std::current_exception();
        }
      }
    }
    if (error) std::rethrow_exception(error);
  }
}

double grad_norm(const float* grads, int64_t n) {
  // Partial sums over a fixed number of chunks, added in order: the same bits at any thread count
  // (an OpenMP reduction may combine threads in any order).
  constexpr int64_t kChunks = 64;
  double partial[kChunks] = {};
  const int64_t chunk = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t c = 0; c < kChunks; ++c) {
    double s = 0.0;
    const int64_t end = std::min(n, (c + 1) * chunk);
    // Vector lanes summed in a fixed order: the bits depend on the build, not on the threads.
#pragma omp simd reduction(+ : s)
    for (int64_t i = c * chunk; i < end; ++i) s += static_cast<double>(grads[i]) * grads[i];
    partial[c] = s;
  }
  double sum = 0.0;
  for (double s : partial) sum += s;
  return std::sqrt(sum);
}

double clip_grad_norm(float* grads, int64_t n, double max_norm) {
  const double norm = grad_norm(grads, n);
  if (max_norm <= 0 || !std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
#pragma omp parallel for simd if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) grads[i] *= c;
  }
  return norm;
}

}  // namespace tfm
