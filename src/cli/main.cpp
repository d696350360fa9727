// The tfm command line: main() registers every command family (one file each in src/cli/, declared in
// cli.h) and is the one place that turns the library's typed errors into exit statuses.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/training/distributed.h"

namespace {

using namespace tfm;

using cli::kExitBadInput;
using cli::kExitDiverged;
using cli::kExitInternal;
using cli::kExitOk;

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
  tfm data prepare --config configs/shakespeare_char.json   # tokenize the corpus into its cache now
  tfm heads --run runs/shakespeare_char                 # what each attention head is worth
  tfm sweep --config configs/shakespeare_char.json --set model.n_kv_heads=null --grid model.n_heads=1,2,4,8
  tfm config --config configs/shakespeare_char.json --set model.n_layers=6
  tfm config --keys          # every config key with its default, allowed values and meaning

A run directory holds config.json, last.ckpt, best.ckpt, train.log and metrics.jsonl.
Exit status: 0 done (or interrupted and checkpointed), 1 internal error or a failed
             check (tfm gradcheck: a gradient above the tolerance, a bug in tfm),
             2 bad config, argument or file, 3 training stopped on a NaN/Inf
             (tfm sweep: at one of its points; the others trained and were recorded).
)";

void print_error(const std::string& what) {
  // Multi-line errors (several bad keys) keep one problem per line.
  std::string msg = what;
  size_t pos = 0;
  while ((pos = msg.find('\n', pos)) != std::string::npos) msg.replace(pos, 1, "\n           "), pos += 12;
  std::fprintf(stderr, "tfm: error: %s\n", msg.c_str());
}

// The deepest command the parser entered ("tfm sample": its App), and its name as typed.
CLI::App* parsed_command(CLI::App& app, std::string& name) {
  CLI::App* cmd = &app;
  name = "tfm";
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (CLI::App* sub : cmd->get_subcommands())
      if (sub->parsed()) {
        cmd = sub, name += " " + sub->get_name(), deeper = true;
        break;
      }
  }
  return cmd;
}

// The closest of `names` to `word` within two edits (a typo), "" when none is; `ignored_prefix`
// characters ('-') are left out of the comparison, and with `under_half` an edit must change fewer
// than half of the word's letters (--temp is not --help).
std::string closest(const std::string& word, const std::vector<std::string>& names, bool under_half = false,
                    const char* ignored_prefix = "") {
  const auto letters = [&](const std::string& s) {
    const size_t start = s.find_first_not_of(ignored_prefix);
    return start == std::string::npos ? std::string() : s.substr(start);
  };
  const std::string w = letters(word);
  std::string best;
  size_t best_d = 3;
  for (const std::string& n : names)
    if (const size_t d = edit_distance(w, letters(n)); d < best_d && (!under_half || 2 * d < w.size()))
      best = n, best_d = d;
  return best;
}

// Other tools' spellings of tfm's flags, for the suggestion alone (tfm accepts none of them): llama.cpp's
// llama-cli, Hugging Face generate()'s arguments (with dashes: underscores are read as dashes) and the
// OpenAI API's max_tokens. A spelling may name a flag only some commands have.
const std::pair<std::string_view, std::string_view> kOtherSpellings[] = {
    {"-n", "--max-new-tokens"},
    {"--n-predict", "--max-new-tokens"},
    {"--max-tokens", "--max-new-tokens"},
    {"--max-length", "--max-new-tokens"},
    {"-p", "--prompt"},
    {"-f", "--prompt-file"},
    {"--file", "--prompt-file"},
    {"--temp", "--temperature"},
    {"--repeat-penalty", "--repetition-penalty"},
    {"--num-return-sequences", "--num-samples"},
    {"-r", "--stop"},
    {"--reverse-prompt", "--stop"},
    {"--stop-strings", "--stop"},
    {"-i", "--interactive"},
    {"-s", "--seed"},
    {"-t", "--threads"},
    {"-m", "--run"},
    {"--model", "--run"},
};

// What an unknown flag of a command was likely meant to be among its `flags`, "" when none is near: the
// flag another tool spells so (kOtherSpellings), else the flag it begins ("--top-k or --top-p" when it
// begins two or three), else one within two edits that change fewer than half its letters (--promt:
// --prompt; --temp is not --help). Underscores are read as dashes (--top_k: --top-k). One function for
// every command.
std::string suggested_flag(const std::string& typed, const std::vector<std::string>& flags) {
  std::string word = typed;
  std::replace(word.begin(), word.end(), '_', '-');
  const auto has = [&](std::string_view f) {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  };
  if (has(word)) return word;
  for (const auto& [other, ours] : kOtherSpellings)
    if (word == other && has(ours)) return std::string(ours);
  std::vector<std::string> begun;
  if (word.size() > 2 && word.rfind("--", 0) == 0)
    for (const std::string& f : flags)
      if (f.rfind(word, 0) == 0) begun.push_back(f);
  if (!begun.empty() && begun.size() <= 3) {
    std::string list;
    for (size_t i = 0; i < begun.size(); ++i)
      list += (i == 0 ? "" : i + 1 == begun.size() ? " or " : ", ") + begun[i];
    return list;
  }
  if (word.find_first_not_of('-') == std::string::npos) return "";
  return closest(word, flags, true, "-");
}

