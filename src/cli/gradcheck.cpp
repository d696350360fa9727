// tfm gradcheck: a central-difference gradient check of the whole model a config describes, with its
// objective's loss (causal_lm, masked_lm, seq2seq), shrunk to a small width and length unless told
// otherwise (the core is tfm::gradient_check, gradcheck.h).
#include "tfm/analysis/gradcheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/data/pairs.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/models/model.h"
#include "tfm/nn/model_config.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/preflight.h"

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
  int threads = 1;
};

// The same model, small, as --set overrides: at most 4 heads of width 4 (C <= 16), d_ff = 2 C, at
// most 2 layers per stack, B = 2 sequences of T = 5 tokens (seq2seq: pairs of up to 4 + 4 tokens,
// lengths drawn, so padding is exercised). Grouped-query and multi-query stay so (Hkv = H / 2, 1).
std::vector<std::string> shrink_sets(const Config& c) {
  const ModelConfig m = resolved(c.model(0));
  const int64_t H = m.n_heads, Hkv = m.n_kv_heads;
  const int64_t h = std::min<int64_t>(H, 4);
  const auto set = [](const std::string& key, int64_t v) { return key + "=" + std::to_string(v); };
  std::vector<std::string> sets = {set("model.n_heads", h),
                                   set("model.n_kv_heads", Hkv == H   ? h
                                                           : Hkv == 1 ? 1
                                                                      : std::max<int64_t>(1, h / 2)),
                                   set("model.d_model", 4 * h),
                                   set("model.d_ff", 8 * h),
                                   set("model.max_seq_len", 6),
                                   set("train.batch_size", 2)};
  if (objective_capabilities(c.train().objective).encoder_decoder()) {
    sets.push_back(set("model.n_encoder_layers", std::min<int64_t>(m.n_encoder_layers, 2)));
    sets.push_back(set("model.n_decoder_layers", std::min<int64_t>(m.n_decoder_layers, 2)));
    sets.push_back(set("data.max_source_len", 4));
    sets.push_back(set("data.max_target_len", 4));
  } else {
    sets.push_back(set("model.n_layers", std::min<int64_t>(m.n_layers, 2)));
    sets.push_back(set("train.seq_len", 5));
  }
  return sets;
}

// Vocabularies of `V` made-up words (no data file is read): the objective adds its own tokens
// ([MASK]; seq2seq's <pad> <bos> <eos> <unk>).
Checkpoint synthetic_vocabularies(const Config& c, int64_t V) {
  std::vector<std::string> words(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) words[i] = "w" + std::to_string(i);
  Checkpoint k;
  k.tokenizer = Tokenizer(words);
  if (objective_capabilities(c.train().objective).encoder_decoder()) {
    k.tokenizer = k.tokenizer.with_specials(seq2seq_specials());
    k.target_tokenizer = k.tokenizer;
  }
  return k;
}

