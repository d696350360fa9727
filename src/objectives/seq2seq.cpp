// seq2seq: an encoder-decoder over sentence pairs (models/encoder_decoder.h, data/pairs.h). Training is
// teacher forcing: batches of B random training pairs padded to the longest in the batch, decoder input <bos>
// y, target y <eos>, the loss the mean cross-entropy over the non-pad target tokens. Evaluation runs over the
// validation pairs in order: loss, token accuracy (argmax = target, non-pad tokens) and corpus BLEU of greedy
// translations (bleu.h: sacreBLEU's formula on d2l-tokenized words). Inference: translate_texts().
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "objective_parts.h"
#include "tfm/data/pairs.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/objectives/bleu.h"
#include "tfm/objectives/inference.h"

namespace tfm {

ObjectiveCapabilities seq2seq_capabilities();  // defined below, with the factory
namespace {

PairOptions pair_options(const Config& c) {
  const DataConfig d = c.data();
  PairOptions o;
  o.source_tokenizer = o.target_tokenizer = name_of(d.tokenizer);
  if (d.tokenizer_path)  // bpe's file, or gpt2's (GPT-2's own without one)
    o.source_tokenizer_path = o.target_tokenizer_path = *d.tokenizer_path;
  o.min_freq = d.min_freq;
  o.max_pairs = d.max_pairs;
  o.val_fraction = d.val_fraction;
  o.seed = static_cast<uint64_t>(c.integer("seed"));
  o.max_source_len = d.max_source_len;
  o.max_target_len = d.max_target_len;
  return o;
}

std::optional<PairDataset> load_data_of(const Config& c, const Vocabulary* ckpt, bool load) {
  if (!load) return std::nullopt;
  const std::string path = c.data().path;
  if (!ckpt) return load_pairs(path, pair_options(c));
  if (!ckpt->target_tokenizer)
    throw IoError("the checkpoint of this seq2seq run has no target vocabulary (section vocab.target)");
  return load_pairs(path, pair_options(c), ckpt->tokenizer, *ckpt->target_tokenizer);
}

const Tokenizer& side(const Vocabulary* ckpt, const std::optional<PairDataset>& d, bool target) {
  if (d) return target ? d->target_tokenizer : d->source_tokenizer;
  TFM_CHECK(ckpt != nullptr, "make_objective", "without data the vocabularies must come from a checkpoint");
  if (target && !ckpt->target_tokenizer)
    throw IoError("the checkpoint of this seq2seq run has no target vocabulary (section vocab.target)");
  return target ? *ckpt->target_tokenizer : ckpt->tokenizer;
}

ModelConfig model_config(const Config& c, const Tokenizer& source, const Tokenizer& target) {
  ModelConfig m = c.model(target.size());
  m.source_vocab_size = source.size();
  return m;
}

double mean_length(const std::vector<SentencePair>& pairs, bool target) {
  if (pairs.empty()) return 1.0;
  double n = 0;
  for (const SentencePair& p : pairs)
    n += static_cast<double>((target ? p.tgt : p.src).size() + 1);  // + <eos>
  return n / static_cast<double>(pairs.size());
}

class Seq2Seq : public Objective {
 public:
  Seq2Seq(const Config& c, const Vocabulary* ckpt, const ObjectiveOptions& o)
      : config_(c),
        data_options_(c.data()),
        B_(c.train().batch_size),
        data_(load_data_of(c, ckpt, o.load_data)),
        data_hash_(pairs_hash(data_)),
        source_(side(ckpt, data_, false)),
        target_(side(ckpt, data_, true)),
        model_(checked_model(model_config(c, source_, target_), o), static_cast<uint64_t>(c.integer("seed"))),
        sampler_(rank_seed(static_cast<uint64_t>(c.integer("seed")), o.rank)) {}

