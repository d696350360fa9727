// The tfm command line: train, eval, sample, info, config. Library code throws typed errors; this is
// the one place that turns them into exit statuses (see kExitHelp).

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/training/checkpoint.h"
#include "tfm/config/config.h"
#include "tfm/data/tokenizer.h"
#include "tfm/training/distributed.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/memory.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/model.h"
#include "tfm/objectives/objective.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/platform.h"
#include "tfm/training/preflight.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/sampling.h"
#include "tfm/training/trainer.h"

namespace {

using namespace tfm;

using cli::kExitBadInput;
using cli::kExitDiverged;
using cli::kExitInternal;
using cli::kExitOk;
using cli::integer_in;
using cli::number_in;

// Upper bound of count flags (--batches, --max-new-tokens, ...): far above any sensible use, far below
// an overflow.
constexpr int64_t kMaxFlagCount = 1000000000;

const char* kExamples = R"(
Examples:
  tfm train --config configs/shakespeare_char.json
  tfm train --config configs/tiny.json --set train.max_steps=200 --set model.dropout=0.1 --out runs/try
  tfm train --resume runs/shakespeare_char --set train.max_steps=4000
  tfm eval --run runs/shakespeare_char --batches 200
  tfm sample --run runs/shakespeare_char --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 40
  tfm train --config configs/shakespeare_mlm.json       # encoder-only: masked LM
  tfm fill-mask --run runs/shakespeare_mlm --text "To be, or not to b[MASK], that is the question"
  tfm train --config configs/eng_fra_d2l.json           # encoder-decoder: translation
  tfm translate --run runs/eng_fra_d2l --text "go ." --text "i lost ."
  tfm info --config configs/shakespeare_char_large.json
  tfm heads --run runs/shakespeare_char                 # what each attention head is worth
  tfm sweep --config configs/shakespeare_char.json --grid model.n_heads=1,2,4,8
  tfm config --config configs/shakespeare_char.json --set model.n_layers=6
  tfm config --keys          # every config key with its default, allowed values and meaning

A run directory holds config.json, last.ckpt, best.ckpt, train.log and metrics.jsonl.
Exit status: 0 done (or interrupted and checkpointed), 1 internal error,
             2 bad config, argument or file, 3 training stopped on a NaN/Inf.
)";

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

// ---- commands ----

int cmd_train(const std::string& config_file, const std::string& resume_dir,
              const std::vector<std::string>& sets, const std::string& out, int64_t stop_at,
              const std::string& init_from) {
  if (config_file.empty() == resume_dir.empty())
    throw ConfigError("train: give either --config FILE (a new run) or --resume DIR (continue a run)");
  Config config;
  TrainOptions options;
  options.stop = platform::stop_on_signals();
  options.stop_at_step = stop_at;
  options.init_from = init_from;
  if (!resume_dir.empty()) {
    if (!out.empty()) throw ConfigError("--out: a resumed run stays in its directory " + resume_dir);
    const Checkpoint ckpt = load_checkpoint(resume_dir + "/last.ckpt");
    Config trained;
    try {
      trained = resolve_config(ckpt.config);
    } catch (const ConfigError& e) {
      throw IoError(resume_dir + "/last.ckpt: the checkpoint's config is invalid: " + e.what());
    }
    trained.tree["output"]["dir"] = resume_dir;  // the directory may have moved since
    config = resume_config(trained, sets);
    options.resume = true;
    if (!init_from.empty()) throw ConfigError("--init-from: only for a new run (--config), not with --resume");
  } else {
    std::vector<std::string> all = sets;
    if (!out.empty()) all.push_back("output.dir=" + nlohmann::json(out).dump());
    config = load_config(config_file, all);
  }
  const TrainResult r = train(config, options);
  // The trainer has logged what happened (console and train.log).
  return r.status == TrainResult::Status::NonFinite ? kExitDiverged : kExitOk;
}

// Logits (B, T, V) of B sequences of T token ids, row-major.
using LogitsFn = std::function<std::vector<float>(const std::vector<int32_t>& ids, int64_t B, int64_t T)>;

