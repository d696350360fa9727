// Text files to token streams, the train/validation split and seeded random windows.
#include "tfm/data/dataset.h"

#include <algorithm>
#include <cstdio>

#include "tfm/data/corpus.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace {

// A single data file's size; IoError naming it (with how to fetch the default corpus) when it is
// missing, and when it is empty. A directory, glob or list is checked by list_corpus (corpus.h).
void check_data_file(const std::string& path) {
  if (!is_single_file(path)) return;
  uint64_t size = 0;
  try {
    size = file_size(path);
  } catch (const IoError& e) {
    if (path.find("tinyshakespeare") == std::string::npos) throw;
    throw IoError(std::string(e.what()) +
                  " (data.path; scripts/get_data.sh of tfm's source tree fetches it)");
  }
  if (size == 0) throw IoError(path + ": the data file is empty");
}

Dataset split(const std::string& path, TokenCache cache, double val_fraction, int64_t seq_len,
              ShortSplit short_split) {
  Dataset d;
  d.path = path;
  d.tokenizer = std::move(cache.tokenizer);
  d.cache_path = cache.path;
  d.cache_built = cache.built;
  d.load_seconds = cache.seconds;
  d.source_bytes = cache.source_bytes;
  d.text_bytes = cache.text_bytes;
  d.tokens_hash = cache.tokens_hash;
  d.skipped_records = cache.skipped_records;
  d.left_out = cache.left_out;
  d.document_separator = cache.document_separator;
  const TokenSpan& ids = cache.tokens;
  const int64_t N = ids.size();
  const int64_t D = cache.document_ends.size();
  d.documents = D;
  char fraction[32];  // as given (0.9999999 is not 1.000000)
  std::snprintf(fraction, sizeof fraction, "%.10g", val_fraction);
  // One document: as torch_lm.py, int(len(data) * (1.0 - val_fraction)) tokens train. Several: whole
  // documents, the last D - floor(D * (1 - f)) of them validate.
  int64_t n_train = static_cast<int64_t>(static_cast<double>(N) * (1.0 - val_fraction));
  if (D >= 2) {
    const int64_t d_train = static_cast<int64_t>(static_cast<double>(D) * (1.0 - val_fraction));
    if (d_train < 1 || d_train >= D)
      throw IoError(path + ": data.val_fraction = " + fraction + " of " + std::to_string(D) +
                    " documents leaves " +
                    (d_train < 1 ? "no document to train on" : "no document to validate") +
                    " (the split takes whole documents, the last ones validate: use a " +
                    (d_train < 1 ? "smaller" : "larger") + " data.val_fraction or more documents)");
    // The separator after the last training document trains (it ends that document's text).
    n_train = cache.document_ends[d_train - 1] + (cache.document_separator ? 1 : 0);
    d.val_documents = D - d_train;
  }
  const int64_t need = tokens_for_a_sequence(seq_len);
  // `documents`: the split's whole documents (0 for a token split of one document); `others`: the other
  // split's, which data.val_fraction can move a document from while it keeps one.
  auto too_short = [&](const char* which, int64_t n, const char* fraction_advice, int64_t documents,
                       int64_t others) {
    if (n >= need || short_split != ShortSplit::Refuse) return;
    const std::string fraction_way = std::string("a ") + fraction_advice + " data.val_fraction";
    const std::string advice =
        D < 2 ? "use a longer text, a smaller train.seq_len or " + fraction_way
              : "the split takes whole documents, and its " + std::to_string(documents) + " of the " +
                    std::to_string(D) + " hold too few tokens: " +
                    (others > 1 ? fraction_way + " gives it more documents, or use " : "use ") +
                    "a smaller train.seq_len or longer documents";
    throw IoError(path + ": the " + which + " split has " + std::to_string(n) + " tokens (" +
                  std::to_string(N) + (D >= 2 ? " in the corpus" : " in the file") +
                  ", data.val_fraction = " + fraction +
                  "); one sequence needs train.seq_len + 2 = " + std::to_string(need) + " (" + advice + ")");
  };
  too_short("training", n_train, "smaller", D - d.val_documents, d.val_documents);
  too_short("validation", N - n_train, "larger", d.val_documents, D - d.val_documents);
  const double val_share = static_cast<double>(N - n_train) / static_cast<double>(N);
  if (D >= 2 && (val_share > 2 * val_fraction || val_share < 0.5 * val_fraction)) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", 100 * val_share);
    d.split_warning = path + ": " + std::to_string(d.val_documents) + " of " + std::to_string(D) +
                      " documents validate, " + share +
                      " of the tokens, for data.val_fraction = " + fraction +
                      ": the split takes whole documents (the last ones validate), so with few or uneven "
                      "documents it lands far from the fraction; more, smaller documents bring it closer";
  }
  d.train = ids.slice(0, n_train);
  d.val = ids.slice(n_train, N);
  return d;
}

}  // namespace

std::vector<std::string> Dataset::warnings() const {
  std::vector<std::string> out;
  if (!split_warning.empty()) out.push_back(split_warning);
  out.insert(out.end(), left_out.begin(), left_out.end());
  if (skipped_records > 0)
    out.push_back(
        path + ": " + std::to_string(skipped_records) + " bad record" + (skipped_records == 1 ? "" : "s") +
        " left out of the corpus (data.on_bad_record \"skip\"); `tfm data prepare --rebuild` names the "
        "first ones");
  return out;
}

Dataset load_dataset(const std::string& path, const std::string& tokenizer, double val_fraction,
                     int64_t seq_len, const TokenCacheOptions& cache, ShortSplit short_split) {
  check_data_file(path);
  const Tokenizer::Kind kind = Tokenizer::parse_kind(tokenizer);
  return split(path, open_token_cache(path, kind, cache), val_fraction, seq_len, short_split);
}

Dataset load_dataset(const std::string& path, const Tokenizer& tokenizer, double val_fraction,
                     int64_t seq_len, const TokenCacheOptions& cache, ShortSplit short_split) {
  check_data_file(path);
  return split(path, open_token_cache(path, tokenizer, cache), val_fraction, seq_len, short_split);
}

// ---- BatchSampler ----

void BatchSampler::sample(const TokenSpan& tokens, int64_t B, int64_t T, std::vector<int32_t>& x,
                          std::vector<int32_t>& y) {
  const int64_t n = tokens.size();
  TFM_CHECK(n - T - 1 >= 1, "BatchSampler::sample", "expected at least T + 2 = ", T + 2, " tokens, got ", n);
  x.resize(B * T);
  y.resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = static_cast<int64_t>(rng_.below(static_cast<uint64_t>(n - T - 1)));
    tokens.read(i, T, x.data() + b * T);
    tokens.read(i + 1, T, y.data() + b * T);
  }
}

}  // namespace tfm