  std::string name() const override { return "seq2seq"; }
  ObjectiveCapabilities capabilities() const override { return seq2seq_capabilities(); }
  // Refused by the objective alone (llama.cpp's encoder-decoders are T5s), whatever the model options.
  GgufArchitecture gguf_architecture() const override {
    throw ConfigError(
        "GGUF export: llama.cpp cannot run this model:\ntrain.objective = \"seq2seq\": llama.cpp runs "
        "encoder-decoders only as T5 (relative position buckets, RMSNorm, no biases), which tfm's "
        "encoder-decoder "
        "is not (GGUF export takes causal_lm runs)");
  }
  Model& model() override { return model_; }
  Seq2SeqModel& s2s() { return model_; }
  const Tokenizer& tokenizer() const override { return source_; }
  const Tokenizer* target_tokenizer() const override { return &target_; }
  Rng& sampler_rng() override { return sampler_.rng(); }
  bool has_data() const override { return data_.has_value(); }
  int64_t max_source_len() const { return data_options_.max_source_len; }
  int64_t max_target_len() const { return data_options_.max_target_len; }
  // A source text as training saw it: encoded, truncated to data.max_source_len tokens (make_pair_batch
  // appends <eos>). `what` names the flag in errors.
  // The source's ids, cut to data.max_source_len; `whole`, when given, gets the count before the cut.
  std::vector<int32_t> encode_source(const std::string& text, const char* what,
                                     int64_t* whole = nullptr) const {
    std::vector<int32_t> ids = source_.encode(text, what);
    if (whole) *whole = static_cast<int64_t>(ids.size());
    if (static_cast<int64_t>(ids.size()) > max_source_len())
      ids.resize(static_cast<size_t>(max_source_len()));
    return ids;
  }

  // Each shard is padded to its own longest pair (padding changes no real position's value); shard i's
  // share is its real target tokens / the batch's.
  BatchShards train_batch_shards(int parts) override {
    const std::vector<SentencePair>& pairs = split("train");
    const std::vector<int64_t> drawn = sampler_.sample(static_cast<int64_t>(pairs.size()), B_);
    // Each shard padded to its own longest pair; the batch's real tokens are the shards' sum.
    std::vector<PairBatch> shards;
    int64_t targets = 0;
    BatchShards out;
    for (const auto& [begin, end] : shard_rows(B_, parts)) {
      shards.push_back(
          make_pair_batch(pairs, std::vector<int64_t>(drawn.begin() + begin, drawn.begin() + end)));
      targets += shards.back().real_target_tokens;
      out.tokens += shards.back().real_source_tokens + shards.back().real_target_tokens;
    }
    out.counted = targets;
    for (PairBatch& b : shards) {
      const float share =
          static_cast<float>(static_cast<double>(b.real_target_tokens) / static_cast<double>(targets));
      out.losses.push_back([b = std::move(b), share](Model& m) {
        if (b.real_target_tokens == 0) return ShardLoss{};
        const Tensor loss = loss_on(dynamic_cast<Seq2SeqModel&>(m), b);
        return ShardLoss{share == 1.0f ? loss : loss * share, Tensor()};  // one shard: the batch's own mean
      });
    }
    return out;
  }

  std::unique_ptr<Model> replica() override {
    return replica_of(model_, static_cast<uint64_t>(config_.integer("seed")));
  }

  std::string describe_batch() const override {
    return std::to_string(B_) + " pairs (padded to the longest in the batch; at most " +
           std::to_string(max_source_len() + 1) + " source + " + std::to_string(max_target_len() + 1) +
           " target tokens)";
  }

  Tensor split_batch_loss(const std::string& split_name, uint64_t seed) override {
    const std::vector<SentencePair>& pairs = split(split_name);
    PairSampler sampler(seed);
    return loss_of(make_pair_batch(pairs, sampler.sample(static_cast<int64_t>(pairs.size()), B_)));
  }

