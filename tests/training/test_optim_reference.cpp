// Muon (with AdamW on the other parameters), the WSD schedule and gradient clipping against PyTorch:
// tests/fixtures/lm_muon_wsd.json holds scripts/torch_lm.py's own training loop for 10 steps on given
// batches from given weights (scripts/dev/make_fixtures.py, optimizer_fixture). tfm runs the same steps with
// its own parts, as its trainer does: the model's loss on the batch, backward, clip_grad_norm, the
// config's schedule and optimizer; every parameter must then equal PyTorch's. Both run NS5 in float32;
// what differs is the summation order of the products, amplified a little by the steps (see the tolerance
// below). tests/fixtures/lm_muon_tricks.json does the same with the options that are off by default on
// (Muon's momentum warmup and cooldown, cautious weight decay, train.ema_decay, whose EMA is compared too).
// Set TFM_REPORT_DIFFS=1 to print the differences.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fixture_compare.h"
#include "tfm/config/config.h"
#include "tfm/models/language_model.h"
#include "tfm/training/optim.h"
#include "tfm/training/trainer.h"

using namespace tfm;
using namespace tfm::testing;

namespace {

std::vector<int32_t> flat_ids(const json& rows) {
  std::vector<int32_t> ids;
  for (const json& row : rows)
    for (const json& id : row) ids.push_back(id.get<int32_t>());
  return ids;
}

// Runs the fixture's steps with tfm's parts; every parameter (and with train.ema_decay the EMA) must
// then equal PyTorch's.
void run_optimizer_reference(const std::string& fixture, double tolerance = 2e-5) {
  const json fx = load_fixture(fixture);
  const Config c = resolve_config(fx.at("config"));
  LanguageModel model(c.model(fx.at("vocab_size").get<int64_t>()), 1);
  load_parameters(model, fx.at("init"));
  model.set_training(true);
  const OptimizerConfig oc = c.train().optimizer;
  const LrSchedule schedule = lr_schedule(c.train());
  REQUIRE(oc.name == OptimizerKind::Muon);
  REQUIRE(schedule.name == ScheduleKind::Wsd);
  const std::vector<ParamSegment> segments = optimizer_segments(model);
  Optimizer optimizer(oc, segments, model.parameter_count(), c.integer("train.max_steps"));
  int64_t matrices = 0;
  for (const ParamSegment& s : segments) matrices += s.rows > 0;
  CHECK(matrices == 2 * 6);  // per block wq, wk, wv, wo, fc1, fc2
  const int64_t steps = static_cast<int64_t>(fx.at("x").size()), P = model.parameter_count();
  REQUIRE(steps == c.integer("train.max_steps"));
  for (int64_t step = 0; step < steps; ++step) {
    INFO("step " << step + 1);
    const json& x = fx.at("x")[static_cast<size_t>(step)];
    const int64_t B = static_cast<int64_t>(x.size()), T = static_cast<int64_t>(x[0].size());
    model.flat_grads().fill_(0.0f);
    const Tensor loss = LanguageModel::loss(model.forward(flat_ids(x), B, T),
                                            flat_ids(fx.at("y")[static_cast<size_t>(step)]));
    CHECK(loss.item() == Approx(fx.at("loss")[static_cast<size_t>(step)].get<double>()).margin(1e-5));
    loss.backward();
    const double norm = clip_grad_norm(model.flat_grads().data(), P, c.number("train.grad_clip"));
    CHECK(norm > c.number("train.grad_clip"));  // the clip is active at every step
    const double lr = schedule.at(step);
    CHECK(lr == Approx(fx.at("lr")[static_cast<size_t>(step)].get<double>()).epsilon(1e-12));
    optimizer.step(model.flat_values().data(), model.flat_grads().data(), lr);
  }
  // Tolerance: the parameters move by up to ~0.2 over the 10 steps (Muon's step is lr_m * sqrt(out/in) * O,
  // O's entries ~1/sqrt(max(out, in))); float32 roundoff in a different summation order (the GEMMs, the
  // norms, PyTorch's vectorised reductions) leaves differences of a few 1e-7, which NS5 amplifies where
  // U has small singular values (their gain is up to ~3.4^5 over five steps).
  double worst = 0.0;
  for (const NamedParameter& p : model.parameters()) {
    const double diff = max_diff(p.value, fx.at("final").at(p.name));
    report("after 10 steps: " + p.name, diff);
    worst = std::max(worst, diff);
    INFO(p.name);
    CHECK(diff < tolerance);
  }
  report("after 10 steps: every parameter", worst);
  REQUIRE((optimizer.ema() != nullptr) == fx.contains("ema"));
  if (!fx.contains("ema")) return;
  // The EMA, read through the model's parameters: copy it in.
  std::copy(optimizer.ema(), optimizer.ema() + P, model.flat_values().data());
  for (const NamedParameter& p : model.parameters()) {
    INFO("EMA of " << p.name);
    CHECK(max_diff(p.value, fx.at("ema").at(p.name)) < tolerance);
  }
}

}  // namespace

TEST_CASE("optim reference: Muon + AdamW, WSD and clipping equal torch_lm.py's parameters after 10 steps",
          "[optim][muon][wsd][reference]") {
  run_optimizer_reference("lm_muon_wsd");
}

TEST_CASE(
    "optim reference: Muon's momentum warmup and cooldown, cautious weight decay and the weights' EMA "
    "equal torch_lm.py's after 10 steps",
    "[optim][muon][reference]") {
  // 1e-4: the sanitizer build's library (-O1, batched) sums in another order and reached 5.4e-5 here (2e-5
  // in Release); each trick alone moves the weights by 1e-3 to 9e-3, so the check still holds every one.
  run_optimizer_reference("lm_muon_tricks", 1e-4);
}

TEST_CASE("optim: Muon's momentum schedule", "[optim][muon]") {
  OptimizerConfig oc;
  oc.muon_momentum = 0.95;
  CHECK(muon_momentum_at(oc, 0, 100) == 0.95);  // off: exactly muon_momentum
  oc.muon_momentum_warmup_steps = 10;
  oc.muon_momentum_min = 0.85;
  CHECK(muon_momentum_at(oc, 0, 100) == Approx(0.85));
  CHECK(muon_momentum_at(oc, 5, 100) == Approx(0.90));
  CHECK(muon_momentum_at(oc, 10, 100) == Approx(0.95));
  CHECK(muon_momentum_at(oc, 95, 100) == Approx(0.95));
  oc.muon_momentum_cooldown_steps = 4;  // the last 4 of 100 steps: 96..99
  CHECK(muon_momentum_at(oc, 95, 100) == Approx(0.95));
  CHECK(muon_momentum_at(oc, 96, 100) == Approx(0.95 - 0.1 / 4));
  CHECK(muon_momentum_at(oc, 99, 100) == Approx(0.85));
}
