// Sentence pairs: reading, the seeded split, tokenizers from the training pairs, padded batches.
// Legend: B pairs in a batch, S source length, T target length.
#include "tfm/data/pairs.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace {

// The file's pairs in file order (the first max_pairs), each side checked; raw text only.
std::vector<SentencePair> read_pairs(const std::string& path, int64_t max_pairs) {
  constexpr uint64_t kMaxPairBytes = uint64_t{1} << 30;
  const std::string text = read_file(path, kMaxPairBytes);
  if (text.empty()) throw IoError(path + ": the sentence-pair file is empty");
  std::vector<SentencePair> pairs;
  size_t begin = starts_with_byte_order_mark(text) ? kUtf8ByteOrderMark.size() : 0;
  for (int64_t line = 1;
       begin < text.size() && (max_pairs == 0 || static_cast<int64_t>(pairs.size()) < max_pairs); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(begin, end - begin);
    begin = end + 1;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const std::string where = path + ":" + std::to_string(line);
    decode_utf8(row, where);  // IoError "PATH:LINE: invalid UTF-8 at byte offset N (...)"
    const size_t tab = row.find('\t');
    if (tab == std::string::npos)
      throw IoError(where + ": expected source<TAB>target, found no tab in \"" + row.substr(0, 60) + "\"");
    const size_t tab2 = row.find('\t', tab + 1);
    SentencePair p;
    p.source = row.substr(0, tab);
    p.target = row.substr(tab + 1, tab2 == std::string::npos ? std::string::npos : tab2 - tab - 1);
    p.line = line;
    for (const auto* side : {&p.source, &p.target})
      if (side->find_first_not_of(" \t\r") == std::string::npos)
        throw IoError(where + ": the " + (side == &p.source ? "source" : "target") + " sentence is empty");
    pairs.push_back(std::move(p));
  }
  return pairs;
}

// Reads, shuffles (Fisher-Yates over Rng(seed)) and splits: the last n_val pairs validate.
PairDataset read_and_split(const std::string& path, const PairOptions& o) {
  if (o.max_pairs < 0 || o.max_source_len < 0 || o.max_target_len < 0 || o.min_freq < 1)
    throw ConfigError("load_pairs: max_pairs " + std::to_string(o.max_pairs) + ", max_source_len " +
                      std::to_string(o.max_source_len) + ", max_target_len " +
                      std::to_string(o.max_target_len) + " must be >= 0 and min_freq " +
                      std::to_string(o.min_freq) + " >= 1");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    throw ConfigError("load_pairs: val_fraction must be in [0, 1), got " + std::to_string(o.val_fraction));
  std::vector<SentencePair> pairs = read_pairs(path, o.max_pairs);
  Rng rng(o.seed);
  for (size_t i = pairs.size(); i > 1; --i) std::swap(pairs[i - 1], pairs[rng.below(i)]);
  const int64_t n = static_cast<int64_t>(pairs.size());
  int64_t n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * o.val_fraction));
  if (o.val_fraction > 0.0) n_val = std::max<int64_t>(n_val, 1);
  if (n - n_val < 1)
    throw ConfigError("load_pairs: " + path + " has " + std::to_string(n) +
                      " pairs, none left to train with val_fraction " + std::to_string(o.val_fraction));
  PairDataset d;
  d.path = path;
  d.train.assign(pairs.begin(), pairs.end() - n_val);
  d.val.assign(pairs.end() - n_val, pairs.end());
  return d;
}

void check_specials(const Tokenizer& t, const char* side) {
  if (t.specials() != seq2seq_specials())
    throw ConfigError(
        std::string("load_pairs: the ") + side +
        " tokenizer must carry the specials <pad>, <bos>, <eos>, <unk> at ids 0-3 (seq2seq_specials())");
}

// Encodes every pair with the dataset's tokenizers, truncating to the options' limits.
void encode_pairs(PairDataset& d, const PairOptions& o) {
  check_specials(d.source_tokenizer, "source");
  check_specials(d.target_tokenizer, "target");
  auto encode = [&](const Tokenizer& tok, const std::string& text, int64_t line, int64_t max_len) {
    std::vector<int32_t> ids = tok.encode(text, d.path + ":" + std::to_string(line));
    if (max_len > 0 && static_cast<int64_t>(ids.size()) > max_len) ids.resize(static_cast<size_t>(max_len));
    return ids;
  };
  for (auto* split : {&d.train, &d.val})
    for (SentencePair& p : *split) {
      p.src = encode(d.source_tokenizer, p.source, p.line, o.max_source_len);
      p.tgt = encode(d.target_tokenizer, p.target, p.line, o.max_target_len);
    }
}