// Logits of token sequences as JSON {"tokens": [ids per sequence], "logits": [(T, V) per sequence]}: for
// torch_lm.py --check-logits and scripts/check_gguf.sh. Sequences of one length run as one batch
// (B, T), as an evaluation does, when `batch` allows; others one by one.
void write_logits(const LogitsFn& forward, int64_t V, const std::vector<std::vector<int32_t>>& sequences, bool batch,
                  const std::string& path, const std::string& what) {
  nlohmann::json j = {{"tokens", nlohmann::json::array()}, {"logits", nlohmann::json::array()}};
  bool same_length = batch;
  for (const auto& ids : sequences) same_length = same_length && ids.size() == sequences[0].size();
  for (size_t first = 0; first < sequences.size();) {
    const size_t B = same_length ? sequences.size() : 1;
    const auto T = static_cast<int64_t>(sequences[first].size());
    std::vector<int32_t> ids;
    for (size_t b = first; b < first + B; ++b) ids.insert(ids.end(), sequences[b].begin(), sequences[b].end());
    const std::vector<float> logits = forward(ids, static_cast<int64_t>(B), T);  // (B, T, V)
    for (size_t b = 0; b < B; ++b) {
      nlohmann::json seq = nlohmann::json::array();
      for (int64_t t = 0; t < T; ++t) {
        const auto row = logits.begin() + (static_cast<int64_t>(b) * T + t) * V;
        seq.push_back(std::vector<float>(row, row + V));
      }
      j["tokens"].push_back(sequences[first + b]);
      j["logits"].push_back(std::move(seq));
    }
    first += B;
  }
  write_file_atomically(path, j.dump() + "\n");
  std::printf("wrote %s: logits of %s, vocabulary %ld\n", path.c_str(), what.c_str(), static_cast<long>(V));
}

LogitsFn model_logits(LanguageModel& model) {
  model.set_training(false);
  return [&model](const std::vector<int32_t>& ids, int64_t B, int64_t T) {
    NoGradGuard no_grad;
    return model.forward(ids, B, T).to_vector();
  };
}

// One batch of `rows` validation windows (the first evaluation batch) and the model's logits for them.
void dump_logits(LanguageModel& model, const Config& c, const std::vector<int32_t>& tokens, int64_t rows,
                 const std::string& path) {
  const int64_t T = c.integer("train.seq_len");
  BatchSampler sampler(eval_seed(c));
  std::vector<int32_t> x, y;
  sampler.sample(tokens, rows, T, x, y);
  std::vector<std::vector<int32_t>> sequences;
  for (int64_t b = 0; b < rows; ++b) sequences.emplace_back(x.begin() + b * T, x.begin() + (b + 1) * T);
  write_logits(model_logits(model), model.config().vocab_size, sequences, true, path,
               std::to_string(rows) + " x " + std::to_string(T) + " validation tokens");
}

// The logits of each --text, encoded with the run's tokenizer (each at most the model's context): the
// model's, or with --gguf those of llama.cpp's gpt2 graph run from the file (models/gguf_export.h).
void dump_text_logits(LanguageModel& model, const Tokenizer& tok, const std::vector<std::string>& texts,
                      const std::string& path, const std::string& gguf_path, const std::string& gelu) {
  const int64_t L = model.config().max_seq_len;
  std::vector<std::vector<int32_t>> sequences;
  for (const std::string& text : texts) {
    sequences.push_back(tok.encode(text, "--text"));
    const auto n = static_cast<int64_t>(sequences.back().size());
    if (n == 0 || n > L)
      throw ConfigError("--text: \"" + text + "\" is " + std::to_string(n) + " tokens, expected 1 to " +
                        std::to_string(L) + " (model.max_seq_len)");
  }
  const std::string what = std::to_string(texts.size()) + " texts";
  if (gguf_path.empty()) {
    write_logits(model_logits(model), model.config().vocab_size, sequences, true, path, what);
    return;
  }
  if (gelu != "erf" && gelu != "tanh" && gelu != "llama.cpp")
    throw ConfigError("--gelu: expected \"erf\", \"tanh\" or \"llama.cpp\", got \"" + gelu + "\"");
  const GeluForm form = gelu == "erf" ? GeluForm::Erf : gelu == "tanh" ? GeluForm::Tanh : GeluForm::LlamaCpp;
  const GgufFile file = load_gguf(gguf_path);
  const auto V = static_cast<int64_t>(file.at("tokenizer.ggml.tokens").items().size());
  const LogitsFn reference = [&](const std::vector<int32_t>& ids, int64_t, int64_t) {
    return gguf_reference_logits(file, ids, form).to_vector();
  };
  write_logits(reference, V, sequences, false, path, what + " from " + gguf_path + " (llama.cpp's graph, " + gelu + " GELU)");
}