  std::function<Tensor()> random_batch_loss(Rng& rng) override {
    // Lengths from 1 to the longest allowed, ordinary ids only (after the specials).
    const auto sentence = [&rng](int64_t max_len, const Tokenizer& tok) {
      const int64_t first = static_cast<int64_t>(tok.specials().size()), n = tok.size() - first;
      std::vector<int32_t> s(static_cast<size_t>(1 + rng.below(static_cast<uint64_t>(max_len))));
      for (int32_t& t : s)
        t = static_cast<int32_t>(first + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))));
      return s;
    };
    std::vector<SentencePair> pairs(static_cast<size_t>(B_));
    std::vector<int64_t> all(static_cast<size_t>(B_));
    for (int64_t i = 0; i < B_; ++i) {
      pairs[i].src = sentence(max_source_len(), source_);
      pairs[i].tgt = sentence(max_target_len(), target_);
      all[i] = i;
    }
    return [this, b = make_pair_batch(pairs, all)] { return loss_of(b); };
  }

  // Teacher forcing: the mean cross-entropy over the batch's non-pad target tokens.
  Tensor loss_of(const PairBatch& b) { return loss_on(model_, b); }
  static Tensor loss_on(Seq2SeqModel& model, const PairBatch& b) {
    const Tensor logits = model.forward(b.src, b.src_lengths, b.B, b.S, b.tgt_in, b.T);  // (B, T, V)
    return cross_entropy(logits, b.tgt_out, kPadId);
  }

  // Over the first min(n, batches * B) pairs of the split (all of them for batches 0), in order (the same
  // pairs every time; the seed is not needed). BLEU compares greedy translations with the references, both
  // split into words as the word tokenizer does (so char/byte/bpe runs are scored on words too).
  Metrics evaluate(const std::string& split_name, int64_t batches, uint64_t,
                   const std::atomic<bool>* stop) override {
    const std::vector<SentencePair>& pairs = split(split_name);
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(pairs.size()), evaluation_batches(split_name, batches) * B_);
    const bool was_training = model_.training();
    model_.set_training(false);
    NoGradGuard no_grad;
    double loss_sum = 0.0;
    int64_t tokens = 0, correct = 0;
    std::vector<Tokens> hypotheses, references;
    const int64_t V = model_.config().vocab_size;
    TranslateOptions greedy;
    greedy.max_len = max_target_len() + 1;
    Metrics m;
    for (int64_t first = 0; first < n; first += B_) {
      if ((m.abandoned = stop_requested(stop))) break;
      std::vector<int64_t> idx;
      for (int64_t i = first; i < std::min(n, first + B_); ++i) idx.push_back(i);
      const PairBatch b = make_pair_batch(pairs, idx);
      const Tensor logits = contiguous(model_.forward(b.src, b.src_lengths, b.B, b.S, b.tgt_in, b.T));
      loss_sum += cross_entropy(logits, b.tgt_out, kPadId).item() * static_cast<double>(b.real_target_tokens);
      tokens += b.real_target_tokens;
      const float* l = logits.data();
      for (int64_t p = 0; p < b.B * b.T; ++p)
        if (b.tgt_out[p] != kPadId)
          correct += (std::max_element(l + p * V, l + (p + 1) * V) - (l + p * V)) == b.tgt_out[p];
      const auto out = model_.translate(b.src, b.src_lengths, b.B, b.S, greedy);
      for (size_t r = 0; r < out.size(); ++r) {
        hypotheses.push_back(Tokenizer::split_words(target_.decode(out[r]), "translation"));
        references.push_back(Tokenizer::split_words(pairs[static_cast<size_t>(idx[r])].target, data_->path));
      }
    }
    model_.set_training(was_training);
    if (m.abandoned) return m;
    m.set("loss", tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0);
    m.set("accuracy", tokens > 0 ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0);
    m.set("bleu", corpus_bleu(hypotheses, references).score);
    return m;
  }

  // batches 0: every pair of the split.
  int64_t evaluation_batches(const std::string& split_name, int64_t batches) const override {
    const auto pairs = static_cast<int64_t>(split(split_name).size());
    const int64_t all = (pairs + B_ - 1) / B_;
    return batches == 0 ? all : std::min(batches, all);
  }

  double train_flops_per_token() const override {
    // Seq2SeqModel counts per target token; tokens/s counts source + target tokens.
    const double src = data_ ? mean_length(data_->train, false) : 1.0;
    const double tgt = data_ ? mean_length(data_->train, true) : 1.0;
    const auto f = Seq2SeqModel::flops_per_token(model_.config(), static_cast<int64_t>(std::lround(src)),
                                                 static_cast<int64_t>(std::lround(tgt)));
    return f.train_per_token * tgt / (src + tgt);
  }

  std::string describe_data() const override {
    if (!data_) return "no data loaded";
    return data_->path + ", " + std::to_string(data_->train.size()) + " train / " +
           std::to_string(data_->val.size()) + " val pairs, " + source_.kind_name() +
           " tokenizer, vocabularies " + std::to_string(source_.size()) + " source / " +
           std::to_string(target_.size()) + " target (specials included)";
  }
  uint64_t data_hash() const override { return data_hash_; }
  std::string usage_hint(const std::string& dir) const override {
    return "Translate with: tfm translate --run " + dir + " --text \"...\"";
  }

 private:
  const std::vector<SentencePair>& split(const std::string& s) const {
    TFM_CHECK(data_.has_value(), "seq2seq", "built without data: no ", s, " split");
    if (s == "val") return data_->val;
    if (s == "train") return data_->train;
    throw ConfigError("--split: expected \"val\" or \"train\", got \"" + s + "\"");
  }

  // Every pair's ids in order, train then val, hashed once at load (a checkpoint keeps it); 0 without data.
  static uint64_t pairs_hash(const std::optional<PairDataset>& data) {
    if (!data) return 0;
    uint64_t h = kHashFoldStart;
    for (const auto* pairs : {&data->train, &data->val}) {
      for (const SentencePair& p : *pairs)
        for (const auto* ids : {&p.src, &p.tgt}) {
          const uint64_t n = ids->size();
          h = hash_fold(hash_fold(h, hash64(&n, sizeof n)),
                        hash64(ids->data(), ids->size() * sizeof(int32_t)));
        }
      h = hash_fold(h, hash64("|", 1));  // where train ends
    }
    return h;
  }

  Config config_;
  DataConfig data_options_;  // config_.data(), read once
  int64_t B_;
  std::optional<PairDataset> data_;
  uint64_t data_hash_;
  Tokenizer source_, target_;
  Seq2SeqModel model_;
  PairSampler sampler_;
};

}  // namespace

