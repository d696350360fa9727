// `tfm info`: what a config costs before it runs: parameters per component, FLOPs per token, memory.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/data/token_cache.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/platform.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/attention.h"
#include "tfm/objectives/objective.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/optim.h"
#include "tfm/training/preflight.h"

namespace tfm::cli {

const ModelConfig& ConfigModel::config() const {
  if (!objective) return lm->config();
  if (auto* s2s = dynamic_cast<Seq2SeqModel*>(&objective->model())) return s2s->config();
  return dynamic_cast<LanguageModel&>(objective->model()).config();
}

namespace {

// The vocabulary training builds from the data.* keys, when the objective could not be built (a file too
// short for a batch, ...): the file's distinct characters (char), the 256 bytes, or the BPE file's, plus
// masked_lm's [MASK]. Refused, naming data.path, when the file has no text to take them from.
int64_t data_vocabulary_size(const Config& c, ObjectiveKind objective) {
  const std::string path = c.data().path;
  const Tokenizer tokenizer = data_vocabulary(c);
  if (tokenizer.size() == 0)
    throw ConfigError("data.path: " + path +
                      " holds no text, so training would have no vocabulary (--vocab-size N sets one)");
  return tokenizer.size() + objective_capabilities(objective).extra_ids;
}

}  // namespace

ConfigModel build_model(const Config& c, int64_t vocab_override, const std::string& what) {
  const ObjectiveKind objective = c.train().objective;
  const bool seq2seq = objective_capabilities(objective).encoder_decoder();
  const DataConfig data = c.data();
  const auto check = memory_check(c, {what, true, 1});
  ConfigModel m;
  if (vocab_override > 0 && seq2seq)
    throw ConfigError(
        "--vocab-size: not for train.objective \"seq2seq\" (both vocabularies come from data.path)");
  if (vocab_override <= 0) {
    try {
      m.objective = make_objective(c, nullptr, {true, 0, check});
      m.vocab_note = "from " + data.path;
      return m;
    } catch (const IoError& e) {
      if (seq2seq) throw;
      if (!std::filesystem::exists(data.path))
        throw IoError(std::string(e.what()) +
                      " (the vocabulary comes from the data; --vocab-size N sets one)");
      vocab_override = data_vocabulary_size(c, objective);
      m.vocab_note = "from the " + name_of(data.tokenizer) + " tokenizer of " + data.path +
                     " (no batch could be built: " + e.what() + ")";
    }
  } else {
    m.vocab_note = "from --vocab-size";
  }
  const ModelConfig mc = c.model(vocab_override);
  check(mc);
  m.lm = std::make_unique<LanguageModel>(mc, 0);
  return m;
}

namespace {

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

struct InfoOptions {
  std::string config_file;
  std::vector<std::string> sets;
  int64_t vocab_size = 0;
  bool measure = false, json = false;
};

// What tfm info reports of a config, computed once for the text and the JSON forms.
struct InfoFigures {
  ObjectiveKind objective = ObjectiveKind::CausalLm;
  bool seq2seq = false;
  int64_t B = 0, T = 0,
          P = 0;           // T: tokens the loss counts per sequence (a pair's target side at its longest)
  double train_flops = 0;  // per token, forward + backward
  double step_tokens = 0;  // per optimizer step (grad_accum_steps included)
  OptimizerKind optimizer = OptimizerKind::AdamW;
  std::vector<ParamSegment> segments;
  double ns_flops = 0;  // Muon's Newton-Schulz products per optimizer step (not in MFU)
  MemoryEstimate memory;
};

InfoFigures figures_of(const Config& c, const ConfigModel& m) {
  InfoFigures f;
  const ModelConfig& mc = m.config();
  const TrainConfig train = c.train();
  f.objective = train.objective;
  f.seq2seq = objective_capabilities(f.objective).encoder_decoder();
  f.memory = estimate_memory(c, mc, true);  // preflight.h
  f.B = train.batch_size;
  f.T = f.seq2seq ? c.data().max_target_len + 1 : train.seq_len;
  f.P = m.model().parameter_count();
  f.train_flops = m.objective ? m.objective->train_flops_per_token()
                              : LanguageModel::flops_per_token(mc, f.T).train_per_token;
  f.optimizer = train.optimizer.name;
  f.segments = optimizer_segments(m.model());
  f.ns_flops = newton_schulz_flops(f.segments, f.optimizer);
  f.step_tokens = static_cast<double>(f.B * f.T * train.grad_accum_steps);
  return f;
}

// For scripts (scripts/bench.sh): the text form's figures, machine-readable.
void print_json(const std::string& file, const ConfigModel& m, const InfoFigures& f) {
  const ModelConfig& mc = m.config();
  nlohmann::json j = {{"config", file},
                      {"objective", name_of(f.objective)},
                      {"vocab_size", mc.vocab_size},
                      {"parameters", f.P},
                      {"forward_flops_per_token", f.train_flops / 3.0},
                      {"train_flops_per_token", f.train_flops},
                      {"batch_size", f.B},
                      {"seq_len", f.T},
                      {"memory_estimate_bytes", f.memory.total()}};
  j["optimizer"] = name_of(f.optimizer);
  if (f.optimizer == OptimizerKind::Muon) j["newton_schulz_flops_per_step"] = f.ns_flops;
  if (f.seq2seq) j["source_vocab_size"] = mc.source_vocab_size;
  j["head_gating"] = name_of(mc.head_gating), j["head_mixing"] = name_of(mc.head_mixing);
  if (mc.head_gating == HeadGating::TopK)
    j["head_topk"] = mc.head_topk, j["computed_head_share"] = MultiHeadAttention::computed_head_share(mc);
  if (mc.head_mixing == HeadMixing::GroupMlp) j["head_groups"] = mc.head_groups;
  for (const auto& [name, n] : m.model().parameter_breakdown()) j["breakdown"][name] = n;
  fmt::print("{}\n", j.dump());
}

// The model's shape, its recipe and its heads.
void print_model(const Config& c, const std::string& file, const ConfigModel& m, const InfoFigures& f) {
  const ModelConfig& mc = m.config();
  const std::string vocab = f.seq2seq ? std::to_string(mc.source_vocab_size) + " source + " +
                                            std::to_string(mc.vocab_size) + " target"
                                      : std::to_string(mc.vocab_size);
  fmt::print("config {} (output.dir {}), objective {}\n", file, c.string("output.dir"), name_of(f.objective));
  fmt::print("vocabulary: {} symbols, {} tokenizer, {}\n", vocab, name_of(c.data().tokenizer), m.vocab_note);
  const std::string layers = f.seq2seq ? std::to_string(mc.n_encoder_layers) + " encoder + " +
                                             std::to_string(mc.n_decoder_layers) + " decoder layers"
                                       : std::to_string(mc.n_layers) + " layers";
  fmt::print("model: {}, d_model {}, {} heads ({} kv), d_ff {}, context {}\n", layers, mc.d_model, mc.n_heads,
             mc.n_kv_heads, mc.d_ff, mc.max_seq_len);
  const bool rope = mc.positional_encoding == PositionalEncoding::Rope;
  fmt::print(
      "layers: {}-norm {} (eps {:g}), {} attention scores, {} feed-forward, {} positions{}{}, {}, {} head\n",
      name_of(mc.norm_position), name_of(mc.norm), mc.norm_eps,
      mc.attention_score == AttentionScore::Additive ? "additive (Bahdanau)" : "scaled dot-product",
      name_of(mc.activation), name_of(mc.positional_encoding),
      rope ? fmt::format(" (theta {:g})", mc.rope_theta) : "", mc.qk_norm ? ", QK-norm" : "",
      mc.bias ? "biases" : "no biases", mc.tie_embeddings ? "tied" : "untied");
  if (mc.head_gating == HeadGating::TopK)
    fmt::print(
        "heads: top-k gating, {} of {} heads per token (attention scores and sums x {:.3g}), a gate of "
        "{:.0f} weights per attention layer, balance loss {:.6g}\n",
        mc.head_topk, mc.n_heads, MultiHeadAttention::computed_head_share(mc),
        static_cast<double>(mc.n_heads * mc.d_model), mc.head_balance_loss);
  if (mc.head_mixing != HeadMixing::None)
    fmt::print(
        "heads: {} mixing{}\n", name_of(mc.head_mixing),
        mc.head_mixing == HeadMixing::GroupMlp ? " in " + std::to_string(mc.head_groups) + " groups" : "");
  std::string tricks;  // the speedrun tricks that are on (docs/speedrun.md)
  auto add = [&](const std::string& t) { tricks += (tricks.empty() ? "" : ", ") + t; };
  if (mc.zero_init) add("zero-init of wo, fc2 and the head");
  if (mc.logit_softcap > 0.0f) add(fmt::format("logit softcap {:g}", mc.logit_softcap));
  if (mc.x0_skip) add("x0 skip");
  if (mc.value_residual) add("value residual");
  if (mc.bigram_buckets > 0) add(fmt::format("bigram table of {} rows", mc.bigram_buckets));
  if (mc.mtp_heads > 0) {
    const std::string predicted =
        mc.mtp_heads == 1 ? "token t+2" : "tokens t+2..t+" + std::to_string(mc.mtp_heads + 1);
    add(fmt::format("multi-token prediction of {} ({} training-only head{}), loss weight {:g} decaying to 0",
                    predicted, mc.mtp_heads, mc.mtp_heads > 1 ? "s" : "", c.train().mtp_weight));
  }
  if (!tricks.empty()) fmt::print("tricks: {}\n", tricks);
}

// What a training run decides at start-up or changes besides the model: precision ("auto" resolved on
// this machine), the evaluation, the weights' EMA and Muon's optional tricks.
void print_training_options(const TrainConfig& t) {
  const GemmBackend backend = resolve_gemm_backend(t.gemm_backend);
  const ResolvedPrecision p = resolve_precision(t.precision, backend);
  std::string line =
      "training: precision " + name_of(t.precision) +
      (t.precision == PrecisionChoice::Auto ? " -> " + name_of(p.precision) + " (" + p.reason + ")" : "") +
      " on " + name_of(backend) + "; evaluation " +
      (t.eval_steps == 0 ? std::string("the whole validation split (every token once)")
                         : std::to_string(t.eval_steps) + " random batches") +
      " every " + std::to_string(t.eval_interval) + " steps";
  const OptimizerConfig& o = t.optimizer;
  if (o.ema_decay > 0)
    line += fmt::format(
        "; EMA of the weights (decay {:g}: evaluations and best.ckpt, one more copy of the "
        "weights in memory)",
        o.ema_decay);
  if (o.name == OptimizerKind::Muon) {
    if (o.muon_momentum_warmup_steps > 0 || o.muon_momentum_cooldown_steps > 0)
      line += fmt::format("; Muon momentum {:g} -> {:g} over {} steps, back over the last {}",
                          o.muon_momentum_min, o.muon_momentum, o.muon_momentum_warmup_steps,
                          o.muon_momentum_cooldown_steps);
    if (o.muon_cautious_weight_decay)
      line += fmt::format("; cautious Muon weight decay {:g}", o.muon_weight_decay);
  }
  fmt::print("{}\n", line);
}

// Parameters, FLOPs, memory and the optimizer's own work.
void print_costs(const Config& c, const ConfigModel& m, const InfoFigures& f) {
  fmt::print("parameters: {} ({})\n", f.P, human_count(static_cast<double>(f.P)));
  for (const auto& [name, n] : m.model().parameter_breakdown())
    fmt::print("  {:<14} {:12}  {:5.1f}%\n", name, n, 100.0 * n / std::max<int64_t>(f.P, 1));
  if (f.seq2seq) {
    // Seq2SeqObjective::train_flops_per_token: the model's per target token spread over the source and
    // target tokens the data's mean pair holds, the tokens tokens/s counts and MFU multiplies.
    fmt::print(
        "FLOPs per token (source and target, as tokens/s counts them; the data's mean lengths): "
        "forward {}, training {}\n",
        human_count(f.train_flops / 3.0), human_count(f.train_flops));
    fmt::print("memory estimate (batch {} pairs of at most {} + {} tokens): {}\n", f.B,
               c.data().max_source_len + 1, f.T, f.memory.summary());
  } else {
    fmt::print(
        "FLOPs per token (matrix products) at T = {}: forward {}, training {}; per optimizer step ({:.0f} "
        "tokens): {}\n",
        f.T, human_count(f.train_flops / 3.0), human_count(f.train_flops), f.step_tokens,
        human_count(f.train_flops * f.step_tokens));
    fmt::print("memory estimate (batch {} x {}): {}\n", f.B, f.T, f.memory.summary());
  }
  // FLOPs are the matrix products' (those tokens/s and MFU count); additive scores are elementwise.
  const ModelConfig& mc = m.config();
  if (mc.attention_score == AttentionScore::Additive)
    fmt::print(
        "additive scores, v . tanh(q + k): {} elementwise operations per (query, key) pair and head in the "
        "forward (an add, a tanh, a multiply and an add per element of a head), not in these FLOPs, which "
        "count matrix products; a step is slower than the FLOPs say (memory-bound, several passes over "
        "(B, H, T, T, Dk))\n",
        4 * mc.head_dim());
  print_training_options(c.train());
  if (f.optimizer != OptimizerKind::Muon) return;
  int64_t matrices = 0, elements = 0;
  for (const ParamSegment& s : f.segments)
    if (s.rows > 0) ++matrices, elements += s.size;
  // Per step, whatever the batch; a language model's are compared with the model's FLOPs of a step.
  const std::string share =
      f.seq2seq
          ? ""
          : fmt::format("{:.1f}% of the model's training FLOPs per step at {:.0f} tokens; ",
                        100.0 * f.ns_flops / std::max(1.0, f.train_flops * f.step_tokens), f.step_tokens);
  fmt::print(
      "optimizer muon: {} matrices ({} parameters) by Muon, the rest by AdamW; Newton-Schulz {} FLOPs per "
      "optimizer step ({}not counted in MFU)\n",
      matrices, human_count(static_cast<double>(elements)), human_count(f.ns_flops), share);
}

// --measure: one real training step's peak tensor memory (the objective's batch, or random tokens).
void measure_step(const Config& c, const ConfigModel& m, const InfoFigures& f) {
  platform::configure_threads(static_cast<int>(c.train().threads));
  const size_t before = memory::stats().live_bytes;
  memory::reset_peak();
  if (m.objective) {
    m.model().set_training(true);
    const BatchLoss batch = m.objective->train_batch();  // with multi-token prediction's term, as step 0
    const float weight = static_cast<float>(c.train().mtp_weight);
    (batch.auxiliary.defined() ? batch.loss + batch.auxiliary * weight : batch.loss).backward();
  } else {
    std::vector<int32_t> x(f.B * f.T), y(f.B * f.T);
    Rng rng(1);
    const int64_t V = m.config().vocab_size;
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
    LanguageModel::loss(m.lm->forward(x, f.B, f.T), y).backward();
  }
  const size_t peak = memory::stats().peak_live_bytes;
  fmt::print("measured: one training step peaked at {} of tensor memory ({} above the model)\n",
             mib(static_cast<double>(peak)), mib(static_cast<double>(peak - std::min(peak, before))));
}

int info_command(const InfoOptions& o) {
  const Config c = load_config(o.config_file, o.sets);
  for (const std::string& warning : config_warnings(c))
    fmt::print(stderr, "tfm: warning: {}\n", warning.c_str());
  const ConfigModel m = build_model(c, o.vocab_size, "info");
  const InfoFigures f = figures_of(c, m);
  if (o.json) {
    print_json(o.config_file, m, f);
    return kExitOk;
  }
  print_model(c, o.config_file, m, f);
  print_costs(c, m, f);
  if (o.measure) measure_step(c, m, f);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_info_commands(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  auto* info = app.add_subcommand("info", "Parameters per component, FLOPs per token and memory of a config");
  info->add_option("--config", o->config_file, "JSON config")->type_name("FILE")->required();
  info->add_option("--set", o->sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  info->add_option("--vocab-size", o->vocab_size, "Vocabulary size when the data file is not at hand")
      ->check(integer_in(1, kMaxFlagCount));
  info->add_flag("--measure", o->measure,
                 "Also run one training step and report the measured peak tensor memory");
  info->add_flag("--json", o->json, "Print parameters and FLOPs per token as one JSON object");
  info->footer("\nExample:\n  tfm info --config configs/shakespeare_char_large.json --measure\n");
  return {{info, [o] { return info_command(*o); }}};
}

}  // namespace tfm::cli
