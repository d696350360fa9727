// `tfm sample`: text from a causal_lm run, streamed as it is generated; several samples, stop strings,
// a prompt file, JSON records with log-probabilities, and an interactive loop over stdin.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli.h"
#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/platform.h"
#include "tfm/models/sampling.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

// Largest --prompt-file read (a prompt longer than any context is cut to the context anyway).
constexpr uint64_t kMaxPromptFileBytes = uint64_t{1} << 26;

struct SampleCliOptions {
  std::string run, which, init_from, mask_heads, prompt_file;
  int64_t num_samples = 1, threads = 0;
  bool json = false, interactive = false, ignore_eos = false;
  SampleOptions sample;
};

// A sampling flag checked against its option's range in the library (sampling.h's
// sample_option_range, which generate() checks too), named by the flag: "--top-p: expected a number in
// (0, 1], got \"0\"". An integer option's value is read as one (a value past int64_t is refused here,
// not by CLI11's conversion).
CLI::Validator sample_flag(SampleOption option) {
  const SampleRange range = sample_option_range(option);
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = range.integer ? static_cast<double>(std::strtoll(text.c_str(), &end, 10))
                                       : std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !range.allows(v))
          return "expected " + range.expected() + ", got \"" + text + "\"";
        return "";
      },
      std::string(range.integer ? "INT" : "NUMBER") +
          (std::isinf(range.hi) ? " (" + range.bounds() + ")" : " in " + range.bounds()));
}

// The character an escape's letter stands for (\n, \t, \r, \\, \", \'), 0 for a letter that is none.
char escaped_character(char letter) {
  switch (letter) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case '\\':
      return '\\';
    case '"':
      return '"';
    case '\'':
      return '\'';
    default:
      return 0;
  }
}

// A hexadecimal digit's value, -1 for another character.
int hex_digit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

// The escapes --prompt and --stop read, so that a newline can be typed: llama.cpp's -p reads the same,
// \n (newline), \t (tab), \r (carriage return), \\ (a backslash), \" and \' (quotes) and \xNN (the
// byte of two hex digits); any other backslash stays as it is. A prompt file, a line of --interactive's
// stdin and the board's JSON strings are taken as they are.
std::string read_escapes(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (text[i] == '\\' && escaped_character(next) != 0) {
      out += escaped_character(next);
      ++i;
    } else if (text[i] == '\\' && next == 'x' && i + 3 < text.size() && hex_digit(text[i + 2]) >= 0 &&
               hex_digit(text[i + 3]) >= 0) {
      out += static_cast<char>(hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]));
      i += 3;
    } else {
      out += text[i];
    }
  }
  return out;
}

// A flag's value read through read_escapes; `if_empty`, when not "", refuses an empty one.
CLI::Validator escapes(const std::string& if_empty = "") {
  return CLI::Validator(
      [if_empty](std::string& text) -> std::string {
        std::string out = read_escapes(text);
        if (out.empty() && !if_empty.empty()) return if_empty;
        text = std::move(out);
        return "";
      },
      "");  // the option names its type (STR, TEXT) already
}

// The samples of one prompt, drawn from one generator seeded with --seed (sample 1 is what a single
// sample with that seed gives): printed as text streamed after the prompt, or one JSON line each (its
// prompt in it). As text, each sample is headed by a line "--- LABEL, sample 2 of 3 ---" when there is
// a label (the interactive loop's "stdin line 4") or several samples. `echo_prompt`: the prompt is
// printed before its continuation (not when the user just typed it on the same terminal). `stdin_line`:
// the interactive loop's line number (> 0), which each JSON record carries as "line". Text is written
// as bytes: a \x00 of --prompt, or a byte vocabulary's NUL, does not end it.
void print_samples(LoadedRun& run, const SampleCliOptions& cli, const std::string& prompt,
                   const std::string& label, bool echo_prompt, int64_t stdin_line = 0) {
  const auto print = [](const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); };
  SampleOptions o = cli.sample;
  o.prompt = prompt;
  o.stop_at_end_of_text = !cli.ignore_eos;
  Rng rng(o.seed);
  for (int64_t i = 0; i < cli.num_samples; ++i) {
    if (cli.json) {
      const Generation g = generate(*run.model, run.checkpoint.tokenizer, o, rng, {}, true);
      double total = 0.0;
      for (const double lp : g.logprobs) total += lp;
      const nlohmann::json stop = g.stopped_at.empty() ? nlohmann::json() : nlohmann::json(g.stopped_at);
      nlohmann::json record = {{"prompt", prompt},
                               {"prompt_token_ids", g.prompt_tokens},
                               {"sample", i + 1},
                               {"seed", o.seed},
                               {"text", g.text},
                               {"token_ids", g.tokens},
                               {"logprobs", g.logprobs},
                               {"logprob", total},
                               {"stop", stop}};
      if (stdin_line > 0) record["line"] = stdin_line;  // which prompt: a line skipped as bad leaves a gap
      // A byte-level BPE token may end inside a character: such bytes become U+FFFD in the JSON.
      std::printf("%s\n", record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      std::fflush(stdout);
      continue;
    }
    std::string header = label;
    if (cli.num_samples > 1)
      header += (header.empty() ? "" : ", ") + std::string("sample ") + std::to_string(i + 1) + " of " +
                std::to_string(cli.num_samples);
    if (!header.empty()) std::printf("--- %s ---\n", header.c_str());
    if (echo_prompt) print(prompt);
    generate(
        *run.model, run.checkpoint.tokenizer, o, rng,
        [&](const std::string& piece) {
          print(piece);
          std::fflush(stdout);
        },
        false);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }
}

