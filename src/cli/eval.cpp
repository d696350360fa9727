// `tfm eval`: a trained run's loss (and its objective's other figures) on batches of its data.
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/data/dataset.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/ops.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/gguf_reference.h"
#include "tfm/objectives/inference.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/trainer.h"

namespace tfm::cli {
namespace {

// Logits (B, T, V) of B sequences of T token ids, row-major.
using LogitsFn = std::function<std::vector<float>(const std::vector<int32_t>& ids, int64_t B, int64_t T)>;

// Refuses `rows` sequences of T tokens whose forward and logits cannot fit, before anything is read: the
// logits as JSON take ~48 bytes a value while the document is built and written. `sizes` names the flags.
void check_logits_memory(const ModelConfig& mc, int64_t rows, int64_t T, const std::string& sizes) {
  MemoryEstimate need = estimate_inference_memory(mc, rows, T);
  need.activations +=
      48.0 * static_cast<double>(rows) * static_cast<double>(T) * static_cast<double>(mc.vocab_size);
  need.drivers = {sizes};
  check_flag_memory(need, "eval --dump-logits");
}

// Logits of token sequences as JSON {"tokens": [ids per sequence], "logits": [(T, V) per sequence]}: for
// scripts/torch_lm.py --check-logits and scripts/dev/check_gguf.sh. Sequences of one length run as one batch
// (B, T), as an evaluation does, when `batch` allows; others one by one.
void write_logits(const LogitsFn& forward, int64_t V, const std::vector<std::vector<int32_t>>& sequences,
                  bool batch, const std::string& path, const std::string& what) {
  nlohmann::json j = {{"tokens", nlohmann::json::array()}, {"logits", nlohmann::json::array()}};
  bool same_length = batch;
  for (const auto& ids : sequences) same_length = same_length && ids.size() == sequences[0].size();
  for (size_t first = 0; first < sequences.size();) {
    const size_t B = same_length ? sequences.size() : 1;
    const auto T = static_cast<int64_t>(sequences[first].size());
    std::vector<int32_t> ids;
    for (size_t b = first; b < first + B; ++b)
      ids.insert(ids.end(), sequences[b].begin(), sequences[b].end());
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
  fmt::print("wrote {}: logits of {}, vocabulary {}\n", path, what, V);
}

LogitsFn model_logits(LanguageModel& model) {
  model.set_training(false);
  return [&model](const std::vector<int32_t>& ids, int64_t B, int64_t T) {
    NoGradGuard no_grad;
    return model.forward(ids, B, T).to_vector();
  };
}

// One batch of `rows` windows of `split` (the first evaluation batch) and the model's logits for them.
void dump_logits(LanguageModel& model, const Config& c, const TokenSpan& tokens, const std::string& split,
                 int64_t rows, const std::string& path) {
  const int64_t T = c.train().seq_len;
  BatchSampler sampler(eval_seed(c));
  std::vector<int32_t> x, y;
  sampler.sample(tokens, rows, T, x, y);
  std::vector<std::vector<int32_t>> sequences;
  for (int64_t b = 0; b < rows; ++b) sequences.emplace_back(x.begin() + b * T, x.begin() + (b + 1) * T);
  write_logits(model_logits(model), model.config().vocab_size, sequences, true, path,
               std::to_string(rows) + " x " + std::to_string(T) +
                   (split == "val" ? " validation" : " training") + " tokens");
}

// --gguf FILE runs the run's token ids through the file's graph: ConfigError unless the file's vocabulary
// is the one this run exports (the same tokens in the same order) and its context holds every --text.
void check_gguf_of_run(const GgufFile& file, const Tokenizer& tok,
                       const std::vector<std::vector<int32_t>>& texts) {
  const std::string fix = "; export this run's model (tfm export --run RUN --format gguf) and pass that file";
  GgufFile run_vocabulary;
  add_gguf_tokenizer(run_vocabulary, tok);
  const std::vector<GgufValue>& want = run_vocabulary.at("tokenizer.ggml.tokens").items();
  const std::vector<GgufValue>& got = file.at("tokenizer.ggml.tokens").items();
  size_t differ = 0;
  while (differ < want.size() && differ < got.size() && want[differ].str() == got[differ].str()) ++differ;
  if (differ < want.size() || differ < got.size())
    throw ConfigError(
        detail::concat("--gguf: ", file.source, " is not this run's model: its vocabulary has ", got.size(),
                       " tokens, the run's ", want.size(),
                       differ < want.size() && differ < got.size()
                           ? detail::concat(", and token ", differ, " is \"", got[differ].str(),
                                            "\" there, \"", want[differ].str(), "\" in the run's")
                           : std::string(),
                       fix));
  const std::string arch = file.at("general.architecture").str();
  const auto context = static_cast<size_t>(file.at(arch + ".context_length").unsigned_value());
  for (const std::vector<int32_t>& ids : texts)
    if (ids.size() > context)
      throw ConfigError(detail::concat("--gguf: ", file.source, " has a context of ", context,
                                       " tokens and a --text is ", ids.size(), " tokens", fix));
}

// The logits of each --text, encoded with the run's tokenizer (each at most the model's context; a
// masked_lm run's "[MASK]" read as its mask token, mask_id, as fill-mask reads it): the model's, or with
// --gguf those of llama.cpp's graph run from the file (models/gguf_reference.h).
void dump_text_logits(LanguageModel& model, const Tokenizer& tok, int32_t mask_id,
                      const std::vector<std::string>& texts, const std::string& path,
                      const std::string& gguf_path, const std::string& gelu) {
  const int64_t L = model.config().max_seq_len;
  std::vector<std::vector<int32_t>> sequences;
  for (const std::string& text : texts) {
    sequences.push_back(encode_with_masks(tok, text, mask_id, "--text"));
    const auto n = static_cast<int64_t>(sequences.back().size());
    if (n == 0 || n > L)
      throw ConfigError("--text: \"" + text + "\" is " + std::to_string(n) + " tokens, expected 1 to " +
                        std::to_string(L) + " (model.max_seq_len)");
  }
  check_logits_memory(model.config(), static_cast<int64_t>(texts.size()), L,
                      std::to_string(texts.size()) + " --text");
  const std::string what = std::to_string(texts.size()) + (texts.size() == 1 ? " text" : " texts");
  if (gguf_path.empty()) {
    write_logits(model_logits(model), model.config().vocab_size, sequences, true, path, what);
    return;
  }
  const GeluForm form = gelu == "erf" ? GeluForm::Erf : gelu == "tanh" ? GeluForm::Tanh : GeluForm::LlamaCpp;
  const GgufFile file = load_gguf(gguf_path);
  check_gguf_of_run(file, tok, sequences);
  const auto V = static_cast<int64_t>(file.at("tokenizer.ggml.tokens").items().size());
  const LogitsFn reference = [&](const std::vector<int32_t>& ids, int64_t, int64_t) {
    return gguf_reference_logits(file, ids, form).to_vector();
  };
  const std::string arch = file.at("general.architecture").str();
  write_logits(reference, V, sequences, false, path,
               what + " from " + gguf_path + " (llama.cpp's " + arch + " graph" +
                   (arch == "gpt2" ? ", " + gelu + " GELU)" : ")"));
}

struct EvalOptions {
  std::string run, split = "val", which, dump_path, mask_heads, gguf_path, gelu = "llama.cpp";
  std::vector<std::string> texts;
  int64_t batches = 0;  // 0: the run's train.eval_steps (--dump-logits: 2 sequences)
  bool full = false;    // the whole split once (as train.eval_steps 0)
};

int eval_command(const EvalOptions& o) {
  const std::string& dir = o.run;
  const std::string& split = o.split;
  int64_t batches = o.batches;
  if (o.full && (o.batches > 0 || !o.dump_path.empty()))
    throw ConfigError("--full: evaluates the whole split; it goes without --batches and --dump-logits");
  if (!o.texts.empty() && o.dump_path.empty()) throw ConfigError("--text: goes with --dump-logits FILE");
  if (!o.gguf_path.empty() && o.texts.empty())
    throw ConfigError("--gguf: goes with --dump-logits FILE --text TEXT");
  LoadedRun run = read_run(dir, o.which, o.texts.empty());  // --text needs no data file
  if (!o.dump_path.empty()) {
    std::vector<CommandInput> inputs = run_inputs(run.checkpoint_path, run.config);
    inputs.push_back({"--gguf", o.gguf_path});
    check_output_path("--dump-logits", o.dump_path, inputs);
  }
  apply_head_mask(run, o.mask_heads);
  const Config& c = run.config;
  // The run's precision, as its evaluations during training (and torch_lm.py --bf16) ran.
  const TrainConfig train = c.train();
  const GemmBackend backend = resolve_gemm_backend(train.gemm_backend);
  const GemmModeGuard gemm_mode(resolve_precision(train.precision, backend).precision, backend);
  const int64_t B = train.batch_size, T = train.seq_len;
  if (!o.dump_path.empty()) {
    if (!run.model)
      throw ConfigError(
          "--dump-logits: only for language-model runs (train.objective causal_lm or masked_lm)");
    if (!o.texts.empty()) {
      dump_text_logits(*run.model, run.checkpoint.tokenizer, mask_token_id(*run.objective), o.texts,
                       o.dump_path, o.gguf_path, o.gelu);
      return kExitOk;
    }
    const int64_t rows = batches == 0 ? 2 : batches;
    const std::string sizes = "--batches = " + std::to_string(rows) + " (sequences of --dump-logits)";
    check_logits_memory(run.model->config(), rows, T, sizes);
    const DataConfig d = c.data();
    const Dataset data =
        load_dataset(d.path, run.checkpoint.tokenizer, d.val_fraction, T, token_cache_options(c, true));
    sized_by(sizes, [&] {
      dump_logits(*run.model, c, split == "val" ? data.val : data.train, split, rows, o.dump_path);
    });
    return kExitOk;
  }
  // 0 (--full, or a run trained with train.eval_steps 0): the whole split.
  if (!o.full && batches == 0) batches = train.eval_steps;
  const Metrics m = run.objective->evaluate(split, batches, eval_seed(c));
  // A split walked in order (seq2seq) ends before a large --batches does: report what ran.
  const int64_t ran = run.objective->evaluation_batches(split, batches);
  // masked_lm reads every token once and scores the masked ones (train.mask_prob of them).
  const std::string once = mask_token_id(*run.objective) >= 0
                               ? "every token read once, the masked ones scored"
                               : "every token once";
  // A whole split's last batch is partial (and a text's shorter tail window is a forward of its own).
  const std::string rows = run.objective->capabilities().language_model() ? "windows" : "pairs";
  const auto counted = [](int64_t n) { return std::to_string(n) + (n == 1 ? " batch" : " batches"); };
  const std::string over =
      batches == 0
          ? fmt::format("the whole {} split ({}: {} of at most {} {})", split, once, counted(ran), B, rows)
      : ran < batches
          ? fmt::format("{} of at most {} {} (the whole {} split; {} asked for more than it holds)",
                        counted(ran), B, rows, split, batches)
          : fmt::format("{} of {}", counted(ran), B);
  const int64_t step = run.checkpoint.state.step;
  std::string extra;
  for (const auto& [name, v] : m.values)
    if (name != "loss") extra += ", " + name + " " + std::to_string(v).substr(0, 6);
  // The heads taken out (--mask-heads), so that the line says which model its loss is of.
  const std::string masked = o.mask_heads.empty() ? "" : ", heads masked " + o.mask_heads;
  fmt::print("{} loss {:.4f}{} over {} ({}/{}.ckpt, step {}, {}{})\n", split.c_str(), m.get("loss"),
             extra.c_str(), over.c_str(), dir.c_str(), run.which.c_str(), step, run.objective->name().c_str(),
             masked.c_str());
  return kExitOk;
}

}  // namespace

std::vector<Command> add_eval_commands(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* eval = app.add_subcommand("eval", "Mean loss of a trained run on random batches of its data");
  eval->add_option("--run", o->run, "Run directory")->type_name("DIR")->required();
  eval->add_option("--split", o->split, "val or train")
      ->capture_default_str()
      ->check(one_of({"val", "train"}));
  eval->add_option("--batches", o->batches,
                   "Number of batches (default: the run's train.eval_steps; seq2seq: at most what its split "
                   "holds)")
      ->check(integer_in(1, kMaxFlagCount));
  eval->add_flag(
      "--full", o->full,
      "Evaluate the whole split once, every token scored exactly once (non-overlapping windows "
      "of train.seq_len, the tail a shorter one; masked_lm: every token read once, the masked ones "
      "scored; seq2seq: every pair): no sampling noise");
  add_checkpoint_option(eval, o->which);
  eval->add_option("--dump-logits", o->dump_path,
                   "Write one batch of --batches (default 2) sequences and their logits as JSON "
                   "(for scripts/torch_lm.py --check-logits; refused when it cannot fit in memory)")
      ->type_name("FILE");
  eval->add_option(
          "--text", o->texts,
          "With --dump-logits: the logits of this text instead (repeatable; the run's tokenizer, at most "
          "model.max_seq_len tokens)")
      ->type_name("TEXT");
  eval->add_option("--gguf", o->gguf_path,
                   "With --text: the logits of llama.cpp's graph run by tfm from this exported file (double "
                   "precision) instead of the model's: what llama.cpp should compute")
      ->type_name("FILE");
  eval->add_option(
          "--gelu", o->gelu,
          "With --gguf: the GELU to run a gpt2 file with (llama and qwen3 have none): erf (tfm's), tanh, "
          "llama.cpp (its CPU kernel)")
      ->capture_default_str()
      ->check(one_of({"erf", "tanh", "llama.cpp"}));
  eval->add_option("--mask-heads", o->mask_heads,
                   "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  eval->footer(
      "\nExamples:\n  tfm eval --run runs/shakespeare_char --batches 200\n"
      "  tfm eval --run runs/shakespeare_char --batches 200 --mask-heads 0:1,3:2\n"
      "  tfm eval --run runs/shakespeare_char --dump-logits logits.json --text \"ROMEO:\" --text "
      "\"JULIET:\"\n"
      "  tfm eval --run runs/shakespeare_char --dump-logits llama.json --text \"ROMEO:\" \\\n"
      "      --gguf runs/shakespeare_char/model-f32.gguf --gelu llama.cpp   # what llama.cpp should "
      "compute\n");
  return {{eval, [o] { return eval_command(*o); }}};
}

}  // namespace tfm::cli
