// What the encoder objectives' models do at inference: `tfm fill-mask` (masked_lm) and
// `tfm translate` (seq2seq).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/objectives/bleu.h"
#include "tfm/objectives/inference.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

struct FillMaskOptions {
  std::string run, which, text;
  int64_t top_k = 5, threads = 0;
  bool json = false;
};

int fill_mask_command(const FillMaskOptions& o) {
  LoadedRun run = read_run(o.run, o.which, false, o.threads);
  if (o.top_k > run.objective->tokenizer().size())
    throw ConfigError("--top-k: expected at most the vocabulary's " +
                      std::to_string(run.objective->tokenizer().size()) + " tokens, got " +
                      std::to_string(o.top_k));
  const FillMaskResult r = fill_mask(*run.objective, o.text, o.top_k);
  if (o.json) {
    nlohmann::json out = {{"text", o.text}, {"masks", nlohmann::json::array()}};
    for (const MaskCandidates& m : r.masks) {
      nlohmann::json c = nlohmann::json::array();
      for (const auto& [token, p] : m.candidates) c.push_back({{"token", token}, {"probability", p}});
      out["masks"].push_back({{"position", m.position}, {"candidates", c}});
    }
    fmt::print("{}\n", out.dump().c_str());
    return kExitOk;
  }
  const Tokenizer& tok = run.objective->tokenizer();
  for (size_t i = 0; i < r.masks.size(); ++i) {
    const MaskCandidates& m = r.masks[i];
    // The mask in its context: up to 12 tokens each side, the mask shown as [MASK].
    std::string left, right;
    for (int64_t p = std::max<int64_t>(0, m.position - 12); p < m.position; ++p)
      left += r.tokens[p] < tok.size() ? tok.decode(r.tokens[p]) : kMaskToken;
    for (int64_t p = m.position + 1;
         p < std::min<int64_t>(static_cast<int64_t>(r.tokens.size()), m.position + 13); ++p)
      right += r.tokens[p] < tok.size() ? tok.decode(r.tokens[p]) : kMaskToken;
    fmt::print("mask {} (token {}): {}{}{}\n", i + 1, m.position, left.c_str(), kMaskToken, right.c_str());
    for (const auto& [token, p] : m.candidates) {
      std::string shown = token == "\n" ? "\\n" : token == " " ? "' '" : token;
      fmt::print("  {:<8} {:6.2f}%  {}{}{}\n", shown.c_str(), 100.0 * p, left.c_str(),
                 token == "\n" ? "\\n" : token.c_str(), right.c_str());
    }
  }
  return kExitOk;
}

struct TranslateCliOptions {
  std::string run, which;
  std::vector<std::string> texts, references;
  int64_t beam = 1, max_len = 0, threads = 0;
  double alpha = 0.0;
  std::string penalty = "gnmt";
  bool json = false;
};

// Refuses a beam whose search cannot fit, before it allocates: `sources` sentences at a time, each of
// at most the model's context, beam hypotheses each.
void check_beam_memory(Objective& objective, int64_t sources, int64_t beam) {
  const ModelConfig& mc = dynamic_cast<const Seq2SeqModel&>(objective.model()).config();
  check_flag_memory(estimate_translation_memory(mc, sources, beam, mc.max_seq_len, mc.max_seq_len),
                    "translate");
}

