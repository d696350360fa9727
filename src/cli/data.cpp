// tfm data prepare: builds a config's token cache ahead of training (docs/data.md), so the first run
// starts as fast as every later one, and says what the corpus costs in tokens.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/config/config.h"
#include "tfm/data/corpus.h"
#include "tfm/data/dataset.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/objectives/text_data.h"

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
  if (c.string("data.format") != "text")
    throw ConfigError(
        "data.format: \"" + c.string("data.format") +
        "\" (sentence pairs, seq2seq) is read whole at every start; the token cache is for text "
        "corpora (train.objective causal_lm, masked_lm)");
  const std::string path = c.string("data.path");
  TokenCacheOptions cache = token_cache_options(c, true);
  cache.rebuild = o.rebuild;
  cache.threads = o.threads;
  const std::string kind = c.string("data.tokenizer");
  // The split's check needs a sequence length; 0 reports the counts of any file with two tokens.
  TokenCacheOptions bpe_cache = cache;
  bpe_cache.extend_vocabulary = true;  // as a new run's
  const Dataset d = kind == "bpe" ? load_dataset(path, Tokenizer::load_bpe(c.string("data.tokenizer_path")),
                                                 c.number("data.val_fraction"), 0, bpe_cache)
                                  : load_dataset(path, kind, c.number("data.val_fraction"), 0, cache);
  const int64_t n = d.train.size() + d.val.size();
  const double source_bytes = static_cast<double>(d.source_bytes);
  const int width = d.train.width();
  // Text bytes for one plain file; a corpus of several or compressed files is counted as stored.
  const bool plain = is_single_file(path) && path.size() > 3 &&
                     path.compare(path.size() - 3, 3, ".gz") != 0 &&
                     path.compare(path.size() - 4, 4, ".zst") != 0;
  std::printf("%s: %.0f bytes%s -> %ld tokens (%s tokenizer, vocabulary %ld, uint%d ids): %.3f bytes/token\n",
              path.c_str(), source_bytes, plain ? "" : " on disk", static_cast<long>(n),
              d.tokenizer.kind_name().c_str(), static_cast<long>(d.tokenizer.size()), width * 8,
              n > 0 ? source_bytes / static_cast<double>(n) : 0.0);
  const double cache_bytes = static_cast<double>(file_size(d.cache_path));
  if (d.cache_built)
    std::printf("cache: %s (%.0f bytes), tokenized in %.2f s (%.1f MB/s of %s)\n", d.cache_path.c_str(),
                cache_bytes, d.load_seconds, source_bytes / 1e6 / std::max(d.load_seconds, 1e-9),
                plain ? "text" : "files");
  else
    std::printf("cache: %s (%.0f bytes) is up to date: opened and checked in %.3f s\n", d.cache_path.c_str(),
                cache_bytes, d.load_seconds);
  if (d.documents > 1)
    std::printf("documents: %ld, %s\n", static_cast<long>(d.documents),
                d.document_separator ? "joined by <|endoftext|> (data.document_separator)"
                                     : "concatenated (data.document_separator false)");
  std::printf("split (data.val_fraction %g): %ld train / %ld val tokens", c.number("data.val_fraction"),
              static_cast<long>(d.train.size()), static_cast<long>(d.val.size()));
  if (d.val_documents > 0)
    std::printf(" (%ld train / %ld val documents)", static_cast<long>(d.documents - d.val_documents),
                static_cast<long>(d.val_documents));
  std::printf("\n");
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
      "data.cache_dir (default: .tfm-cache beside the data) and every later start maps that file; this does\n"
      "the first part ahead of time and prints the counts. A changed file or tokenizer, or a damaged cache,\n"
      "is rebuilt. Sentence pairs (seq2seq) have no cache.\nExample:\n"
      "  tfm data prepare --config configs/shakespeare_char.json\n"
      "  tfm data prepare --config configs/tiny.json --set data.path=big.txt --set "
      "data.cache_dir=/scratch/tfm\n");
  commands.push_back({prep, [o] { return run_prepare(*o); }});
  return commands;
}

}  // namespace tfm::cli