int sample_command(const SampleCliOptions& cli) {
  const std::string& dir = cli.run;
  const SampleOptions& o = cli.sample;
  std::string prompt = o.prompt, prompt_source = "--prompt";
  if (!cli.prompt_file.empty()) {
    prompt = text_file_contents(read_file(cli.prompt_file, kMaxPromptFileBytes));  // as a corpus is read
    prompt_source = "--prompt-file " + cli.prompt_file;
  }
  LoadedRun run = read_run(dir, cli.which, false, cli.threads);
  const ObjectiveCapabilities can = run.objective->capabilities();
  if (can.inference != Inference::Sample)
    throw ConfigError("sample: " + dir + " was trained with train.objective \"" + run.objective->name() +
                      "\"; sampling continues text, which needs a causal_lm run (for " +
                      run.objective->name() + ": " + can.inference_command + ")");
  if (!cli.init_from.empty()) {
    for (const std::string& note :
         load_safetensors_into(*run.model, cli.init_from, &run.checkpoint, run.checkpoint_path, &run.config))
      std::fprintf(stderr, "tfm: warning: %s\n", note.c_str());
    std::fprintf(stderr, "tfm: weights from %s (--init-from), the run's config and tokenizer\n",
                 cli.init_from.c_str());
  }
  apply_head_mask(run, cli.mask_heads);
  const Tokenizer& tokenizer = run.checkpoint.tokenizer;
  // A bad prompt is refused (encode_prompt throws) before anything is printed; a long one is said to be
  // cut.
  const auto check_prompt = [&](const std::string& text, const std::string& source) {
    const auto prompt_tokens = static_cast<int64_t>(encode_prompt(tokenizer, text, source).size());
    const int64_t L = run.model->config().max_seq_len;
    if (prompt_tokens > L)
      std::fprintf(stderr,
                   "tfm: note: the prompt (%s) is %lld tokens and the model reads at most %lld "
                   "(model.max_seq_len): it continues from the prompt's last %lld\n",
                   source.c_str(), static_cast<long long>(prompt_tokens), static_cast<long long>(L),
                   static_cast<long long>(L));
  };
  if (!cli.interactive) {
    check_prompt(prompt, prompt_source);
    print_samples(run, cli, prompt, "", true);
    return kExitOk;
  }
  // One prompt per line until EOF; a line the vocabulary cannot encode is reported and skipped. Each
  // answer is printed as --prompt's is, the prompt echoed before its text, under a line naming the stdin
  // line, so that piped prompts can be matched to their answers; a prompt typed on the terminal the
  // answer goes to is on screen already and is not echoed.
  const bool typed_on_screen = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  int status = kExitOk;
  std::string line;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    try {
      check_prompt(line, "stdin line " + std::to_string(n));
    } catch (const Error& e) {  // ConfigError or IoError: the line is not text the vocabulary holds
      std::fprintf(stderr, "tfm: error: %s\n", e.what());
      status = kExitBadInput;
      continue;
    }
    print_samples(run, cli, line, "stdin line " + std::to_string(n), !typed_on_screen, n);
  }
  return status;
}

}  // namespace

