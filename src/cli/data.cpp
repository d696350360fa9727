// tfm data prepare: builds a config's token cache ahead of training (docs/data.md), so the first run
// starts as fast as every later one, and says what the corpus costs in tokens. tfm tokenizer encode and
// decode: a config's (or a run's) tokenizer on a text or on ids.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/data/dataset.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/enum_names.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

struct PrepareOptions {
  std::string config;
  std::vector<std::string> sets;
  bool rebuild = false;
  int threads = 0;
};

int run_prepare(const PrepareOptions& o) {
  const Config c = load_config(o.config, o.sets);
  if (c.data().format != DataFormat::Text)
    throw ConfigError(
        "data.format: \"" + name_of(c.data().format) +
        "\" (sentence pairs, seq2seq) is read whole at every start; the token cache is for text "
        "corpora (train.objective causal_lm, masked_lm)");
  const std::string path = c.data().path;
  TokenCacheOptions cache = token_cache_options(c, true);
  cache.rebuild = o.rebuild;
  cache.threads = o.threads;
  // A split too short for one sequence is counted and warned about below, whatever the tokenizer.
  const int64_t seq_len = c.train().seq_len, need = tokens_for_a_sequence(seq_len);
  const Dataset d = load_new_run_text(c, seq_len, cache, ShortSplit::Keep);
  const int64_t n = d.train.size() + d.val.size();
  const double text_bytes = static_cast<double>(d.text_bytes);
  const int width = d.train.width();
  // Bytes of text per token, the tokenizer's measure; the files' size too when it is another number
  // (compressed files, JSON Lines, a byte order mark or CRLF line ends read as text).
  const std::string on_disk =
      d.source_bytes == d.text_bytes ? "" : fmt::format(" of text ({} on disk)", d.source_bytes);
  std::printf("%s: %.0f bytes%s -> %ld tokens (%s tokenizer, vocabulary %ld, uint%d ids): %.3f bytes/token\n",
              path.c_str(), text_bytes, on_disk.c_str(), static_cast<long>(n),
              d.tokenizer.kind_name().c_str(), static_cast<long>(d.tokenizer.size()), width * 8,
              n > 0 ? text_bytes / static_cast<double>(n) : 0.0);
  const double cache_bytes = static_cast<double>(file_size(d.cache_path));
  if (d.cache_built)
    std::printf("cache: %s (%.0f bytes), tokenized in %.2f s (%.1f MB/s of text)\n", d.cache_path.c_str(),
                cache_bytes, d.load_seconds, text_bytes / 1e6 / std::max(d.load_seconds, 1e-9));
  else
    std::printf("cache: %s (%.0f bytes) is up to date: opened and checked in %.3f s\n", d.cache_path.c_str(),
                cache_bytes, d.load_seconds);
  if (d.documents > 1)
    std::printf("documents: %ld, %s\n", static_cast<long>(d.documents),
                d.document_separator ? "joined by <|endoftext|> (data.document_separator)"
                                     : "concatenated (data.document_separator false)");
  std::printf("split (data.val_fraction %g): %ld train / %ld val tokens", c.data().val_fraction,
              static_cast<long>(d.train.size()), static_cast<long>(d.val.size()));
  if (d.val_documents > 0)
    std::printf(" (%ld train / %ld val documents)", static_cast<long>(d.documents - d.val_documents),
                static_cast<long>(d.val_documents));
  std::printf("\n");
  for (const std::string& warning : d.warnings()) std::printf("warning: %s\n", warning.c_str());
  // The counts above take any split; training needs a whole sequence in each (dataset.h).
  for (const auto& [which, n_split] : {std::pair<const char*, int64_t>{"training", d.train.size()},
                                       std::pair<const char*, int64_t>{"validation", d.val.size()}})
    if (n_split < need)
      std::printf(
          "warning: the %s split has %ld token%s, and one sequence of train.seq_len = %ld needs %ld: "
          "`tfm train` refuses this config (use a longer text, a smaller train.seq_len or another "
          "data.val_fraction)\n",
          which, static_cast<long>(n_split), n_split == 1 ? "" : "s", static_cast<long>(seq_len),
          static_cast<long>(need));
  return kExitOk;
}

// ---- tfm tokenizer encode / decode ----