ObjectiveCapabilities seq2seq_capabilities() {
  return {TrainingData::Pairs,         ModelKind::EncoderDecoder, Inference::Translate, "tfm translate", true,
          {"loss", "accuracy", "bleu"}};
}

std::unique_ptr<Objective> make_seq2seq(const Config& c, const Vocabulary* ckpt, const ObjectiveOptions& o) {
  return std::make_unique<Seq2Seq>(c, ckpt, o);
}

namespace {
Seq2Seq& seq2seq_of(Objective& objective, const char* what) {
  auto* s = dynamic_cast<Seq2Seq*>(&objective);
  if (!s)
    throw ConfigError(std::string(what) + ": the run was trained with train.objective \"" + objective.name() +
                      "\"; this needs a seq2seq run");
  return *s;
}

// A line naming what of `text` the vocabulary of one side reads as <unk>; "" when it holds all of it.
std::string unknown_note(const Tokenizer& tok, const std::string& text, const std::string& what,
                         const char* side) {
  const std::vector<std::string> unknown = tok.unknown_symbols(text, what);
  if (unknown.empty()) return "";
  constexpr size_t kShown = 10;
  std::string shown;
  for (size_t i = 0; i < std::min(unknown.size(), kShown); ++i)
    shown += fmt::format("{}\"{}\"", i ? ", " : "", unknown[i]);
  if (unknown.size() > kShown) shown += fmt::format(" and {} more", unknown.size() - kShown);
  const char* unit = tok.kind() == Tokenizer::Kind::Word ? "word" : "character";
  return fmt::format("{}: {} {}{} outside the {} vocabulary, read as <unk>: {}", what, unknown.size(), unit,
                     unknown.size() == 1 ? " is" : "s are", side, shown);
}

// Axis labels: a token's text, a special's name.
std::vector<std::string> labels(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids)
    out.push_back(tok.is_special(id) ? tok.specials()[static_cast<size_t>(id)] : tok.decode(id));
  return out;
}
}  // namespace