std::vector<Command> add_sample_commands(CLI::App& app) {
  auto o = std::make_shared<SampleCliOptions>();
  o->sample.temperature = 0.8;
  o->sample.top_k = 0;
  SampleOptions& s = o->sample;
  auto* samp = app.add_subcommand("sample", "Generate text from a trained run (streams as it goes)");
  samp->add_option("--run", o->run, "Run directory")->type_name("DIR")->required();
  auto* prompt = samp->add_option("--prompt", s.prompt,
                                  "Text to continue, with llama.cpp's escapes, as --stop's: \\n, \\t, \\r, "
                                  "\\\", \\', \\xNN, \\\\ "
                                  "for a backslash; <|endoftext|> is the end-of-text token when the "
                                  "vocabulary has one (default: that token, else a newline)")
                     ->transform(escapes());
  auto* prompt_file =
      samp->add_option(
              "--prompt-file", o->prompt_file,
              "Continue the text of FILE (all of it, newlines kept; CRLF read as LF, a byte order mark "
              "dropped, as corpora are read; no escapes: a backslash is one)")
          ->type_name("FILE")
          ->excludes(prompt);
  samp->add_flag("--interactive", o->interactive,
                 "Read prompts from stdin, one a line (as typed: no escapes), until EOF: each one's text is "
                 "streamed under a line \"--- stdin line N ---\", the prompt echoed as --prompt's is (not "
                 "when typed on this terminal); with --json, one line a sample, its prompt in it")
      ->excludes(prompt)
      ->excludes(prompt_file);
  samp->add_option("--max-new-tokens", s.max_new_tokens, "Tokens to generate per sample")
      ->capture_default_str()
      ->check(integer_in(0, kMaxFlagCount));
  samp->add_option("--num-samples", o->num_samples,
                   "Samples per prompt, drawn one after another from the same seeded generator")
      ->capture_default_str()
      ->check(integer_in(1, 100000));
  samp->add_option("--temperature", s.temperature, "Softmax temperature (0 = greedy)")
      ->capture_default_str()
      ->check(sample_flag(SampleOption::Temperature));
  samp->add_option("--top-k", s.top_k,
                   "Sample among the k most likely tokens (0 = all; a k at or above the vocabulary keeps all "
                   "too, as in Hugging Face and llama.cpp)")
      ->capture_default_str()
      ->check(sample_flag(SampleOption::TopK));
  samp->add_option("--top-p", s.top_p,
                   "Nucleus: the fewest most likely tokens whose probabilities reach P, ties kept (1 = all)")
      ->capture_default_str()
      ->check(sample_flag(SampleOption::TopP));
  samp->add_option("--min-p", s.min_p, "Drop tokens less likely than MIN_P times the most likely (0 = none)")
      ->capture_default_str()
      ->check(sample_flag(SampleOption::MinP));
  samp->add_option("--repetition-penalty", s.repetition_penalty,
                   "Divide (multiply when negative) the logit of every token already in the prompt or the "
                   "text generated by this (1 = none; CTRL's 1.2 is common)")
      ->capture_default_str()
      ->check(sample_flag(SampleOption::RepetitionPenalty));
  samp->add_option(
          "--stop", s.stop,
          "End a sample at the first occurrence of STR in its text, STR not printed (repeatable; --prompt's "
          "escapes, \\n for a newline; any other backslash stays as typed)")
      ->type_name("STR")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->transform(escapes("expected a non-empty string (generation stops where it occurs)"));
  samp->add_flag("--ignore-eos", o->ignore_eos,
                 "Draw on past the end-of-text token (the document separator of a multi-document corpus, "
                 "GPT-2's <|endoftext|>) into a next document; by default a sample ends there");
  samp->add_flag("--json", o->json,
                 "One JSON object per sample: prompt, prompt_token_ids, text, token_ids, logprobs (each "
                 "token's under the "
                 "distribution it was drawn from: after penalty, temperature and filters; 0 when greedy), "
                 "their sum logprob, and stop");
  samp->add_option("--seed", s.seed, "Sampling seed (same seed, same text, whatever the thread count)")
      ->capture_default_str()
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  add_threads_option(samp, o->threads);
  add_checkpoint_option(samp, o->which);
  samp->add_option("--mask-heads", o->mask_heads,
                   "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  samp->add_option("--init-from", o->init_from, "Weights from a safetensors file instead of the run's")
      ->type_name("FILE");
  samp->footer(
      "\nThe next token's distribution: repetition penalty -> temperature -> top-k -> top-p -> min-p (the\n"
      "order of Hugging Face's generate), renormalised; computed in double, so a seed gives the same text\n"
      "whatever the thread count. A sample ends at --max-new-tokens, a --stop string or the end-of-text\n"
      "token. Past the model's context (model.max_seq_len), generation goes on from the newest half of it,\n"
      "as llama.cpp's context shift does (docs/sampling.md). llama.cpp's and Hugging Face's spellings\n"
      "(-n, --temp, --repeat-penalty, --max_new_tokens) are not flags: the error names tfm's.\n"
      "\nExamples:\n"
      "  tfm sample --run runs/shakespeare_char --prompt \"ROMEO:\" --temperature 0.8 --top-k 40\n"
      "  tfm sample --run runs/shakespeare_char --prompt \"JULIET:\\nO Romeo\"   # \\n: a newline, as in "
      "--stop\n"
      "  tfm sample --run runs/shakespeare_char --prompt \"ROMEO:\" --top-p 0.9 --repetition-penalty 1.2 \\\n"
      "      --num-samples 3 --stop \"\\n\\n\"\n"
      "  tfm sample --run runs/shakespeare_char --prompt-file prompt.txt --min-p 0.05 --json\n"
      "  tfm sample --run runs/shakespeare_char --interactive --max-new-tokens 100\n"
      "  tfm sample --run runs/shakespeare_char --interactive --json < prompts.txt   # a JSON line a "
      "prompt\n");
  return {{samp, [o] { return sample_command(*o); }}};
}

}  // namespace tfm::cli