int cmd_eval(const std::string& dir, const std::string& split, int64_t batches, const std::string& which,
             const std::string& dump_path, const std::vector<std::string>& texts, const std::string& gguf_path,
             const std::string& gelu, const std::string& mask_heads) {
  if (!texts.empty() && dump_path.empty()) throw ConfigError("--text: goes with --dump-logits FILE");
  if (!gguf_path.empty() && texts.empty()) throw ConfigError("--gguf: goes with --dump-logits FILE --text TEXT");
  if (split != "val" && split != "train")
    throw ConfigError("--split: expected \"val\" or \"train\", got \"" + split + "\"");
  LoadedRun run = load_run(dir, which, texts.empty());  // --text needs no data file
  cli::apply_head_mask(run, mask_heads);
  const Config& c = run.config;
  platform::configure_threads(static_cast<int>(c.integer("train.threads")));
  // The run's precision, as its evaluations during training (and torch_lm.py --bf16) ran.
  const GemmModeGuard gemm_mode(parse_precision(c.string("train.precision")),
                                resolve_gemm_backend(c.string("train.gemm_backend")));
  const int64_t B = c.integer("train.batch_size"), T = c.integer("train.seq_len");
  if (!dump_path.empty()) {
    if (!run.model)
      throw ConfigError("--dump-logits: only for language-model runs (train.objective causal_lm or masked_lm)");
    if (!texts.empty()) {
      dump_text_logits(*run.model, run.checkpoint.tokenizer, texts, dump_path, gguf_path, gelu);
      return kExitOk;
    }
    const Dataset data =
        load_dataset(c.string("data.path"), run.checkpoint.tokenizer, c.number("data.val_fraction"), T);
    dump_logits(*run.model, c, split == "val" ? data.val : data.train, batches == 0 ? 2 : batches, dump_path);
    return kExitOk;
  }
  if (batches == 0) batches = c.integer("train.eval_steps");
  const Metrics m = run.objective->evaluate(split, batches, eval_seed(c));
  const int64_t step = run.checkpoint.state.value("step", int64_t{0});
  std::string extra;
  for (const auto& [name, v] : m.values)
    if (name != "loss") extra += ", " + name + " " + std::to_string(v).substr(0, 6);
  std::printf("%s loss %.4f%s over %ld batches of %ld (%s/%s.ckpt, step %ld, %s)\n", split.c_str(), m.get("loss"),
              extra.c_str(), static_cast<long>(batches), static_cast<long>(B), dir.c_str(), which.c_str(),
              static_cast<long>(step), run.objective->name().c_str());
  return kExitOk;
}

