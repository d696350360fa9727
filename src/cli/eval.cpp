// `tfm eval`: a trained run's loss (and its objective's other figures) on batches of its data.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli.h"
#include "tfm/data/dataset.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/training/trainer.h"

namespace tfm::cli {
namespace {

// One batch of `rows` validation windows (the first evaluation batch) and the model's logits for them:
// {"tokens": (B, T) ids, "logits": (B, T, V)}, for torch_lm.py --check-logits.
void dump_logits(LanguageModel& model, const Config& c, const TokenSpan& tokens, int64_t rows,
                 const std::string& path) {
  const int64_t T = c.integer("train.seq_len");
  BatchSampler sampler(eval_seed(c));
  std::vector<int32_t> x, y;
  sampler.sample(tokens, rows, T, x, y);
  model.set_training(false);
  NoGradGuard no_grad;
  const std::vector<float> logits = model.forward(x, rows, T).to_vector();
  const int64_t V = model.config().vocab_size;
  nlohmann::json j = {{"tokens", nlohmann::json::array()}, {"logits", nlohmann::json::array()}};
  for (int64_t b = 0; b < rows; ++b) {
    j["tokens"].push_back(std::vector<int32_t>(x.begin() + b * T, x.begin() + (b + 1) * T));
    nlohmann::json seq = nlohmann::json::array();
    for (int64_t t = 0; t < T; ++t) {
      const float* row = logits.data() + (b * T + t) * V;
      seq.push_back(std::vector<float>(row, row + V));
    }
    j["logits"].push_back(std::move(seq));
  }
  write_file_atomically(path, j.dump() + "\n");
  fmt::print("wrote {}: logits of {} x {} validation tokens, vocabulary {}\n", path.c_str(),
              rows, T, V);
}

struct EvalOptions {
  std::string run, split = "val", which = "last", dump_path, mask_heads;
  int64_t batches = 0;  // 0: the run's train.eval_steps (--dump-logits: 2 sequences)
};

int eval_command(const EvalOptions& o) {
  const std::string& dir = o.run;
  const std::string& split = o.split;
  int64_t batches = o.batches;
  if (split != "val" && split != "train")
    throw ConfigError("--split: expected \"val\" or \"train\", got \"" + split + "\"");
  LoadedRun run = load_run(dir, o.which, true);
  apply_head_mask(run, o.mask_heads);
  const Config& c = run.config;
  // The run's precision, as its evaluations during training (and torch_lm.py --bf16) ran.
  const GemmModeGuard gemm_mode(parse_precision(c.string("train.precision")),
                                resolve_gemm_backend(c.string("train.gemm_backend")));
  const int64_t B = c.integer("train.batch_size"), T = c.integer("train.seq_len");
  if (!o.dump_path.empty()) {
    if (!run.model)
      throw ConfigError("--dump-logits: only for language-model runs (train.objective causal_lm or masked_lm)");
    const Dataset data =
        load_dataset(c.string("data.path"), run.checkpoint.tokenizer, c.number("data.val_fraction"), T,
                     token_cache_options(c, true));
    dump_logits(*run.model, c, split == "val" ? data.val : data.train, batches == 0 ? 2 : batches, o.dump_path);
    return kExitOk;
  }
  if (batches == 0) batches = c.integer("train.eval_steps");
  const Metrics m = run.objective->evaluate(split, batches, eval_seed(c));
  const int64_t step = run.checkpoint.state.value("step", int64_t{0});
  std::string extra;
  for (const auto& [name, v] : m.values)
    if (name != "loss") extra += ", " + name + " " + std::to_string(v).substr(0, 6);
  fmt::print("{} loss {:.4f}{} over {} batches of {} ({}/{}.ckpt, step {}, {})\n", split.c_str(), m.get("loss"),
              extra.c_str(), batches, B, dir.c_str(), o.which.c_str(),
              step, run.objective->name().c_str());
  return kExitOk;
}

}  // namespace

std::vector<Command> add_eval_commands(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* eval = app.add_subcommand("eval", "Mean loss of a trained run on random batches of its data");
  eval->add_option("--run", o->run, "Run directory")->type_name("DIR")->required();
  eval->add_option("--split", o->split, "val or train")->capture_default_str();
  eval->add_option("--batches", o->batches, "Number of batches (default: the run's train.eval_steps)")
      ->check(integer_in(1, kMaxFlagCount));
  eval->add_option("--checkpoint", o->which, "last or best")->capture_default_str();
  eval->add_option("--dump-logits", o->dump_path,
                   "Write one batch of --batches (default 2) sequences and their logits as JSON "
                   "(for scripts/torch_lm.py --check-logits)")
      ->type_name("FILE");
  eval->add_option("--mask-heads", o->mask_heads, "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  eval->footer("\nExamples:\n  tfm eval --run runs/shakespeare_char --batches 200\n"
               "  tfm eval --run runs/shakespeare_char --batches 200 --mask-heads 0:1,3:2\n");
  return {{eval, [o] { return eval_command(*o); }}};
}

}  // namespace tfm::cli