struct TokenizerIoOptions {
  std::string config, run, text, ids, file;
  std::string side = "source";  // an encoder-decoder's vocabulary: "source" or "target"
  std::vector<std::string> sets;
  bool stats = false;
  // --text / --ids as given: an empty value is given too (and said to be empty), not missing.
  const CLI::Option* inline_option = nullptr;
  bool inline_given() const { return inline_option && inline_option->count() > 0; }
};

// The tokenizer a new run of the config would build (char, byte: from the corpus, as its token cache
// holds it; bpe, gpt2: their files), or the run's own (its checkpoint's); --side picks a seq2seq run's
// target vocabulary.
Tokenizer io_tokenizer(const TokenizerIoOptions& o) {
  if (o.config.empty() == o.run.empty()) throw ConfigError("--config, --run: give exactly one of them");
  const bool target = o.side == "target";
  if (!o.run.empty()) {
    const Vocabulary vocabulary = load_run(o.run).checkpoint;
    if (!vocabulary.target_tokenizer) {
      if (target)
        throw ConfigError("--side target: " + o.run +
                          " has one vocabulary; source and target are an encoder-decoder's (seq2seq) sides");
      return vocabulary.tokenizer;
    }
    if (!target)
      std::fprintf(stderr, "tfm: the source vocabulary of %s (--side target for the target's)\n",
                   o.run.c_str());
    return target ? *vocabulary.target_tokenizer : vocabulary.tokenizer;
  }
  const Config config = load_config(o.config, o.sets);
  if (target && !objective_capabilities(config.train().objective).encoder_decoder())
    throw ConfigError("--side target: " + o.config + " trains train.objective \"" +
                      name_of(config.train().objective) +
                      "\", which has one vocabulary; source and target are seq2seq's sides");
  return data_vocabulary(config);  // seq2seq: bpe and gpt2 are one file for both sides, word is refused
}

// The bytes of --file, else of the inline flag's value, and the name to report them by.
std::string io_input(const TokenizerIoOptions& o, const std::string& inline_flag,
                     const std::string& inline_value, std::string* source) {
  if (!o.file.empty()) {
    *source = o.file;
    return read_file(o.file, uint64_t{1} << 32);
  }
  *source = inline_flag;
  return inline_value;
}

int run_tokenizer_encode(const TokenizerIoOptions& o) {
  std::string source;
  if (o.inline_given() == !o.file.empty()) throw ConfigError("--text, --file: give exactly one of them");
  if (o.inline_given() && o.text.empty())
    throw ConfigError(
        "--text: the text is empty; give the text to encode (or --file FILE to encode a file's)");
  const std::string text = io_input(o, "--text", o.text, &source);
  const Tokenizer tok = io_tokenizer(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, source);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = nlohmann::json(ids).dump() + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (o.stats)
    std::fprintf(stderr, "%zu bytes -> %zu tokens (%s tokenizer, vocabulary %ld) in %.3f s: %.2f MB/s\n",
                 text.size(), ids.size(), tok.kind_name().c_str(), static_cast<long>(tok.size()), seconds,
                 static_cast<double>(text.size()) / 1e6 / std::max(seconds, 1e-9));
  return kExitOk;
}