// Lines of stdin, translated as they come (a batch of one per line, so the output streams). A line
// that cannot be read (invalid UTF-8) is skipped with a warning naming it and an empty line (--json: an
// error record) in its place, so the output stays line for line with the input; the command then
// exits 2 naming every skipped line.
int translate_command(const TranslateCliOptions& o) {
  if (!o.references.empty() && o.references.size() != o.texts.size())
    throw ConfigError("--reference: " + std::to_string(o.references.size()) + " given for " +
                      std::to_string(o.texts.size()) + " --text (one reference per text, in order)");
  LoadedRun run = read_run(o.run, o.which, false, o.threads);
  TranslateOptions t;
  t.beam = o.beam;
  t.max_len = o.max_len;
  t.alpha = static_cast<float>(o.alpha);
  t.penalty = o.penalty == "power" ? LengthPenalty::Power : LengthPenalty::Gnmt;
  // stdout carries the translations alone, one line per input, so the command pipes; the rest
  // (references, BLEU) goes to stderr.
  auto emit = [&](const std::string& text, const std::string& out, const std::string* reference) {
    if (o.json) {
      nlohmann::json j = {{"source", text}, {"translation", out}};
      if (reference) {
        const Tokens hyp = Tokenizer::split_words(out, "translation"),
                     ref = Tokenizer::split_words(*reference, "--reference");
        j["reference"] = *reference;
        j["bleu"] = sentence_bleu(hyp, ref).score;
        j["d2l_bleu"] = d2l_bleu(hyp, ref, 2);
      }
      fmt::print("{}\n", j.dump().c_str());
    } else {
      fmt::print("{}\n", out.c_str());
      if (reference) {
        const Tokens hyp = Tokenizer::split_words(out, "translation"),
                     ref = Tokenizer::split_words(*reference, "--reference");
        fmt::print(stderr, "{} => {}, bleu {:.3f} (d2l, k = 2; reference: {})\n", text.c_str(), out.c_str(),
                   d2l_bleu(hyp, ref, 2), reference->c_str());
      }
    }
    std::fflush(stdout);
  };
  translate_texts(*run.objective, {}, t);  // the run and the options, before any text is read
  const std::string beam_flag = "--beam = " + std::to_string(o.beam);
  // The translations, and a warning for each source cut to data.max_source_len or read with <unk>.
  const auto translate = [&](const std::vector<std::string>& texts, const std::string& source) {
    std::vector<std::string> warnings;
    std::vector<std::string> out =
        sized_by(beam_flag, [&] { return translate_texts(*run.objective, texts, t, source, &warnings); });
    for (const std::string& c : warnings) fmt::print(stderr, "tfm: warning: {}\n", c.c_str());
    return out;
  };
  if (!o.texts.empty()) {
    check_beam_memory(*run.objective, static_cast<int64_t>(o.texts.size()), o.beam);
    const std::vector<std::string> out = translate(o.texts, "--text");
    for (size_t i = 0; i < out.size(); ++i)
      emit(o.texts[i], out[i], o.references.empty() ? nullptr : &o.references[i]);
    return kExitOk;
  }
  check_beam_memory(*run.objective, 1, o.beam);
  std::string line, skipped;
  int64_t n_skipped = 0;
  for (int64_t number = 1; std::getline(std::cin, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {  // an empty translation, as for --text "" (a JSON record with --json)
      emit(line, "", nullptr);
      continue;
    }
    const std::string source = "stdin line " + std::to_string(number);
    std::string out;
    try {
      out = translate({line}, source)[0];
    } catch (const IoError& e) {  // the line's own fault (invalid UTF-8): the others still translate
      fmt::print(stderr, "tfm: warning: {}; skipped ({})\n", e.what(),
                 o.json ? "an error record stands for it" : "an empty line stands for it");
      if (o.json)
        fmt::print("{}\n", nlohmann::json({{"line", number}, {"error", e.what()}}).dump());
      else
        fmt::print("\n");
      std::fflush(stdout);
      skipped += (n_skipped++ ? ", " : "") + std::to_string(number);
      continue;
    }
    emit(line, out, nullptr);
  }
  if (n_skipped > 0)
    throw IoError("stdin: " + std::to_string(n_skipped) + " line(s) could not be translated (line " +
                  skipped + "; each has " + (o.json ? "an error record" : "an empty line") +
                  " in the output, the other lines are translated)");
  return kExitOk;
}

}  // namespace

