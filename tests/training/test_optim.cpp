// AdamW and SGD against hand-computed updates, the schedules against torch_lm.py's lr_at, clipping.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tfm/training/optim.h"

using namespace tfm;

namespace {
// torch_lm.py's lr_at, transcribed.
double lr_at(int64_t step, double lr, double min_lr, int64_t warmup, int64_t total,
             const std::string& schedule) {
  if (step < warmup) return lr * (step + 1) / static_cast<double>(warmup);
  if (schedule == "constant" || step >= total) return schedule == "constant" ? lr : min_lr;
  const double ratio = (step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}
}  // namespace

TEST_CASE("optim: AdamW matches torch.optim.AdamW's update, decay on decay segments only", "[optim]") {
  OptimizerConfig c;
  c.beta1 = 0.9, c.beta2 = 0.99, c.eps = 1e-8, c.weight_decay = 0.1;
  Optimizer opt(c, {{0, 1, true}, {1, 1, false}}, 2);
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {0.5f, 0.5f};
  opt.step(p.data(), g.data(), 0.1);
  // t=1: m = 0.05, v = 0.0025, m_hat = 0.5, v_hat = 0.25: p -= 0.1 * 0.5 / (0.5 + 1e-8)
  CHECK(p[0] == Approx(1.0 * (1 - 0.1 * 0.1) - 0.1).epsilon(1e-6));  // 0.89
  CHECK(p[1] == Approx(0.9).epsilon(1e-6));
  // t=2 with g = -0.25, by the formula in double.
  g = {-0.25f, -0.25f};
  const double m = 0.9 * 0.05 + 0.1 * -0.25, v = 0.99 * 0.0025 + 0.01 * 0.0625;
  const double step_size = 0.1 / (1 - 0.9 * 0.9), denom = std::sqrt(v) / std::sqrt(1 - 0.99 * 0.99) + 1e-8;
  const double want0 = 0.89 * (1 - 0.01) - step_size * m / denom, want1 = 0.9 - step_size * m / denom;
  opt.step(p.data(), g.data(), 0.1);
  CHECK(p[0] == Approx(want0).epsilon(1e-6));
  CHECK(p[1] == Approx(want1).epsilon(1e-6));
  CHECK(opt.steps_taken() == 2);
  CHECK(opt.state().size() == 2);
}

TEST_CASE("optim: SGD with momentum and L2 decay as torch.optim.SGD", "[optim]") {
  OptimizerConfig c;
  c.name = "sgd", c.momentum = 0.9, c.weight_decay = 0.0;
  Optimizer opt(c, {{0, 2, true}}, 2);
  std::vector<float> p = {1.0f, -2.0f};
  std::vector<float> g = {1.0f, 2.0f};
  opt.step(p.data(), g.data(), 0.1);  // buf = g
  CHECK(p[0] == Approx(0.9));
  CHECK(p[1] == Approx(-2.2));
  opt.step(p.data(), g.data(), 0.1);  // buf = 0.9 g + g
  CHECK(p[0] == Approx(0.9 - 0.19));
  CHECK(p[1] == Approx(-2.2 - 0.38));
  OptimizerConfig d = c;
  d.weight_decay = 0.5, d.momentum = 0.0;
  Optimizer wd(d, {{0, 1, true}, {1, 1, false}}, 2);
  p = {1.0f, 1.0f}, g = {0.0f, 0.0f};
  wd.step(p.data(), g.data(), 0.1);
  CHECK(p[0] == Approx(1.0 - 0.1 * 0.5));
  CHECK(p[1] == 1.0f);
}

TEST_CASE("optim: schedules follow torch_lm.py's lr_at", "[optim]") {
  for (const std::string name : {"cosine", "constant"}) {
    LrSchedule s;
    s.name = name, s.lr = 1e-3, s.min_lr = 1e-4, s.warmup = 100, s.total = 2000;
    for (int64_t step : {0, 1, 50, 98, 99, 100, 101, 500, 1000, 1999, 2000, 2500})
      CHECK(s.at(step) == Approx(lr_at(step, 1e-3, 1e-4, 100, 2000, name)).epsilon(1e-12));
  }
  LrSchedule s;
  CHECK(s.at(0) == Approx(1e-5));
  CHECK(s.at(100) == Approx(1e-3));
  CHECK(s.at(1050) == Approx(1e-4 + 0.5 * 9e-4));
  CHECK(s.at(5000) == Approx(1e-4));
  // No warmup.
  s.warmup = 0;
  CHECK(s.at(0) == Approx(1e-3));
  // inverse_sqrt: the warmup, then lr * sqrt(warmup / (step + 1)), continuous at the join.
  LrSchedule inv;
  inv.name = "inverse_sqrt", inv.lr = 1e-3, inv.warmup = 100;
  CHECK(inv.at(98) == Approx(0.99e-3));
  CHECK(inv.at(99) == Approx(1e-3));
  CHECK(inv.at(100) == Approx(1e-3 * std::sqrt(100.0 / 101.0)));
  CHECK(inv.at(399) == Approx(0.5e-3));
  CHECK(inv.at(9999) == Approx(1e-4));
}

TEST_CASE("optim: global-norm clipping as clip_grad_norm_", "[optim]") {
  std::vector<float> g = {3.0f, 4.0f};
  CHECK(clip_grad_norm(g.data(), 2, 10.0) == Approx(5.0));
  CHECK(g[0] == 3.0f);  // under the limit: untouched
  CHECK(clip_grad_norm(g.data(), 2, 1.0) == Approx(5.0));
  CHECK(g[0] == Approx(0.6).epsilon(1e-6));
  CHECK(g[1] == Approx(0.8).epsilon(1e-6));
  CHECK(grad_norm(g.data(), 2) == Approx(1.0).epsilon(1e-6));
  g = {3.0f, 4.0f};
  CHECK(clip_grad_norm(g.data(), 2, 0.0) == Approx(5.0));  // 0 = off
  CHECK(g[1] == 4.0f);
  // The norm of a large buffer is accumulated in double and independent of chunking.
  std::vector<float> big(1000003, 0.5f);
  CHECK(grad_norm(big.data(), static_cast<int64_t>(big.size())) ==
        Approx(std::sqrt(1000003.0) * 0.5).epsilon(1e-9));
}
