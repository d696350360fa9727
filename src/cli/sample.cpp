// `tfm sample`: text from a causal_lm run, streamed as it is generated.
#include <cstdio>
#include <limits>
#include <string>

#include "cli.h"
#include "tfm/engine/error.h"
#include "tfm/models/sampling.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

struct SampleCliOptions {
  std::string run, which, init_from, mask_heads;
  SampleOptions sample;
};

int sample_command(const SampleCliOptions& cli) {
  const std::string& dir = cli.run;
  const SampleOptions& o = cli.sample;
  LoadedRun run = load_run(dir, cli.which);
  const ObjectiveCapabilities can = run.objective->capabilities();
  if (can.inference != Inference::Sample)
    throw ConfigError("sample: " + dir + " was trained with train.objective \"" + run.objective->name() +
                      "\"; sampling continues text, which needs a causal_lm run (for " +
                      run.objective->name() + ": " + can.inference_command + ")");
  if (!cli.init_from.empty()) {
    const std::string note =
        load_safetensors_into(*run.model, cli.init_from, &run.checkpoint, run.checkpoint_path);
    if (!note.empty()) std::fprintf(stderr, "tfm: warning: %s\n", note.c_str());
  }
  apply_head_mask(run, cli.mask_heads);
  const int64_t V = run.model->config().vocab_size;
  if (o.top_k > V)
    throw ConfigError("--top-k: expected 0 to " + std::to_string(V) + " (the vocabulary of " + dir +
                      "), got " + std::to_string(o.top_k));
  run.checkpoint.tokenizer.encode(o.prompt, "--prompt");  // a bad prompt is refused before it is echoed
  std::fputs(o.prompt.c_str(), stdout);
  generate(*run.model, run.checkpoint.tokenizer, o, [](const std::string& piece) {
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_sample_commands(CLI::App& app) {
  auto o = std::make_shared<SampleCliOptions>();
  o->sample.temperature = 0.8;
  o->sample.top_k = 0;
  SampleOptions& s = o->sample;
  auto* samp = app.add_subcommand("sample", "Generate text from a trained run (streams as it goes)");
  samp->add_option("--run", o->run, "Run directory")->type_name("DIR")->required();
  samp->add_option("--prompt", s.prompt, "Text to continue (default: a newline)");
  samp->add_option("--max-new-tokens", s.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(integer_in(0, kMaxFlagCount));
  samp->add_option("--temperature", s.temperature, "Softmax temperature (0 = greedy)")
      ->capture_default_str()
      ->check(number_in(0, 100));
  samp->add_option("--top-k", s.top_k,
                   "Sample among the k most likely tokens (0 = all; at most the vocabulary)")
      ->capture_default_str()
      ->check(integer_in(0, kMaxFlagCount));
  samp->add_option("--seed", s.seed, "Sampling seed (same seed, same text)")
      ->capture_default_str()
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  samp->add_option("--checkpoint", o->which, "last or best (default: best when it exists)")
      ->check(checkpoint_name());
  samp->add_option("--mask-heads", o->mask_heads,
                   "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  samp->add_option("--init-from", o->init_from, "Weights from a safetensors file instead of the run's")
      ->type_name("FILE");
  samp->footer(
      "\nExample:\n  tfm sample --run runs/shakespeare_char --prompt \"ROMEO:\" --temperature 0.8 --top-k "
      "40\n");
  return {{samp, [o] { return sample_command(*o); }}};
}

}  // namespace tfm::cli