std::vector<Command> add_objective_commands(CLI::App& app) {
  std::vector<Command> out;
  auto fm = std::make_shared<FillMaskOptions>();
  auto* f =
      app.add_subcommand("fill-mask", "Fill each [MASK] of a text with a masked_lm run's top-k candidates");
  f->add_option("--run", fm->run, "Run directory of a masked_lm run")->type_name("DIR")->required();
  f->add_option("--text", fm->text,
                "Text with one or more [MASK] (each is one token: a character for the char tokenizer)")
      ->required();
  f->add_option("--top-k", fm->top_k, "Candidates per mask (at most the vocabulary)")
      ->capture_default_str()
      ->check(integer_in(1, kMaxFlagCount));
  add_checkpoint_option(f, fm->which);
  add_threads_option(f, fm->threads);
  f->add_flag(
      "--json", fm->json,
      "Print one JSON object: per mask its position and candidates with probabilities (a softmax over "
      "the ordinary tokens: [MASK] and the other special tokens are never an answer, so the model's "
      "probabilities are divided by 1 - theirs)");
  f->footer(
      "\nExample:\n  tfm fill-mask --run runs/shakespeare_mlm --text \"To be, or not to b[MASK], that is the "
      "question\" --top-k 5\n");
  out.push_back({f, [fm] { return fill_mask_command(*fm); }});

  auto to = std::make_shared<TranslateCliOptions>();
  auto* t =
      app.add_subcommand("translate", "Translate with a seq2seq run: --text arguments, or lines on stdin");
  t->add_option("--run", to->run, "Run directory of a seq2seq run")->type_name("DIR")->required();
  t->add_option("--text", to->texts, "A source sentence (repeatable); without --text, each line of stdin")
      ->type_name("TEXT");
  t->add_option(
       "--reference", to->references,
       "The expected translation of each --text, in order: stderr shows d2l's BLEU (k = 2) per sentence")
      ->type_name("TEXT");
  t->add_option("--beam", to->beam,
                "Beam width (1 = greedy; refused before it starts when the search cannot fit in memory)")
      ->capture_default_str()
      ->check(integer_in(1, kMaxFlagCount));
  t->add_option("--length-penalty", to->alpha,
                "alpha: beam scores are log-probability sums / penalty(len)^alpha (0 = none)")
      ->capture_default_str()
      ->check(number_in(0, 10));
  t->add_option("--penalty", to->penalty, "gnmt: ((5 + len) / 6)^alpha (Wu et al. 2016); power: len^alpha")
      ->capture_default_str()
      ->check(one_of({"gnmt", "power"}));
  t->add_option("--max-len", to->max_len,
                "Most tokens generated per sentence, 0 to the model's max_seq_len (0 = the run's "
                "data.max_target_len + 1)")
      ->check(integer_in(0, kMaxFlagCount));
  add_checkpoint_option(t, to->which);
  add_threads_option(t, to->threads);
  t->add_flag(
      "--json", to->json,
      "One JSON object per line: source, translation, and with --reference: reference, bleu "
      "(sacreBLEU's sentence_bleu, 0-100: exp smoothing, effective order) and d2l_bleu (d2l's, k = 2, "
      "0-1)");
  t->footer(
      "\nExamples:\n  tfm translate --run runs/eng_fra_d2l --text \"go .\" --text \"i lost .\"\n"
      "  tfm translate --run runs/eng_fra --beam 4 --length-penalty 0.6 < sentences.txt > out.txt\n"
      "  tfm translate --run runs/eng_fra_d2l --text \"go .\" --reference \"va !\"\n"
      "stdout holds one line per input, the translation alone (detokenized), so it pipes. A stdin line that\n"
      "is not valid UTF-8 is skipped with a warning naming it (an empty line stands for it) and the\n"
      "command exits 2 once the rest is translated.\n");
  out.push_back({t, [to] { return translate_command(*to); }});
  return out;
}

}  // namespace tfm::cli