PairAttention pair_attention(Objective& objective, const std::string& source, const std::string& target,
                             const std::string& source_name, const std::string& target_name) {
  Seq2Seq& s = seq2seq_of(objective, "attention");
  const std::string tgt_text = target.empty() ? translate_texts(objective, {source}, {}).at(0) : target;
  SentencePair pair;
  int64_t whole = 0;
  pair.src = s.encode_source(source, source_name.c_str(), &whole);
  if (pair.src.empty()) throw ConfigError(source_name + ": no tokens");
  PairAttention a;
  if (std::string note = unknown_note(s.tokenizer(), source, source_name, "source"); !note.empty())
    a.notes.push_back(std::move(note));
  if (whole > s.max_source_len())
    a.notes.push_back(
        fmt::format("{}: {} tokens; the model reads the first {} (data.max_source_len, the "
                    "longest source it was trained on): the maps show those",
                    source_name, whole, s.max_source_len()));
  pair.tgt = s.target_tokenizer()->encode(tgt_text, target_name);
  if (!target.empty())  // a translation is made of the vocabulary's tokens
    if (std::string note = unknown_note(*s.target_tokenizer(), target, target_name, "target"); !note.empty())
      a.notes.push_back(std::move(note));
  if (static_cast<int64_t>(pair.tgt.size()) > s.max_target_len()) {
    a.notes.push_back(fmt::format("{}: {} tokens; the decoder reads the first {} (data.max_target_len)",
                                  target_name, pair.tgt.size(), s.max_target_len()));
    pair.tgt.resize(s.max_target_len());
  }
  const PairBatch b = make_pair_batch({pair}, std::vector<int64_t>{0});
  Seq2SeqModel& model = s.s2s();
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.set_training(false);
  model.set_record_attention(true);
  model.forward(b.src, b.src_lengths, 1, b.S, b.tgt_in, b.T);
  model.set_record_attention(false);
  model.set_training(was_training);
  a.source_tokens = labels(s.tokenizer(), b.src);
  a.target_tokens = labels(*s.target_tokenizer(), b.tgt_out);
  const int64_t H = model.config().n_heads;
  const auto take = [H](const std::vector<Tensor>& probs, int64_t rows, int64_t cols) {
    std::vector<Tensor> out;
    for (const Tensor& p : probs)
      out.push_back(reshape(contiguous_values(p), {H, rows, cols}).clone());  // (1, H, r, c)
    return out;
  };
  a.encoder = take(model.encoder_attention(), b.S, b.S);
  a.decoder_self = take(model.decoder_self_attention(), b.T, b.T);
  a.cross = take(model.decoder_cross_attention(), b.T, b.S);
  return a;
}

std::vector<std::string> translate_texts(Objective& objective, const std::vector<std::string>& texts,
                                         const TranslateOptions& options, const std::string& source,
                                         std::vector<std::string>* warnings) {
  auto* s = dynamic_cast<Seq2Seq*>(&objective);
  if (!s)
    throw ConfigError("translate: the run was trained with train.objective \"" + objective.name() +
                      "\"; translation needs a seq2seq run");
  Seq2SeqModel& model = s->s2s();
  ThreadInvariantProducts same_bits_any_threads;  // the translations, whatever the thread count
  TranslateOptions o = options;
  if (o.max_len <= 0) o.max_len = s->max_target_len() + 1;
  if (o.max_len > model.config().max_seq_len)
    throw ConfigError(
        "--max-len: expected 0 to the model's max_seq_len = " + std::to_string(model.config().max_seq_len) +
        " (the decoder's positions), got " + std::to_string(o.max_len));
  if (texts.empty()) return {};
  std::vector<SentencePair> pairs(texts.size());
  std::vector<int64_t> idx;
  for (size_t i = 0; i < texts.size(); ++i) {
    // Nothing to translate (an empty line, however it came): an empty translation, not one the decoder
    // makes up from the end-of-sentence token alone.
    if (texts[i].find_first_not_of(" \t\r\n") == std::string::npos) continue;
    int64_t whole = 0;
    pairs[i].src = s->encode_source(texts[i], source.c_str(), &whole);
    idx.push_back(static_cast<int64_t>(i));
    if (!warnings) continue;
    const std::string what = texts.size() > 1 ? fmt::format("{} {}", source, i + 1) : source;
    if (std::string note = unknown_note(s->tokenizer(), texts[i], what, "source"); !note.empty())
      warnings->push_back(std::move(note));
    if (whole > s->max_source_len())
      warnings->push_back(
          fmt::format("{}: {} tokens; the model reads the first {} (data.max_source_len, the "
                      "longest source it was trained on): the rest is not translated",
                      what, whole, s->max_source_len()));
  }
  std::vector<std::string> result(texts.size());
  if (idx.empty()) return result;
  const PairBatch b = make_pair_batch(pairs, idx);
  const bool was_training = model.training();
  model.set_training(false);
  const auto out = model.translate(b.src, b.src_lengths, b.B, b.S, o);
  model.set_training(was_training);
  for (size_t k = 0; k < out.size(); ++k)
    result[static_cast<size_t>(idx[k])] = s->target_tokenizer()->decode(out[k]);
  return result;
}

}  // namespace tfm
