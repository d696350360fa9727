// The objective factory and what the objectives share.
#include "tfm/objectives/objective.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "objective_parts.h"
#include "text_objective.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"

namespace tfm {

double Metrics::get(const std::string& name) const {
  for (const auto& [n, v] : values)
    if (n == name) return v;
  return std::numeric_limits<double>::quiet_NaN();
}
bool Metrics::has(const std::string& name) const {
  for (const auto& [n, v] : values)
    if (n == name) return true;
  return false;
}
void Metrics::set(const std::string& name, double value) {
  for (auto& [n, v] : values)
    if (n == name) {
      v = value;
      return;
    }
  values.emplace_back(name, value);
}

BatchLoss Objective::train_batch() {
  const BatchShards whole = train_batch_shards(1);
  const ShardLoss loss = whole.losses[0](model());
  return {loss.loss, whole.tokens, loss.auxiliary};
}

std::vector<std::pair<int64_t, int64_t>> shard_rows(int64_t B, int parts) {
  TFM_CHECK(parts >= 1 && parts <= B, "shard_rows", "cannot cut ", B, " rows into ", parts, " shards");
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t end = begin + B / parts + (i < B % parts ? 1 : 0);
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// TextObjective

namespace {

Dataset load_text(const Config& c, const Vocabulary* ckpt, int64_t T, const ObjectiveOptions& o) {
  TokenCacheOptions cache = token_cache_options(c, o.rank == 0);
  cache.stop = o.stop;
  if (ckpt) {  // its end-of-text id decides
    const DataConfig d = c.data();
    return load_dataset(d.path, ckpt->tokenizer, d.val_fraction, T, cache);
  }
  return load_new_run_text(c, T, cache);
}

}  // namespace

Dataset load_new_run_text(const Config& c, int64_t T, const TokenCacheOptions& cache,
                          ShortSplit short_split) {
  const DataConfig d = c.data();
  const std::string& path = d.path;
  const double f = d.val_fraction;
  switch (d.tokenizer) {
    case Tokenizer::Kind::Bpe:
    case Tokenizer::Kind::Gpt2: {
      TokenCacheOptions base = cache;
      base.extend_vocabulary = true;  // a new run's BPE gains the end-of-text id when documents are joined
      return load_dataset(path, tokenizer_from_file(c), f, T, base, short_split);
    }
    default:  // the vocabulary comes from the corpus
      return load_dataset(path, name_of(d.tokenizer), f, T, cache, short_split);
  }
}

Tokenizer tokenizer_from_file(const Config& c) {
  const DataConfig d = c.data();
  return Tokenizer::from_file(d.tokenizer, d.tokenizer_path.value_or(""));
}

Tokenizer data_vocabulary(const Config& c) {
  const DataConfig d = c.data();
  const Tokenizer::Kind kind = d.tokenizer;
  if (kind == Tokenizer::Kind::Bpe || kind == Tokenizer::Kind::Gpt2) return tokenizer_from_file(c);
  if (kind == Tokenizer::Kind::Word)
    throw ConfigError(
        "data.tokenizer: \"word\" builds its vocabulary from the training pairs; give a trained run with "
        "--run DIR");
  return open_token_cache(d.path, kind, token_cache_options(c, true)).tokenizer;
}

TokenCacheOptions token_cache_options(const Config& c, bool log) {
  const DataConfig d = c.data();
  TokenCacheOptions o;
  o.dir = d.cache_dir.value_or("");
  o.text_field = d.text_field;
  o.skip_bad_records = d.on_bad_record == BadRecord::Skip;
  o.document_separator = d.document_separator;  // unset: resolved from the data
  // Before the run's log exists (the objective is built first): stderr, so stdout stays the
  // command's own output (sample, translate pipe it).
  if (log) o.log = [](const std::string& line) { std::fprintf(stderr, "tfm: data: %s\n", line.c_str()); };
  return o;
}

namespace {

Tokenizer tokenizer_of(const Vocabulary* ckpt, const std::optional<Dataset>& data) {
  if (data) return data->tokenizer;
  TFM_CHECK(ckpt != nullptr, "make_objective", "without data the vocabulary must come from a checkpoint");
  return ckpt->tokenizer;
}

}  // namespace

TextObjective::TextObjective(const Config& config, const Vocabulary* ckpt, const ObjectiveOptions& o,
                             int64_t extra_vocab)
    : config_(config),
      B_(config.train().batch_size),
      T_(config.train().seq_len),
      tokenizer_(),
      data_(o.load_data ? std::optional<Dataset>(load_text(config, ckpt, T_, o)) : std::nullopt),
      model_(checked_model(config.model(tokenizer_of(ckpt, data_).size() + extra_vocab), o),
             static_cast<uint64_t>(config.integer("seed"))),
      sampler_(rank_seed(static_cast<uint64_t>(config.integer("seed")), o.rank)) {
  tokenizer_ = tokenizer_of(ckpt, data_);
}

double TextObjective::train_flops_per_token() const {
  return LanguageModel::flops_per_token(model_.config(), T_).train_per_token;
}

std::string TextObjective::describe_data() const {
  if (!data_) return "no data loaded";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f s", data_->load_seconds);
  // One document splits by tokens; several split by whole documents, counted here.
  const std::string documents = data_->documents >= 2
                                    ? std::to_string(data_->documents) + " documents (" +
                                          std::to_string(data_->documents - data_->val_documents) +
                                          " train / " + std::to_string(data_->val_documents) + " val), "
                                    : "1 document, ";
  return data_->path + ", " + tokenizer_.kind_name() + " tokenizer, vocabulary " +
         std::to_string(tokenizer_.size()) + ", " + documents + std::to_string(data_->train.size()) +
         " train / " + std::to_string(data_->val.size()) + " val tokens, mapped from " + data_->cache_path +
         " (" + (data_->cache_built ? "tokenized now, " : "cached, opened in ") + secs + ")";
}

std::vector<std::string> TextObjective::data_warnings() const {
  return data_ ? data_->warnings() : std::vector<std::string>{};
}

const TokenSpan& TextObjective::split_tokens(const std::string& split) const {
  TFM_CHECK(data_.has_value(), name(), "built without data: no ", split, " split");
  if (split == "val") return data_->val;
  if (split == "train") return data_->train;
  throw ConfigError("--split: expected \"val\" or \"train\", got \"" + split + "\"");
}

std::unique_ptr<Model> TextObjective::replica() {
  return replica_of(model_, static_cast<uint64_t>(config_.integer("seed")));
}

BatchShards TextObjective::shards_of(const std::vector<int32_t>& x, const std::vector<int32_t>& y,
                                     int parts) const {
  const auto counted = [](const std::vector<int32_t>& t) {
    return static_cast<int64_t>(t.size()) - std::count(t.begin(), t.end(), kNotMasked);
  };
  BatchShards out;
  out.tokens = B_ * T_;
  out.counted = counted(y);
  const double total = static_cast<double>(out.counted);
  const bool mtp = model_.config().mtp_heads > 0;  // causal_lm's only: the key table refuses it elsewhere
  for (const auto& [begin, end] : shard_rows(B_, parts)) {
    std::vector<int32_t> xs(x.begin() + begin * T_, x.begin() + end * T_),
        ys(y.begin() + begin * T_, y.begin() + end * T_);
    const int64_t n = counted(ys), rows = end - begin;
    const float share = static_cast<float>(static_cast<double>(n) / total);
    out.losses.push_back([xs = std::move(xs), ys = std::move(ys), n, rows, share, T = T_, mtp](Model& m) {
      ShardLoss s;
      if (n == 0) return s;
      const MultiTokenLogits heads = dynamic_cast<LanguageModel&>(m).forward_multi_token(xs, rows, T, mtp);
      s.loss = cross_entropy(heads.logits, ys, kNotMasked);
      if (mtp) s.auxiliary = LanguageModel::mtp_loss(heads.extra, ys, rows, T);
      if (share != 1.0f) {  // one shard: the batch's own mean
        s.loss = s.loss * share;
        // Every row has T - k positions per head: the auxiliary term's share is rows / B too.
        if (mtp) s.auxiliary = s.auxiliary * share;
      }
      return s;
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The factory

ObjectiveCapabilities causal_lm_capabilities();
ObjectiveCapabilities masked_lm_capabilities();
ObjectiveCapabilities seq2seq_capabilities();
std::unique_ptr<Objective> make_causal_lm(const Config&, const Vocabulary*, const ObjectiveOptions&);
std::unique_ptr<Objective> make_masked_lm(const Config&, const Vocabulary*, const ObjectiveOptions&);
std::unique_ptr<Objective> make_seq2seq(const Config&, const Vocabulary*, const ObjectiveOptions&);

ObjectiveCapabilities objective_capabilities(ObjectiveKind kind) {
  switch (kind) {
    case ObjectiveKind::CausalLm:
      return causal_lm_capabilities();
    case ObjectiveKind::MaskedLm:
      return masked_lm_capabilities();
    case ObjectiveKind::Seq2Seq:
      return seq2seq_capabilities();
  }
  throw ConfigError("train.objective: unknown objective");
}

std::unique_ptr<Objective> make_objective(const Config& config, const Vocabulary* vocabulary,
                                          const ObjectiveOptions& options) {
  switch (config.train().objective) {
    case ObjectiveKind::CausalLm:
      return make_causal_lm(config, vocabulary, options);
    case ObjectiveKind::MaskedLm:
      return make_masked_lm(config, vocabulary, options);
    case ObjectiveKind::Seq2Seq:
      return make_seq2seq(config, vocabulary, options);
  }
  throw ConfigError("train.objective: unknown objective");
}

}  // namespace tfm
