// `tfm info`: what a config costs before it runs: parameters per component, FLOPs per token, memory.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/platform.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/nn/attention.h"
#include "tfm/models/language_model.h"
#include "tfm/objectives/objective.h"
#include "tfm/training/optim.h"
#include "tfm/training/preflight.h"

namespace tfm::cli {
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

int info_command(const InfoOptions& o) {
  const std::string& file = o.config_file;
  const std::vector<std::string>& sets = o.sets;
  int64_t vocab_override = o.vocab_size;
  const bool measure = o.measure, as_json = o.json;
  const Config c = load_config(file, sets);
  const std::string objective_name = c.string("train.objective");
  const bool seq2seq = objective_name == "seq2seq";
  // The objective builds the model from its data's vocabularies (memory-checked before it allocates).
  // A language model whose data file is missing, or with --vocab-size, gets an assumed vocabulary.
  const auto check = memory_check(c, {"info", true, 1});
  std::unique_ptr<Objective> objective;
  std::unique_ptr<LanguageModel> lm;
  std::string vocab_note;
  if (vocab_override > 0 && seq2seq)
    throw ConfigError("--vocab-size: not for train.objective \"seq2seq\" (both vocabularies come from data.path)");
  if (vocab_override <= 0) {
    try {
      objective = make_objective(c, nullptr, {true, 0, check});
      vocab_note = "from " + c.string("data.path");
    } catch (const IoError& e) {
      if (seq2seq) throw;
      vocab_override = (c.string("data.tokenizer") == "byte" ? 256 : 65) + (objective_name == "masked_lm" ? 1 : 0);
      vocab_note = std::string("assumed (") + e.what() + "; --vocab-size N sets it)";
    }
  } else {
    vocab_note = "from --vocab-size";
  }
  if (!objective) {
    const ModelConfig mc = c.model(vocab_override);
    check(mc);
    lm = std::make_unique<LanguageModel>(mc, 0);
  }
  Model& model = objective ? objective->model() : *lm;
  const ModelConfig& mc = objective ? (seq2seq ? dynamic_cast<Seq2SeqModel&>(model).config()
                                               : dynamic_cast<LanguageModel&>(model).config())
                                    : lm->config();
  const MemoryEstimate memory = estimate_memory(c, mc, true);  // preflight.h
  const int64_t B = c.integer("train.batch_size");
  // Tokens the loss counts per sequence: the window, or a pair's target side at its longest.
  const int64_t T = seq2seq ? c.integer("data.max_target_len") + 1 : c.integer("train.seq_len");
  const int64_t P = model.parameter_count();
  const double train_flops = objective ? objective->train_flops_per_token()
                                       : LanguageModel::flops_per_token(mc, T).train_per_token;
  // Muon's Newton-Schulz products per optimizer step: the optimizer's work, apart from the model's FLOPs
  // (which alone make MFU).
  const std::string optimizer = c.string("train.optimizer.name");
  const std::vector<ParamSegment> segments = optimizer_segments(model);
  const double ns_flops = newton_schulz_flops(segments, optimizer);
  const double step_tokens = static_cast<double>(B * T * c.integer("train.grad_accum_steps"));
  const std::string vocab = seq2seq ? std::to_string(mc.source_vocab_size) + " source + " +
                                          std::to_string(mc.vocab_size) + " target"
                                    : std::to_string(mc.vocab_size);
  if (as_json) {  // for scripts (scripts/bench.sh): the figures below, machine-readable
    nlohmann::json j = {{"config", file}, {"objective", objective_name}, {"vocab_size", mc.vocab_size},
                        {"parameters", P}, {"forward_flops_per_token", train_flops / 3.0},
                        {"train_flops_per_token", train_flops}, {"batch_size", B}, {"seq_len", T},
                        {"memory_estimate_bytes", memory.total()}};
    j["optimizer"] = optimizer;
    if (optimizer == "muon") j["newton_schulz_flops_per_step"] = ns_flops;
    if (seq2seq) j["source_vocab_size"] = mc.source_vocab_size;
    j["head_gating"] = name_of(mc.head_gating), j["head_mixing"] = name_of(mc.head_mixing);
    if (mc.head_gating == HeadGating::TopK)
      j["head_topk"] = mc.head_topk, j["computed_head_share"] = MultiHeadAttention::computed_head_share(mc);
    if (mc.head_mixing == HeadMixing::GroupMlp) j["head_groups"] = mc.head_groups;
    for (const auto& [name, n] : model.parameter_breakdown()) j["breakdown"][name] = n;
    fmt::print("{}\n", j.dump().c_str());
    return kExitOk;
  }
  fmt::print("config {} (output.dir {}), objective {}\n", file.c_str(), c.string("output.dir").c_str(),
              objective_name.c_str());
  fmt::print("vocabulary: {} symbols, {} tokenizer, {}\n", vocab.c_str(), c.string("data.tokenizer").c_str(),
              vocab_note.c_str());
  const std::string layers = seq2seq ? std::to_string(mc.n_encoder_layers) + " encoder + " +
                                           std::to_string(mc.n_decoder_layers) + " decoder layers"
                                     : std::to_string(mc.n_layers) + " layers";
  fmt::print("model: {}, d_model {}, {} heads ({} kv), d_ff {}, context {}\n", layers.c_str(),
              mc.d_model, mc.n_heads, mc.n_kv_heads,
              mc.d_ff, mc.max_seq_len);
  const bool rope = mc.positional_encoding == PositionalEncoding::Rope;
  fmt::print("layers: {}-norm {} (eps {:g}), {} feed-forward, {} positions{}{}, {}, {} head\n",
             name_of(mc.norm_position), name_of(mc.norm), mc.norm_eps, name_of(mc.activation),
             name_of(mc.positional_encoding), rope ? fmt::format(" (theta {:g})", mc.rope_theta) : "",
             mc.qk_norm ? ", QK-norm" : "", mc.bias ? "biases" : "no biases", mc.tie_embeddings ? "tied" : "untied");
  if (mc.head_gating == HeadGating::TopK)
    fmt::print("heads: top-k gating, {} of {} heads per token (attention scores and sums x {:.3g}), a gate of "
                "{:.0f} weights per attention layer, balance loss {:.6g}\n",
                mc.head_topk, mc.n_heads, MultiHeadAttention::computed_head_share(mc),
                static_cast<double>(mc.n_heads * mc.d_model), mc.head_balance_loss);
  if (mc.head_mixing != HeadMixing::None)
    fmt::print("heads: {} mixing{}\n", name_of(mc.head_mixing).c_str(),
                mc.head_mixing == HeadMixing::GroupMlp ? (" in " + std::to_string(mc.head_groups) + " groups").c_str() : "");
  fmt::print("parameters: {} ({})\n", P, human_count(static_cast<double>(P)).c_str());
  for (const auto& [name, n] : model.parameter_breakdown())
    fmt::print("  {:<14} {:12}  {:5.1f}%\n", name.c_str(), n,
                100.0 * n / std::max<int64_t>(P, 1));
  if (seq2seq) {
    fmt::print("FLOPs per target token (the data's mean lengths): forward {}, training {}\n",
                human_count(train_flops / 3.0).c_str(), human_count(train_flops).c_str());
    fmt::print("memory estimate (batch {} pairs of at most {} + {} tokens): {}\n", B,
                c.integer("data.max_source_len") + 1, T,
                memory.summary().c_str());
  } else {
    const double tokens = static_cast<double>(B * T * c.integer("train.grad_accum_steps"));
    fmt::print("FLOPs per token at T = {}: forward {}, training {}; per optimizer step ({:.0f} tokens): {}\n",
                T, human_count(train_flops / 3.0).c_str(), human_count(train_flops).c_str(),
                tokens, human_count(train_flops * tokens).c_str());
    fmt::print("memory estimate (batch {} x {}): {}\n", B, T,
                memory.summary().c_str());
  }
  if (optimizer == "muon") {
    int64_t matrices = 0, elements = 0;
    for (const ParamSegment& s : segments)
      if (s.rows > 0) ++matrices, elements += s.size;
    // Per step, whatever the batch; a language model's are compared with the model's FLOPs of a step.
    const std::string share =
        seq2seq ? ""
                : fmt::format("{:.1f}% of the model's training FLOPs per step at {:.0f} tokens; ",
                              100.0 * ns_flops / std::max(1.0, train_flops * step_tokens), step_tokens);
    fmt::print(
        "optimizer muon: {} matrices ({} parameters) by Muon, the rest by AdamW; Newton-Schulz {} FLOPs per "
        "optimizer step ({}not counted in MFU)\n",
        matrices, human_count(static_cast<double>(elements)), human_count(ns_flops), share);
  }
  if (measure) {
    platform::configure_threads(static_cast<int>(c.integer("train.threads")));
    const size_t before = memory::stats().live_bytes;
    memory::reset_peak();
    if (objective) {  // one real training batch of the objective
      model.set_training(true);
      objective->train_batch().loss.backward();
    } else {
      std::vector<int32_t> x(B * T), y(B * T);
      Rng rng(1);
      const int64_t V = mc.vocab_size;
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
      LanguageModel::loss(lm->forward(x, B, T), y).backward();
    }
    const size_t peak = memory::stats().peak_live_bytes;
    fmt::print("measured: one training step peaked at {} of tensor memory ({} above the model)\n",
                mib(static_cast<double>(peak)).c_str(),
                mib(static_cast<double>(peak - std::min(peak, before))).c_str());
  }
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
  info->add_flag("--measure", o->measure, "Also run one training step and report the measured peak tensor memory");
  info->add_flag("--json", o->json, "Print parameters and FLOPs per token as one JSON object");
  info->footer("\nExample:\n  tfm info --config configs/shakespeare_char_large.json --measure\n");
  return {{info, [o] { return info_command(*o); }}};
}

}  // namespace tfm::cli
