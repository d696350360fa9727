// What the encoder objectives' models do at inference: `tfm fill-mask` (masked_lm) and
// `tfm translate` (seq2seq).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "tfm/error.h"
#include "tfm/objective.h"
#include "tfm/platform.h"
#include "tfm/trainer.h"

namespace tfm::cli {
namespace {

struct FillMaskOptions {
  std::string run, which, text;
  int64_t top_k = 5;
  bool json = false;
};

int fill_mask_command(const FillMaskOptions& o) {
  if (o.top_k < 1) throw ConfigError("--top-k: expected an integer >= 1, got " + std::to_string(o.top_k));
  const std::string which = o.which.empty() ? (std::filesystem::exists(o.run + "/best.ckpt") ? "best" : "last") : o.which;
  LoadedRun run = load_run(o.run, which);
  platform::configure_threads(static_cast<int>(run.config.integer("train.threads")));
  if (o.top_k > run.objective->tokenizer().size())
    throw ConfigError("--top-k: expected at most the vocabulary's " + std::to_string(run.objective->tokenizer().size()) +
                      " tokens, got " + std::to_string(o.top_k));
  const FillMaskResult r = fill_mask(*run.objective, o.text, o.top_k);
  if (o.json) {
    nlohmann::json out = {{"text", o.text}, {"masks", nlohmann::json::array()}};
    for (const MaskCandidates& m : r.masks) {
      nlohmann::json c = nlohmann::json::array();
      for (const auto& [token, p] : m.candidates) c.push_back({{"token", token}, {"probability", p}});
      out["masks"].push_back({{"position", m.position}, {"candidates", c}});
    }
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  const Tokenizer& tok = run.objective->tokenizer();
  for (size_t i = 0; i < r.masks.size(); ++i) {
    const MaskCandidates& m = r.masks[i];
    // The mask in its context: up to 12 tokens each side, the mask shown as [MASK].
    std::string left, right;
    for (int64_t p = std::max<int64_t>(0, m.position - 12); p < m.position; ++p)
      left += r.tokens[p] < tok.size() ? tok.decode(r.tokens[p]) : kMaskToken;
    for (int64_t p = m.position + 1; p < std::min<int64_t>(static_cast<int64_t>(r.tokens.size()), m.position + 13); ++p)
      right += r.tokens[p] < tok.size() ? tok.decode(r.tokens[p]) : kMaskToken;
    std::printf("mask %zu (token %ld): %s%s%s\n", i + 1, static_cast<long>(m.position), left.c_str(), kMaskToken,
                right.c_str());
    for (const auto& [token, p] : m.candidates) {
      std::string shown = token == "\n" ? "\\n" : token == " " ? "' '" : token;
      std::printf("  %-8s %6.2f%%  %s%s%s\n", shown.c_str(), 100.0 * p, left.c_str(), token == "\n" ? "\\n" : token.c_str(),
                  right.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_objective_commands(CLI::App& app) {
  std::vector<Command> out;
  auto fm = std::make_shared<FillMaskOptions>();
  auto* f = app.add_subcommand("fill-mask", "Fill each [MASK] of a text with a masked_lm run's top-k candidates");
  f->add_option("--run", fm->run, "Run directory of a masked_lm run")->type_name("DIR")->required();
  f->add_option("--text", fm->text, "Text with one or more [MASK] (each is one token: a character for the char tokenizer)")
      ->required();
  f->add_option("--top-k", fm->top_k, "Candidates per mask")->capture_default_str();
  f->add_option("--checkpoint", fm->which, "last or best (default: best when it exists)");
  f->add_flag("--json", fm->json, "Print one JSON object: per mask its position and candidates with probabilities");
  f->footer(
      "\nExample:\n  tfm fill-mask --run runs/shakespeare_mlm --text \"To be, or not to b[MASK], that is the "
      "question\" --top-k 5\n");
  out.push_back({f, [fm] { return fill_mask_command(*fm); }});
  return out;
}

}  // namespace tfm::cli
