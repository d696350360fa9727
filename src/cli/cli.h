// The command line's families of commands, one file each (src/cli/<family>.cpp), registered by
// main.cpp: a new command is a new file and one line there.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/tensor.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {

// Exit statuses of every command.
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;  // bad config, argument or file (tfm::ConfigError, tfm::IoError)
constexpr int kExitDiverged = 3;  // training stopped on a NaN/Inf
// tfm gradcheck: a gradient above the tolerance. It shares 1 with internal errors: a wrong gradient is
// a bug in tfm, not in the user's input (the top-level help says so).
constexpr int kExitCheckFailed = 1;

// Upper bound of count flags (--batches, --max-new-tokens, ...): far above any sensible use, far below
// an overflow.
constexpr int64_t kMaxFlagCount = 1000000000;

// A registered subcommand and what runs when the command line selected it (returns the exit status;
// tfm::ConfigError / tfm::IoError thrown from it become status 2 in main).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// Validators for numeric flags, so every one is range- and type-checked like a config key: CLI11
// prefixes the flag ("--batches: expected an integer in [1, 1000000], got \"0\"") and main exits 2.
// A value that may not be empty: `what` says what is expected ("a directory", "an address").
inline CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return text.empty() ? "expected " + what + ", not an empty string" : std::string();
      },
      "");
}
inline CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return "expected an integer in " + range + ", got \"" + text + "\"";
        return "";
      },
      "INT in " + range);
}
inline CLI::Validator number_in(double lo, double hi) {
  auto str = [](double v) {  // shortest form that shows the bound (1e-08, 0.01, 60)
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const std::string range = "[" + str(lo) + ", " + str(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
          return "expected a number in " + range + ", got \"" + text + "\"";
        return "";
      },
      "NUMBER in " + range);
}

// A flag that takes one of a few words: "expected \"erf\", \"tanh\" or \"llama.cpp\", got \"x\"".
inline CLI::Validator one_of(std::vector<std::string> words) {
  std::string expected, shown;
  for (size_t i = 0; i < words.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + ("\"" + words[i] + "\"");
    shown += (i == 0 ? "" : "|") + words[i];
  }
  return CLI::Validator(
      [words, expected](std::string& text) -> std::string {
        if (std::find(words.begin(), words.end(), text) != words.end()) return "";
        return "expected " + expected + ", got \"" + text + "\"";
      },
      shown);
}

// --checkpoint's values: "last" or "best" (not empty: the message would name a ".ckpt").
inline CLI::Validator checkpoint_name() {
  return one_of({"last", "best"});
}

// The --checkpoint flag of every command that reads a run; unset, choose_checkpoint's rule applies
// (run_dir.h: best.ckpt when the run has one, else last.ckpt).
inline CLI::Option* add_checkpoint_option(CLI::App* app, std::string& which) {
  return app
      ->add_option("--checkpoint", which, "last or best (default: best.ckpt when the run has one, else last)")
      ->check(checkpoint_name());
}

// --threads of the commands that run a trained model (read_run's `threads`).
inline CLI::Option* add_threads_option(CLI::App* app, int64_t& threads) {
  return app->add_option("--threads", threads, "Threads for the model (0 = the run's train.threads)")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
}

// load_run, and the one line on stderr that says which checkpoint the command read. The model runs on
// `threads` threads, or the run's train.threads when 0 (load_run).
inline LoadedRun read_run(const std::string& dir, const std::string& which, bool with_data = false,
                          int64_t threads = 0) {
  LoadedRun run = load_run(dir, which, with_data);
  if (threads > 0) platform::configure_threads(static_cast<int>(threads));
  std::fprintf(stderr, "tfm: read %s\n", describe_checkpoint(run.checkpoint_path, run.checkpoint).c_str());
  return run;
}

// f(), with an allocation failure in it reported as the user's input: `sizes` names the flags or keys
// that sized it ("--beam = 8, --max-len = 20"), and the error exits 2 like any refused size. For work
// whose sizes the pre-flight estimates; what it misses still ends named, not as an internal error.
template <class F>
decltype(auto) sized_by(const std::string& sizes, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    throw tfm::ConfigError(sizes +
                           ": out of memory (the allocation these sizes asked for failed); make them "
                           "smaller");
  }
}

std::vector<Command> add_train_commands(CLI::App& app);      // train.cpp: train
std::vector<Command> add_eval_commands(CLI::App& app);       // eval.cpp: eval
std::vector<Command> add_sample_commands(CLI::App& app);     // sample.cpp: sample
std::vector<Command> add_info_commands(CLI::App& app);       // info.cpp: info
std::vector<Command> add_config_commands(CLI::App& app);     // config.cpp: config
std::vector<Command> add_bench_commands(CLI::App& app);      // bench.cpp: bench gemm, bench attention
std::vector<Command> add_insight_commands(CLI::App& app);    // insight.cpp: attention, export, tokenizer
std::vector<Command> add_objective_commands(CLI::App& app);  // objectives.cpp: fill-mask, translate
std::vector<Command> add_gradcheck_commands(CLI::App& app);  // gradcheck.cpp: gradcheck
std::vector<Command> add_heads_commands(CLI::App& app);      // heads.cpp: heads
std::vector<Command> add_sweep_commands(CLI::App& app);      // sweep.cpp: sweep
std::vector<Command> add_data_commands(CLI::App& app);       // data.cpp: data prepare
std::vector<Command> add_runs_commands(CLI::App& app);       // runs.cpp: runs
std::vector<Command> add_board_commands(CLI::App& app);      // board.cpp: board (the server: src/board/)

std::vector<Command> add_plot_commands(CLI::App& app);  // plot.cpp: plot loss, speedrun, report

// The model a config builds, as `tfm info` and `tfm bench gemm --config` size it (info.cpp): through its
// objective (the data's vocabularies; memory-checked before it allocates, the message naming the command
// `what`), or a bare language model when vocab_override > 0 (--vocab-size) or the data is too short for
// the objective's batches (then its vocabulary is the one training would build from the file).
struct ConfigModel {
  std::unique_ptr<Objective> objective;
  std::unique_ptr<LanguageModel> lm;
  std::string vocab_note;  // where the vocabulary size came from
  Model& model() const { return objective ? objective->model() : *lm; }
  // The model's config: vocab_size (an encoder-decoder's target side) and source_vocab_size included.
  const ModelConfig& config() const;
};
ConfigModel build_model(const Config& c, int64_t vocab_override, const std::string& what);

// Writes a figure (SVG text, tfm/analysis/figures.h) to `path` atomically and, unless quiet, prints
// "wrote PATH" (plot.cpp).
void write_figure(const std::string& path, const std::string& svg, bool quiet = false);

// --mask-heads L:H,... (heads.cpp): per layer an (H) gate of ones with 0 at each masked head;
// ConfigError naming the flag on a bad item or an index out of range.
std::vector<tfm::Tensor> parse_head_mask(const std::string& spec, int64_t layers, int64_t heads);
// Sets the gates of --mask-heads on a run's language model (nothing when spec is empty).
void apply_head_mask(tfm::LoadedRun& run, const std::string& spec);

}  // namespace tfm::cli
