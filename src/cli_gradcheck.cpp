// tfm gradcheck: a central-difference gradient check of the whole model a config describes, shrunk to
// a small width and length unless told otherwise (the core is tfm::gradient_check, gradcheck.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/config.h"
#include "tfm/error.h"
#include "tfm/gradcheck.h"
#include "tfm/model.h"
#include "tfm/platform.h"
#include "tfm/preflight.h"

namespace tfm::cli {
namespace {

struct GradcheckOptions {
  std::string config;
  std::vector<std::string> sets;
  bool no_shrink = false;
  int64_t vocab_size = 11;
  double tolerance = 1e-2;
  double eps = 1e-3;
  int directions = 4;
  int64_t seed = 1;
};

// The same model, small: at most 4 heads of width 4 (C <= 16), d_ff = 2 C, at most 2 layers,
// B = 2 sequences of T = 5 tokens. Grouped-query and multi-query stay so (Hkv = H / 2, 1).
Config shrunk(const Config& c) {
  nlohmann::json tree = c.tree;
  nlohmann::json& m = tree["model"];
  const int64_t H = c.integer("model.n_heads"), Hkv = c.integer("model.n_kv_heads");
  const int64_t h = std::min<int64_t>(H, 4);
  m["n_heads"] = h;
  m["n_kv_heads"] = Hkv == H ? h : Hkv == 1 ? 1 : std::max<int64_t>(1, h / 2);
  m["d_model"] = 4 * h;
  m["d_ff"] = 8 * h;
  m["n_layers"] = std::min<int64_t>(c.integer("model.n_layers"), 2);
  m["max_seq_len"] = 6;
  tree["train"]["seq_len"] = 5;
  tree["train"]["batch_size"] = 2;
  return resolve_config(tree);
}

int run_gradcheck(const GradcheckOptions& o) {
  Config c = load_config(o.config, o.sets);
  if (!o.no_shrink) c = shrunk(c);
  platform::configure_threads(1);
  const ModelConfig mc = c.model(o.vocab_size);
  const int64_t B = c.integer("train.batch_size"), T = c.integer("train.seq_len");
  check_memory(estimate_training_memory(c, o.vocab_size), c, "gradcheck");
  LanguageModel model(mc, static_cast<uint64_t>(o.seed));
  model.set_training(false);  // eval mode: dropout off, so every forward is the same function
  const std::vector<float> initial = model.flat_values().to_vector();
  std::vector<int32_t> x(B * T), y(B * T);
  const auto loss = [&] { return LanguageModel::loss(model.forward(x, B, T), y); };  // today's objective
  GradCheckOptions g;
  g.eps = o.eps;
  g.directions = o.directions;
  g.tolerance = o.tolerance;
  // The check at point `attempt`: the initial weights (std 0.02) leave attention nearly uniform and
  // GELU nearly linear, so they are perturbed to std ~1.2 / sqrt(C) to exercise every nonlinearity.
  const auto check_at = [&](int attempt) {
    Rng rng(static_cast<uint64_t>(o.seed) * 7919 + static_cast<uint64_t>(attempt) + 1);
    Tensor values = model.flat_values();
    const float std = 1.2f / std::sqrt(static_cast<float>(mc.d_model));
    for (int64_t i = 0; i < values.numel(); ++i) values.data()[i] = initial[i] + std * rng.normal();
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(o.vocab_size)), y[i] = static_cast<int32_t>(rng.below(o.vocab_size));
    g.seed = rng.next_u64();
    return gradient_check(loss, values, model.flat_grads(), model.parameters(), g);
  };
  // A ReLU unit sitting on its kink at the checked point makes every direction's central difference
  // the mean of two slopes. gradient_check sees such kinks in L's values alone; only then is a failed
  // check repeated at a new point (a wrong backward formula fails at every point).
  constexpr int kPoints = 4;
  GradCheckReport r = check_at(0);
  for (int attempt = 1; attempt < kPoints && !r.passed && r.kinks > 0; ++attempt) {
    std::printf("point %d: worst relative error %.2e (%s) with %ld kinks crossed; checking at a new point\n",
                attempt, r.worst_relative_error, r.worst_parameter.c_str(), static_cast<long>(r.kinks));
    r = check_at(attempt);
  }

  std::printf("gradcheck %s: %ld layers, d_model %ld, %ld heads (%ld kv), d_ff %ld, vocabulary %ld, batch %ld x %ld%s\n",
              o.config.c_str(), static_cast<long>(mc.n_layers), static_cast<long>(mc.d_model),
              static_cast<long>(mc.n_heads), static_cast<long>(mc.n_kv_heads), static_cast<long>(mc.d_ff),
              static_cast<long>(mc.vocab_size), static_cast<long>(B), static_cast<long>(T),
              o.no_shrink ? "" : " (shrunk; --no-shrink keeps the config's sizes)");
  for (const ParameterGradCheck& p : r.parameters)
    std::printf("  %-28s %-12s worst relative error %.2e (analytic %+.6e, numeric %+.6e)%s\n", p.name.c_str(),
                shape_str(p.shape).c_str(), p.worst_relative_error, p.analytic, p.numeric,
                p.worst_relative_error <= o.tolerance ? "" : "  <-- above tolerance");
  std::printf(
      "%s: worst relative error %.2e (%s) over %zu tensors, %d directions each, eps %g (%ld drawn again: "
      "the step crossed a kink), tolerance %g; %ld forward passes\n",
      r.passed ? "ok" : "FAILED", r.worst_relative_error, r.worst_parameter.c_str(), r.parameters.size(), o.directions,
      o.eps, static_cast<long>(r.kinks), o.tolerance, static_cast<long>(r.forward_passes));
  return r.passed ? kExitOk : kExitInternal;
}

}  // namespace

std::vector<Command> add_gradcheck_commands(CLI::App& app) {
  auto o = std::make_shared<GradcheckOptions>();
  auto* gc = app.add_subcommand("gradcheck", "Central-difference gradient check of the whole model of a config");
  gc->add_option("--config", o->config, "JSON config")->type_name("FILE")->required();
  gc->add_option("--set", o->sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  gc->add_flag("--no-shrink", o->no_shrink, "Check the config's own sizes (default: C <= 16, 2 layers, 2 x 5 tokens)");
  gc->add_option("--vocab-size", o->vocab_size, "Vocabulary of the random tokens")
      ->capture_default_str()
      ->check(integer_in(2, 1000000));
  gc->add_option("--tolerance", o->tolerance, "Largest relative error that passes")
      ->capture_default_str()
      ->check(number_in(1e-8, 1));
  gc->add_option("--eps", o->eps, "Central-difference step along each unit direction")
      ->capture_default_str()
      ->check(number_in(1e-6, 1));
  gc->add_option("--directions", o->directions, "Random directions per parameter tensor")
      ->capture_default_str()
      ->check(integer_in(1, 1000));
  gc->add_option("--seed", o->seed, "Seed of the weights, tokens and directions")
      ->capture_default_str()
      ->check(integer_in(0, 1000000000));
  gc->footer(
      "\nPrints each parameter tensor's worst relative error; exits 1 when one is above --tolerance.\n"
      "Dropout is off (eval mode); weights are perturbed from their initialisation so every\n"
      "nonlinearity is exercised.\nExamples:\n"
      "  tfm gradcheck --config configs/shakespeare_char.json\n"
      "  tfm gradcheck --config configs/tiny.json --set model.n_kv_heads=1 --set model.attention_score=additive\n");
  return {{gc, [o] { return run_gradcheck(*o); }}};
}

}  // namespace tfm::cli