// CLI11's parse errors as tfm's own: "tfm: error: ..." on stderr, what a mistyped command or flag
// was likely meant to be, and where the command's help is. --help, --help-all and --version are not
// errors: CLI11 prints them.
int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  std::string name;
  CLI::App* cmd = parsed_command(app, name);
  const std::vector<std::string> extra = cmd->remaining();
  std::vector<std::string> commands, flags;
  for (const CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; }))
    commands.push_back(sub->get_name());
  for (const CLI::Option* opt : cmd->get_options())
    for (const std::string& l : opt->get_lnames()) flags.push_back("--" + l);
  // What CLI11 left over, in the order typed: each unknown flag named with what it was likely meant to
  // be, the word after one taken as its value (`--temp 0.5`), any other word not expected.
  std::vector<std::string> unknown, words;
  const auto is_number = [](const std::string& a) {
    char* end = nullptr;
    std::strtod(a.c_str(), &end);
    return !a.empty() && *end == '\0';
  };
  bool value_may_follow = false;
  for (const std::string& a : extra) {
    const bool flag = a.size() > 1 && a[0] == '-' && !is_number(a);
    // A word after an unknown flag is its value, unless this command takes commands and the word is
    // near one of them (`tfm --foo trian`: the mistyped command is what to say).
    if (value_may_follow && !flag && (commands.empty() || closest(a, commands).empty())) {
      value_may_follow = false;
      continue;
    }
    value_may_follow = false;
    const std::string typed = a.substr(0, a.find('='));
    if (!flag) {
      words.push_back(a);
    } else if (std::find(flags.begin(), flags.end(), typed) == flags.end()) {
      const std::string s = suggested_flag(typed, flags);
      const std::string clause =
          typed + " is not a flag of " + name + (s.empty() ? "" : " (did you mean " + s + "?)");
      if (std::find(unknown.begin(), unknown.end(), clause) == unknown.end()) unknown.push_back(clause);
      value_may_follow = typed.size() == a.size();
    }
  }
  std::string msg;
  if (!commands.empty() && !words.empty()) {
    std::string list;
    for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
    const std::string s = closest(words[0], commands);
    msg = name + ": unknown command \"" + words[0] + "\"" + (s.empty() ? "" : " (did you mean " + s + "?)") +
          "; the commands: " + list;
    for (const std::string& u : unknown) msg += "; " + u;
  } else if (const std::string what = e.what();
             what.find(": At Most 1 required but received ") != std::string::npos) {
    // CLI11's words for a one-value flag given more than once.
    msg = name + ": " + what.substr(0, what.find(": At Most")) + ": given " +
          what.substr(what.rfind(' ') + 1) + " times; it takes one value";
  } else {
    // The unknown flags first; CLI11's list of what was left over (in reverse order) says no more.
    std::vector<std::string> parts = unknown;
    if (!words.empty()) {
      std::string list;
      for (const std::string& w : words) list += (list.empty() ? "" : " ") + w;
      parts.push_back(std::string(words.size() == 1 ? "an argument" : "arguments") +
                      " not expected: " + list);
    }
    if (!dynamic_cast<const CLI::ExtrasError*>(&e) || parts.empty()) parts.push_back(e.what());
    msg = name + ":";
    for (size_t i = 0; i < parts.size(); ++i) msg += (i == 0 ? " " : "; ") + parts[i];
  }
  print_error(msg + "\n`" + name + " --help` shows its usage, with examples");
  return kExitBadInput;
}

}  // namespace

static int run_cli(int argc, char** argv) {
  CLI::App app{
      "tfm: train a small Transformer (decoder-only language model, masked-LM encoder or encoder-decoder "
      "translator), evaluate it, and sample, fill masks or translate with it."};
  app.footer(kExamples);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  app.set_version_flag("--version", std::string("tfm ") + TFM_VERSION);

  // Every command family registers its subcommands (cli.h); the first five are the everyday ones.
  std::vector<cli::Command> commands;
  for (auto add : {cli::add_train_commands, cli::add_eval_commands, cli::add_sample_commands,
                   cli::add_info_commands, cli::add_config_commands, cli::add_bench_commands,
                   cli::add_insight_commands, cli::add_objective_commands, cli::add_gradcheck_commands,
                   cli::add_heads_commands, cli::add_sweep_commands, cli::add_data_commands,
                   cli::add_plot_commands, cli::add_runs_commands, cli::add_board_commands})
    for (cli::Command& c : add(app)) commands.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  }

  std::string command;
  try {
    for (const cli::Command& c : commands)
      if (c.app->parsed()) {
        for (const CLI::App* a = c.app; a->get_parent(); a = a->get_parent())  // "bench gemm"
          command = a->get_name() + (command.empty() ? "" : " " + command);
        return c.run();
      }
  } catch (const ConfigError& e) {
    print_error(e.what());
    return kExitBadInput;
  } catch (const IoError& e) {
    print_error(e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    // The pre-flight refuses sizes that cannot fit and the commands name the sizes of their large
    // allocations (cli::sized_by): a failure that gets here was foreseen by neither.
    print_error("internal error: out of memory in tfm " + command +
                ", in an allocation no size check foresaw (tfm info estimates a config's memory); please "
                "report it");
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
  try {
    tfm::dist::init(&argc, &argv);
  } catch (const IoError& e) {  // mpirun, but no MPI plugin
    print_error(e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitInternal;
  }
  const int status = run_cli(argc, argv);
  // An error on one rank (the others may wait in a collective) ends the whole job. A NaN stop is
  // seen by every rank at the same step (the loss and gradients are global), so it finalizes.
  if (status != kExitOk && status != kExitDiverged && tfm::dist::active()) tfm::dist::abort(status);
  tfm::dist::finalize();
  return status;
}