Tokenizer build_tokenizer(const std::string& kind_name, const std::string& bpe_path,
                          const std::vector<SentencePair>& train, bool source, const PairOptions& o) {
  const Tokenizer::Kind kind = Tokenizer::parse_kind(kind_name);
  if (kind == Tokenizer::Kind::Bpe || kind == Tokenizer::Kind::Gpt2)
    return Tokenizer::from_file(kind, bpe_path).with_specials(seq2seq_specials());
  std::vector<std::string> texts;
  for (const SentencePair& p : train) texts.push_back(source ? p.source : p.target);
  const Tokenizer tok = Tokenizer::from_texts(kind, texts, "load_pairs", o.min_freq);
  if (tok.size() == 0)  // every word rarer than data.min_freq: a model of <unk> alone
    throw ConfigError("data.min_freq: " + std::to_string(o.min_freq) +
                      " leaves no word of the training pairs' " + (source ? "source" : "target") +
                      " side in the vocabulary (every word would be <unk>)");
  return tok.with_specials(seq2seq_specials());
}

}  // namespace

std::vector<std::string> seq2seq_specials() {
  return {"<pad>", "<bos>", "<eos>", "<unk>"};
}

PairDataset load_pairs(const std::string& path, const PairOptions& options) {
  PairDataset d = read_and_split(path, options);
  d.source_tokenizer =
      build_tokenizer(options.source_tokenizer, options.source_tokenizer_path, d.train, true, options);
  d.target_tokenizer =
      build_tokenizer(options.target_tokenizer, options.target_tokenizer_path, d.train, false, options);
  encode_pairs(d, options);
  return d;
}

PairDataset load_pairs(const std::string& path, const PairOptions& options, const Tokenizer& source,
                       const Tokenizer& target) {
  PairDataset d = read_and_split(path, options);
  d.source_tokenizer = source;
  d.target_tokenizer = target;
  encode_pairs(d, options);
  return d;
}

std::vector<std::vector<int64_t>> group_by_source(const std::vector<SentencePair>& pairs) {
  std::vector<std::vector<int64_t>> groups;
  std::map<std::string, size_t> group_of;  // source text -> its group
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [it, added] = group_of.emplace(pairs[i].source, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(static_cast<int64_t>(i));
  }
  return groups;
}

PairBatch make_pair_batch(const std::vector<SentencePair>& pairs, const std::vector<int64_t>& indices) {
  PairBatch b;
  b.B = static_cast<int64_t>(indices.size());
  TFM_CHECK(b.B > 0, "make_pair_batch", "expected at least one pair index, got none");
  for (int64_t i : indices) {
    TFM_CHECK(i >= 0 && i < static_cast<int64_t>(pairs.size()), "make_pair_batch", "index ", i,
              " outside [0, ", pairs.size(), ")");
    b.S = std::max<int64_t>(b.S, static_cast<int64_t>(pairs[i].src.size()) + 1);
    b.T = std::max<int64_t>(b.T, static_cast<int64_t>(pairs[i].tgt.size()) + 1);
  }
  b.src.assign(b.B * b.S, kPadId);      // (B, S)
  b.tgt_in.assign(b.B * b.T, kPadId);   // (B, T)
  b.tgt_out.assign(b.B * b.T, kPadId);  // (B, T)
  for (int64_t r = 0; r < b.B; ++r) {
    const SentencePair& p = pairs[indices[r]];
    const int64_t ns = static_cast<int64_t>(p.src.size()), nt = static_cast<int64_t>(p.tgt.size());
    std::copy(p.src.begin(), p.src.end(), b.src.begin() + r * b.S);
    b.src[r * b.S + ns] = kEosId;
    b.src_lengths.push_back(ns + 1);
    b.tgt_in[r * b.T] = kBosId;
    std::copy(p.tgt.begin(), p.tgt.end(), b.tgt_in.begin() + r * b.T + 1);
    std::copy(p.tgt.begin(), p.tgt.end(), b.tgt_out.begin() + r * b.T);
    b.tgt_out[r * b.T + nt] = kEosId;
    b.real_source_tokens += ns + 1;
    b.real_target_tokens += nt + 1;
  }
  return b;
}

std::vector<int64_t> PairSampler::sample(int64_t n_pairs, int64_t B) {
  TFM_CHECK(n_pairs > 0 && B > 0, "PairSampler::sample", "expected pairs and B > 0, got ", n_pairs, " and ",
            B);
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t& i : out) i = static_cast<int64_t>(rng_.below(static_cast<uint64_t>(n_pairs)));
  return out;
}

}  // namespace tfm