int run_gradcheck(const GradcheckOptions& o) {
  Config c = load_config(o.config, o.sets);
  if (!o.no_shrink) {
    std::vector<std::string> sets = o.sets;
    for (const std::string& s : shrink_sets(c)) sets.push_back(s);
    c = load_config(o.config, sets);
  }
  platform::configure_threads(o.threads);
  const TrainConfig train = c.train();
  const ModelConfig m = resolved(c.model(0));
  const bool seq2seq = objective_capabilities(train.objective).encoder_decoder();
  const Checkpoint vocab = synthetic_vocabularies(c, o.vocab_size);
  const std::unique_ptr<Objective> objective =
      make_objective(c, &vocab, {false, 0, memory_check(c, {"gradcheck", true, 1})});
  Model& model = objective->model();
  model.set_training(false);  // eval mode: dropout off, so every forward is the same function
  const std::vector<float> initial = model.flat_values().to_vector();
  GradCheckOptions g;
  g.eps = o.eps;
  g.directions = o.directions;
  g.tolerance = o.tolerance;
  // Forwards of a float32 model differ by a few ulps of L; a loss over a handful of positions
  // (masked_lm's chosen ones in a 2 x 5 batch) differs by more than the library's default allows for
  // (differences below ~3 ulps of L per eps are judged against that floor, not against themselves).
  g.noise = 300;
  // The check at point `attempt`: the initial weights (std 0.02) leave attention nearly uniform and
  // GELU nearly linear, so they are perturbed to std ~1.2 / sqrt(C) to exercise every nonlinearity;
  // the objective draws a batch of random tokens and gives its training loss.
  const auto check_at = [&](int attempt) {
    Rng rng(static_cast<uint64_t>(o.seed) * 7919 + static_cast<uint64_t>(attempt) + 1);
    Tensor values = model.flat_values();
    const float std = 1.2f / std::sqrt(static_cast<float>(m.d_model));
    for (int64_t i = 0; i < values.numel(); ++i) values.data()[i] = initial[i] + std * rng.normal();
    const std::function<Tensor()> batch_loss = objective->random_batch_loss(rng);
    const std::function<Tensor()> loss = [&model, batch_loss] {
      return model.with_auxiliary_loss(batch_loss());
    };
    g.seed = rng.next_u64();
    return gradient_check(loss, values, model.flat_grads(), model.parameters(), g);
  };
  // A ReLU unit sitting on its kink at the checked point makes every direction's central difference
  // the mean of two slopes. gradient_check sees such kinks in L's values, but a small one (a unit
  // feeding a post-norm LayerNorm, say) hides in float32 rounding. So a failed check is repeated at a
  // new point when kinks were seen or the model has ReLUs; a wrong backward formula fails at every
  // point (the test with a broken op checks that), a kink at one.
  constexpr int kPoints = 4;
  const bool relu = m.activation == Activation::Relu;
  GradCheckReport r = check_at(0);
  for (int attempt = 1; attempt < kPoints && !r.passed && (r.kinks > 0 || relu); ++attempt) {
    fmt::print("point {}: worst error {:.2e} ({}), {} kinks seen{}; checking at a new point\n", attempt,
               r.worst_relative_error, r.worst_parameter.c_str(), r.kinks,
               relu ? " (ReLU: small kinks can hide in rounding)" : "");
    r = check_at(attempt);
  }

  const std::string layers = seq2seq ? std::to_string(m.n_encoder_layers) + " encoder + " +
                                           std::to_string(m.n_decoder_layers) + " decoder layers"
                                     : std::to_string(m.n_layers) + " layers";
  const DataConfig d = c.data();
  const std::string batch =
      seq2seq ? std::to_string(train.batch_size) + " pairs of up to " + std::to_string(d.max_source_len) +
                    " + " + std::to_string(d.max_target_len) + " tokens"
              : std::to_string(train.batch_size) + " x " + std::to_string(train.seq_len);
  fmt::print("gradcheck {} ({}): {}, d_model {}, {} heads ({} kv), d_ff {}, vocabulary {}, batch {}{}\n",
             o.config.c_str(), objective->name().c_str(), layers.c_str(), m.d_model, m.n_heads, m.n_kv_heads,
             m.d_ff, objective->tokenizer().size(), batch.c_str(),
             o.no_shrink ? "" : " (shrunk; --no-shrink keeps the config's sizes)");
  // The measure, said once with its floor: relative where a derivative is above the floor, the
  // difference over the floor where both are below it (float32 rounding of L would swamp them there).
  fmt::print(
      "error = |analytic - numeric| / max(|analytic|, |numeric|, floor), floor {:.2e} ({:g} float32 ulp of "
      "the loss {:.4g}, / eps: what rounding in the forward passes can move a difference by); below the "
      "floor a derivative is judged by its difference, not relative to itself\n",
      r.floor, g.noise, r.loss);
  for (const ParameterGradCheck& p : r.parameters) {
    const bool below = std::max(std::fabs(p.analytic), std::fabs(p.numeric)) < r.floor;
    fmt::print(
        "  {:<32} {:<12} worst error {:.2e} (analytic {:+.6e}, numeric {:+.6e}{}){}\n", p.name.c_str(),
        shape_str(p.shape).c_str(), p.worst_relative_error, p.analytic, p.numeric,
        below ? fmt::format(": both below the floor, difference {:.1e}", std::fabs(p.analytic - p.numeric))
              : std::string(),
        p.worst_relative_error <= o.tolerance ? "" : "  <-- above tolerance");
  }
  fmt::print(
      "{}: worst error {:.2e} ({}) over {} tensors, {} directions each, eps {:.6g}, floor {:.2e} ({} drawn "
      "again: the step crossed a kink), tolerance {:.6g}; {} forward passes\n",
      r.passed ? "ok" : "FAILED", r.worst_relative_error, r.worst_parameter.c_str(), r.parameters.size(),
      o.directions, o.eps, r.floor, r.kinks, o.tolerance, r.forward_passes);
  return r.passed ? kExitOk : kExitCheckFailed;
}

}  // namespace

std::vector<Command> add_gradcheck_commands(CLI::App& app) {
  auto o = std::make_shared<GradcheckOptions>();
  auto* gc =
      app.add_subcommand("gradcheck", "Central-difference gradient check of the whole model of a config");
  gc->add_option("--config", o->config, "JSON config")->type_name("FILE")->required();
  gc->add_option("--set", o->sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  gc->add_flag("--no-shrink", o->no_shrink,
               "Check the config's own sizes (default: C <= 16, 2 layers, 2 x 5 tokens)");
  gc->add_option("--vocab-size", o->vocab_size, "Vocabulary of the random tokens")
      ->capture_default_str()
      ->check(integer_in(2, 1000000));
  gc->add_option("--tolerance", o->tolerance,
                 "Largest error that passes: |analytic - numeric| / max(|analytic|, |numeric|, floor)")
      ->capture_default_str()
      ->check(number_in(1e-8, 1));
  gc->add_option("--eps", o->eps, "Central-difference step along each unit direction")
      ->capture_default_str()
      ->check(number_in(1e-6, 1));
  gc->add_option("--directions", o->directions, "Random directions per parameter tensor")
      ->capture_default_str()
      ->check(integer_in(1, 1000));
  gc->add_option("--threads", o->threads,
                 "Threads (0 = all cores): the multithreaded kernels are checked too")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
  gc->add_option("--seed", o->seed, "Seed of the weights, tokens and directions")
      ->capture_default_str()
      ->check(integer_in(0, 1000000000));
  gc->footer(
      "\nPrints each parameter tensor's worst error, |analytic - numeric| / max(|analytic|, |numeric|,\n"
      "floor): relative to the larger derivative, or to the floor when both are below it. The floor,\n"
      "printed, is what float32 rounding of the loss can move a central difference by (300 ulp of the\n"
      "loss / --eps); a derivative below it cannot be checked relative to itself. Exits 1 when an error\n"
      "is above --tolerance.\n"
      "Dropout is off (eval mode); weights are perturbed from their initialisation so every\n"
      "nonlinearity is exercised.\nExamples:\n"
      "  tfm gradcheck --config configs/shakespeare_char.json\n"
      "  tfm gradcheck --config configs/tiny.json --set model.n_kv_heads=1 --set "
      "model.attention_score=additive\n");
  return {{gc, [o] { return run_gradcheck(*o); }}};
}

}  // namespace tfm::cli