int cmd_sample(const std::string& dir, const SampleOptions& o, std::string which, const std::string& init_from,
               const std::string& mask_heads) {
  if (which.empty()) which = std::filesystem::exists(dir + "/best.ckpt") ? "best" : "last";
  LoadedRun run = load_run(dir, which);
  if (!run.model || run.objective->name() != "causal_lm")
    throw ConfigError("sample: " + dir + " was trained with train.objective \"" + run.objective->name() +
                      "\"; sampling continues text, which needs a causal_lm run" +
                      (run.objective->name() == "masked_lm" ? " (for masked_lm: tfm fill-mask)" : " (for seq2seq: tfm translate)"));
  if (!init_from.empty()) load_safetensors_into(*run.model, init_from);
  cli::apply_head_mask(run, mask_heads);
  const int64_t V = run.model->config().vocab_size;
  if (o.top_k > V)
    throw ConfigError("--top-k: expected 0 to " + std::to_string(V) + " (the vocabulary of " + dir + "), got " +
                      std::to_string(o.top_k));
  platform::configure_threads(static_cast<int>(run.config.integer("train.threads")));
  std::fputs(o.prompt.c_str(), stdout);
  generate(*run.model, run.checkpoint.tokenizer, o, [](const std::string& piece) {
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  return kExitOk;
}

int cmd_info(const std::string& file, const std::vector<std::string>& sets, int64_t vocab_override,
             bool measure, bool as_json) {
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
  const std::string vocab = seq2seq ? std::to_string(mc.source_vocab_size) + " source + " +
                                          std::to_string(mc.vocab_size) + " target"
                                    : std::to_string(mc.vocab_size);
  if (as_json) {  // for scripts (scripts/bench.sh): the figures below, machine-readable
    nlohmann::json j = {{"config", file}, {"objective", objective_name}, {"vocab_size", mc.vocab_size},
                        {"parameters", P}, {"forward_flops_per_token", train_flops / 3.0},
                        {"train_flops_per_token", train_flops}, {"batch_size", B}, {"seq_len", T},
                        {"memory_estimate_bytes", memory.total()}};
    if (seq2seq) j["source_vocab_size"] = mc.source_vocab_size;
    j["head_gating"] = mc.head_gating, j["head_mixing"] = mc.head_mixing;
    if (mc.head_gating == "topk") j["head_topk"] = mc.head_topk, j["computed_head_share"] = computed_head_share(mc);
    if (mc.head_mixing == "group_mlp") j["head_groups"] = mc.head_groups;
    for (const auto& [name, n] : model.parameter_breakdown()) j["breakdown"][name] = n;
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("config %s (output.dir %s), objective %s\n", file.c_str(), c.string("output.dir").c_str(),
              objective_name.c_str());
  std::printf("vocabulary: %s symbols, %s tokenizer, %s\n", vocab.c_str(), c.string("data.tokenizer").c_str(),
              vocab_note.c_str());
  const std::string layers = seq2seq ? std::to_string(mc.n_encoder_layers) + " encoder + " +
                                           std::to_string(mc.n_decoder_layers) + " decoder layers"
                                     : std::to_string(mc.n_layers) + " layers";
  std::printf("model: %s, d_model %ld, %ld heads (%ld kv), d_ff %ld, context %ld\n", layers.c_str(),
              static_cast<long>(mc.d_model), static_cast<long>(mc.n_heads), static_cast<long>(mc.n_kv_heads),
              static_cast<long>(mc.d_ff), static_cast<long>(mc.max_seq_len));
  if (mc.head_gating == "topk")
    std::printf("heads: top-k gating, %ld of %ld heads per token (attention scores and sums x %.3g), a gate of "
                "%.0f weights per attention layer, balance loss %g\n",
                static_cast<long>(mc.head_topk), static_cast<long>(mc.n_heads), computed_head_share(mc),
                gate_weight_count(mc), mc.head_balance_loss);
  if (mc.head_mixing != "none")
    std::printf("heads: %s mixing%s\n", mc.head_mixing.c_str(),
                mc.head_mixing == "group_mlp" ? (" in " + std::to_string(mc.head_groups) + " groups").c_str() : "");
  std::printf("parameters: %ld (%s)\n", static_cast<long>(P), human_count(static_cast<double>(P)).c_str());
  for (const auto& [name, n] : model.parameter_breakdown())
    std::printf("  %-14s %12ld  %5.1f%%\n", name.c_str(), static_cast<long>(n),
                100.0 * n / std::max<int64_t>(P, 1));
  if (seq2seq) {
    std::printf("FLOPs per target token (the data's mean lengths): forward %s, training %s\n",
                human_count(train_flops / 3.0).c_str(), human_count(train_flops).c_str());
    std::printf("memory estimate (batch %ld pairs of at most %ld + %ld tokens): %s\n", static_cast<long>(B),
                static_cast<long>(c.integer("data.max_source_len") + 1), static_cast<long>(T),
                memory.summary().c_str());
  } else {
    const double tokens = static_cast<double>(B * T * c.integer("train.grad_accum_steps"));
    std::printf("FLOPs per token at T = %ld: forward %s, training %s; per optimizer step (%.0f tokens): %s\n",
                static_cast<long>(T), human_count(train_flops / 3.0).c_str(), human_count(train_flops).c_str(),
                tokens, human_count(train_flops * tokens).c_str());
    std::printf("memory estimate (batch %ld x %ld): %s\n", static_cast<long>(B), static_cast<long>(T),
                memory.summary().c_str());
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
    std::printf("measured: one training step peaked at %s of tensor memory (%s above the model)\n",
                mib(static_cast<double>(peak)).c_str(),
                mib(static_cast<double>(peak - std::min(peak, before))).c_str());
  }
  return kExitOk;
}

int cmd_config(const std::string& file, const std::vector<std::string>& sets, bool keys) {
  if (keys) {
    std::fputs(keys_markdown().c_str(), stdout);
    return kExitOk;
  }
  if (file.empty())
    throw ConfigError("config: give --config FILE (print it resolved) or --keys (list every key)");
  std::printf("%s\n", load_config(file, sets).tree.dump(2).c_str());
  return kExitOk;
}

void print_error(const std::string& what) {
  // Multi-line errors (several bad keys) keep one problem per line.
  std::string msg = what;
  size_t pos = 0;
  while ((pos = msg.find('\n', pos)) != std::string::npos) msg.replace(pos, 1, "\n           "), pos += 12;
  std::fprintf(stderr, "tfm: error: %s\n", msg.c_str());
}

}  // namespace

static int run_cli(int argc, char** argv) {
  CLI::App app{
      "tfm: train a small Transformer (decoder-only language model, masked-LM encoder or encoder-decoder "
      "translator), evaluate it, and sample, fill masks or translate with it."};
  app.footer(kExamples);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");

  std::string config_file, resume_dir, out, run_dir, split = "val", which, prompt, init_from, dump_path, mask_heads,
      gguf_path, gelu = "llama.cpp";
  std::vector<std::string> sets, texts;
  int64_t stop_at = -1, batches = 0, vocab_size = 0;
  bool keys = false, measure = false, info_json = false;
  SampleOptions sample;
  sample.temperature = 0.8;
  sample.top_k = 0;

  auto* train = app.add_subcommand("train", "Train a model from a config, or continue a run");
  train->add_option("--config", config_file, "JSON config of a new run (configs/*.json)")->type_name("FILE");
  train
      ->add_option("--resume", resume_dir,
                   "Continue the run in DIR from its last.ckpt (bit-identical to an uninterrupted run)")
      ->type_name("DIR");
  train
      ->add_option("--set", sets,
                   "Override a key: --set train.max_steps=500 (repeatable; on --resume only "
                   "logging/eval/checkpoint intervals, max_steps and threads)")
      ->type_name("KEY=VALUE");
  train->add_option("--out", out, "Run directory (default: output.dir, i.e. runs/<config name>)")
      ->type_name("DIR");
  train->add_option("--init-from", init_from, "Initial weights from a safetensors file (tfm export)")
      ->type_name("FILE");
  train->add_option("--stop-at", stop_at, "Stop as if interrupted after this step (for testing resume)")
      ->group("")
      ->check(integer_in(-1, kMaxFlagCount));
  train->footer(
      "\nExamples:\n  tfm train --config configs/shakespeare_char.json\n"
      "  tfm train --config configs/tiny.json --set train.max_steps=100 --out runs/tiny\n"
      "  tfm train --resume runs/shakespeare_char --set train.max_steps=4000\n"
      "Ctrl-C finishes the current step, writes last.ckpt and exits; --resume continues.\n");

  auto* eval = app.add_subcommand("eval", "Mean loss of a trained run on random batches of its data");
  eval->add_option("--run", run_dir, "Run directory")->type_name("DIR")->required();
  eval->add_option("--split", split, "val or train")->capture_default_str();
  eval->add_option("--batches", batches, "Number of batches (default: the run's train.eval_steps)")
      ->check(integer_in(1, kMaxFlagCount));
  eval->add_option("--checkpoint", which, "last or best")->default_str("last");
  eval->add_option("--dump-logits", dump_path,
                   "Write one batch of --batches (default 2) sequences and their logits as JSON "
                   "(for torch_lm.py --check-logits)")
      ->type_name("FILE");
  eval->add_option("--text", texts,
                   "With --dump-logits: the logits of this text instead (repeatable; the run's tokenizer, at most "
                   "model.max_seq_len tokens)")
      ->type_name("TEXT");
  eval->add_option("--gguf", gguf_path,
                   "With --text: the logits of llama.cpp's gpt2 graph run by tfm from this exported file (double "
                   "precision) instead of the model's: what llama.cpp should compute")
      ->type_name("FILE");
  eval->add_option("--gelu", gelu, "With --gguf: the GELU to run it with: erf (tfm's), tanh, llama.cpp (its CPU kernel)")
      ->capture_default_str();
  eval->add_option("--mask-heads", mask_heads, "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  eval->footer("\nExamples:\n  tfm eval --run runs/shakespeare_char --batches 200\n"
               "  tfm eval --run runs/shakespeare_char --batches 200 --mask-heads 0:1,3:2\n"
               "  tfm eval --run runs/shakespeare_char --dump-logits logits.json --text \"ROMEO:\" --text \"JULIET:\"\n"
               "  tfm eval --run runs/shakespeare_char --dump-logits llama.json --text \"ROMEO:\" \\\n"
               "      --gguf runs/shakespeare_char/model-f32.gguf --gelu llama.cpp   # what llama.cpp should compute\n");

  auto* samp = app.add_subcommand("sample", "Generate text from a trained run (streams as it goes)");
  samp->add_option("--run", run_dir, "Run directory")->type_name("DIR")->required();
  samp->add_option("--prompt", sample.prompt, "Text to continue (default: a newline)");
  samp->add_option("--max-new-tokens", sample.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(integer_in(0, kMaxFlagCount));
  samp->add_option("--temperature", sample.temperature, "Softmax temperature (0 = greedy)")
      ->capture_default_str()
      ->check(number_in(0, 100));
  samp->add_option("--top-k", sample.top_k,
                   "Sample among the k most likely tokens (0 = all; at most the vocabulary)")
      ->capture_default_str()
      ->check(integer_in(0, kMaxFlagCount));
  samp->add_option("--seed", sample.seed, "Sampling seed (same seed, same text)")
      ->capture_default_str()
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  samp->add_option("--checkpoint", which, "last or best (default: best when it exists)");
  samp->add_option("--mask-heads", mask_heads, "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  samp->add_option("--init-from", init_from, "Weights from a safetensors file instead of the run's")
      ->type_name("FILE");
  samp->footer(
      "\nExample:\n  tfm sample --run runs/shakespeare_char --prompt \"ROMEO:\" --temperature 0.8 --top-k "
      "40\n");

  auto* info = app.add_subcommand("info", "Parameters per component, FLOPs per token and memory of a config");
  info->add_option("--config", config_file, "JSON config")->type_name("FILE")->required();
  info->add_option("--set", sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  info->add_option("--vocab-size", vocab_size, "Vocabulary size when the data file is not at hand")
      ->check(integer_in(1, kMaxFlagCount));
  info->add_flag("--measure", measure,
                 "Also run one training step and report the measured peak tensor memory");
  info->add_flag("--json", info_json, "Print parameters and FLOPs per token as one JSON object");
  info->footer("\nExample:\n  tfm info --config configs/shakespeare_char_large.json --measure\n");

  auto* cfg =
      app.add_subcommand("config", "Print a config resolved (every default filled in), or the key table");
  cfg->add_option("--config", config_file, "JSON config")->type_name("FILE");
  cfg->add_option("--set", sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  cfg->add_flag("--keys", keys, "List every key: type, default, allowed values, meaning (Markdown)");
  cfg->footer(
      "\nExamples:\n  tfm config --config configs/tiny.json --set model.d_model=64\n  tfm config --keys > "
      "keys.md\n");

  std::vector<cli::Command> more = cli::add_bench_commands(app);
  for (cli::Command& c : cli::add_insight_commands(app)) more.push_back(std::move(c));
  for (cli::Command& c : cli::add_objective_commands(app)) more.push_back(std::move(c));
  for (cli::Command& c : cli::add_gradcheck_commands(app)) more.push_back(std::move(c));
  for (cli::Command& c : cli::add_heads_commands(app)) more.push_back(std::move(c));
  for (cli::Command& c : cli::add_sweep_commands(app)) more.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  try {
    if (train->parsed()) return cmd_train(config_file, resume_dir, sets, out, stop_at, init_from);
    if (eval->parsed()) return cmd_eval(run_dir, split, batches, which.empty() ? "last" : which, dump_path, texts, gguf_path,
                                        gelu, mask_heads);
    if (samp->parsed()) return cmd_sample(run_dir, sample, which, init_from, mask_heads);
    if (info->parsed()) return cmd_info(config_file, sets, vocab_size, measure, info_json);
    if (cfg->parsed()) return cmd_config(config_file, sets, keys);
    for (const cli::Command& c : more)
      if (c.app->parsed()) return c.run();
  } catch (const ConfigError& e) {
    print_error(e.what());
    return kExitBadInput;
  } catch (const IoError& e) {
    print_error(e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    print_error("out of memory (try a smaller train.batch_size or model)");
    return kExitInternal;
  } catch (const std::exception& e) {
    print_error(std::string("internal error: ") + e.what());
    return kExitInternal;
  }
  return kExitInternal;
}

int main(int argc, char** argv) {
  tfm::platform::select_blas_kernels(argv);
  // MPI starts after the possible re-exec above, in the process image that runs (under mpirun too:
  // the launcher's environment survives the exec). Without mpirun this does nothing.
  tfm::dist::init(&argc, &argv);
  const int status = run_cli(argc, argv);
  // An error on one rank (the others may wait in a collective) ends the whole job. A NaN stop is
  // seen by every rank at the same step (the loss and gradients are global), so it finalizes.
  if (status != kExitOk && status != kExitDiverged && tfm::dist::active()) tfm::dist::abort(status);
  tfm::dist::finalize();
  return status;
}