int run_tokenizer_decode(const TokenizerIoOptions& o) {
  std::string source;
  if (o.inline_given() == !o.file.empty()) throw ConfigError("--ids, --file: give exactly one of them");
  const std::string json_text = io_input(o, "--ids", o.ids, &source);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(source + ": expected a JSON array of token ids, e.g. [15496, 11, 995] (" + e.what() +
                      ")");
  }
  const Tokenizer tok = io_tokenizer(o);
  if (!j.is_array()) throw ConfigError(source + ": expected a JSON array of token ids, got " + j.type_name());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() >= tok.size())
      throw ConfigError(source + ": entry " + std::to_string(i) + " (counted from 0) is " + j[i].dump() +
                        ", expected an integer in [0, " + std::to_string(tok.size()) + ") (the " +
                        tok.kind_name() + " tokenizer's vocabulary)");
    ids.push_back(j[i].get<int32_t>());
  }
  const std::string text = tok.decode(ids);  // as is: no newline added, so decode(encode(x)) is x
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_data_commands(CLI::App& app) {
  std::vector<Command> commands;
  auto o = std::make_shared<PrepareOptions>();
  auto* data = app.add_subcommand("data", "Text corpora: the token cache");
  data->require_subcommand(1);
  data->footer("\nExample:\n  tfm data prepare --config configs/shakespeare_char.json\n");
  auto* prep = data->add_subcommand("prepare", "Tokenize a config's text corpus into its token cache now");
  prep->add_option("--config", o->config, "Config file")->type_name("FILE")->required();
  prep->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  prep->add_flag("--rebuild", o->rebuild, "Tokenize again even when the cache is valid");
  prep->add_option("--threads", o->threads, "Encoding threads (0 = every core)")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
  prep->footer(
      "\nThe first start of a text corpus (train, resume, eval, sample, heads, sweep) tokenizes it once "
      "into\n"
      "data.cache_dir (default: .tfm-cache beside a file, inside a folder) and every later start maps that\n"
      "file; this does the first part ahead of time and prints the counts. A changed file or tokenizer, or a "
      "damaged cache,\n"
      "is rebuilt. Sentence pairs (seq2seq) have no cache.\nExample:\n"
      "  tfm data prepare --config configs/shakespeare_char.json\n"
      "  tfm data prepare --config configs/tiny.json --set data.path=big.txt --set "
      "data.cache_dir=/scratch/tfm\n");
  commands.push_back({prep, [o] { return run_prepare(*o); }});

  // Under `tfm tokenizer` (insight.cpp's, which has train).
  CLI::App* tok = app.get_subcommand("tokenizer");
  const auto common = [](CLI::App* cmd, TokenizerIoOptions& io) {
    cmd->add_option("--config", io.config,
                    "Config file: its data.tokenizer (and data.tokenizer_path, data.path)")
        ->type_name("FILE");
    cmd->add_option("--run", io.run, "Run directory: its checkpoint's tokenizer (instead of --config)")
        ->type_name("DIR");
    cmd->add_option("--set", io.sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
    cmd->add_option("--side", io.side, "An encoder-decoder's (seq2seq) vocabulary: source or target")
        ->capture_default_str()
        ->check(one_of({"source", "target"}));
  };
  auto e = std::make_shared<TokenizerIoOptions>();
  auto* enc = tok->add_subcommand("encode", "Print the token ids of a text as a JSON array");
  common(enc, *e);
  e->inline_option = enc->add_option("--text", e->text, "The text");
  enc->add_option("--file", e->file, "A file whose bytes are the text")->type_name("FILE");
  enc->add_flag("--stats", e->stats, "Also print the count and the encoding speed (MB/s) on stderr");
  enc->footer(
      "\nThe ids are what training sees (no end-of-text id is added). A char vocabulary is data.path's\n"
      "characters, so a character outside it is an error.\nExamples:\n"
      "  tfm tokenizer encode --config configs/tiny.json --set data.tokenizer=gpt2 --text \"Hello, world\"\n"
      "  tfm tokenizer encode --run runs/shakespeare_char --file prompt.txt\n"
      "  tfm tokenizer encode --run runs/eng_fra --side target --text \"je suis calme .\"\n");
  commands.push_back({enc, [e] { return run_tokenizer_encode(*e); }});
  auto d = std::make_shared<TokenizerIoOptions>();
  auto* dec = tok->add_subcommand("decode", "Print the text of token ids (a JSON array)");
  common(dec, *d);
  d->inline_option =
      dec->add_option("--ids", d->ids, "The ids, a JSON array: [15496, 11, 995]")->type_name("JSON");
  dec->add_option("--file", d->file, "A file holding the JSON array")->type_name("FILE");
  dec->footer(
      "\nThe text is written as is, without a newline after it. The end-of-text id reads <|endoftext|>.\n"
      "Examples:\n"
      "  tfm tokenizer decode --config configs/tiny.json --set data.tokenizer=gpt2 --ids \"[15496, 11, "
      "995]\"\n"
      "  tfm tokenizer encode --run runs/r --text hi > ids.json && tfm tokenizer decode --run runs/r --file "
      "ids.json\n");
  commands.push_back({dec, [d] { return run_tokenizer_decode(*d); }});
  return commands;
}

}  // namespace tfm::cli
