// masked_lm: BERT's objective for a bidirectional encoder (docs/architecture.md). The vocabulary gains
// one token, [MASK], with the last id. Batches are B random windows t[i:i+T]; each position is chosen
// with probability train.mask_prob; a chosen position's input becomes [MASK] (80%), a uniformly random
// ordinary token (10%) or stays itself (10%). The loss is the mean cross-entropy over the chosen
// positions only, against the original tokens. Inference: fill_mask().
#include <algorithm>
#include <cmath>

#include "text_objective.h"
#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/models/sampling.h"
#include "tfm/objectives/inference.h"

namespace tfm {

ObjectiveCapabilities masked_lm_capabilities();  // defined below, with the factory
namespace {

constexpr int32_t kIgnore = kNotMasked;

class MaskedLm : public TextObjective {
 public:
  MaskedLm(const Config& c, const Vocabulary* ckpt, const ObjectiveOptions& o)
      : TextObjective(c, ckpt, o, 1), mask_prob_(c.train().mask_prob) {
    if (model_.config().causal)
      throw ConfigError(
          "model.causal: train.objective \"masked_lm\" needs model.causal = false (a causal "
          "model cannot see the tokens after a [MASK]; set model.causal=false)");
  }
  std::string name() const override { return "masked_lm"; }
  // Refused by the objective alone, whatever the model options.
  GgufArchitecture gguf_architecture() const override {
    throw ConfigError(
        "GGUF export: llama.cpp cannot run this model:\ntrain.objective = \"masked_lm\": the encoder attends "
        "both ways (model.causal false) and predicts masked tokens; llama.cpp's gpt2, llama and qwen3 are "
        "causal "
        "next-token decoders (GGUF export takes causal_lm runs)");
  }
  ObjectiveCapabilities capabilities() const override { return masked_lm_capabilities(); }
  std::string usage_hint(const std::string& dir) const override {
    return "Fill masks with: tfm fill-mask --run " + dir + " --text \"...[MASK]...\"";
  }
  int32_t mask_id() const { return static_cast<int32_t>(tokenizer_.size()); }

  // Only the chosen positions count: shard i's share is its chosen / the batch's chosen.
  BatchShards train_batch_shards(int parts) override {
    draw(split_tokens("train"), sampler_, x_, y_);
    return shards_of(x_, y_, parts);
  }

  Tensor split_batch_loss(const std::string& split, uint64_t seed) override {
    BatchSampler sampler(seed);
    std::vector<int32_t> x, y;
    draw(split_tokens(split), sampler, x, y);
    return cross_entropy(model_.forward(x, B_, T_), y, kIgnore);
  }

  std::function<Tensor()> random_batch_loss(Rng& rng) override {
    const int64_t ordinary = tokenizer_.size();
    std::vector<int32_t> x(B_ * T_), y;
    for (int32_t& t : x) t = static_cast<int32_t>(rng.below(ordinary));
    mask_tokens(x, y, rng, mask_prob_, mask_id(), ordinary);
    return [this, x, y] { return cross_entropy(model_.forward(x, B_, T_), y, kIgnore); };
  }

  // batches 0: the whole split once, in non-overlapping windows t[kT, kT + T) (B per forward; the last
  // n mod T tokens a shorter window of their own), masked by a generator seeded with `seed`: every
  // token is an input once, and the loss is the mean over all the chosen positions.
  Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed,
                   const std::atomic<bool>* stop) override {
    const bool was_training = model_.training();
    model_.set_training(false);
    NoGradGuard no_grad;
    BatchSampler sampler(seed);
    const TokenSpan& tokens = split_tokens(split);
    const bool whole = batches == 0;
    const int64_t n = tokens.size(), windows = n / T_, tail = n % T_;
    std::vector<int32_t> x, y;
    const int64_t V = model_.config().vocab_size;
    double loss_sum = 0.0;
    int64_t correct = 0, total = 0;
    Metrics m;
    const int64_t forwards = evaluation_batches(split, batches);
    for (int64_t i = 0; i < forwards; ++i) {
      if ((m.abandoned = stop_requested(stop))) break;
      int64_t rows = B_, len = T_, chosen = 0;
      if (!whole) {
        chosen = draw(tokens, sampler, x, y);
      } else {
        int64_t first = i * B_;  // window index
        if (first < windows)
          rows = std::min(B_, windows - first);
        else
          first = windows, rows = 1, len = tail;
        x.resize(static_cast<size_t>(rows * len));
        tokens.read(first * T_, rows * len, x.data());
        chosen = mask_tokens(x, y, sampler.rng(), mask_prob_, mask_id(), tokenizer_.size());
      }
      total += chosen;
      const Tensor logits = model_.forward(x, rows, len);  // (rows, len, V)
      // Random batches, as the reference: the mean over batches of each batch's mean over its chosen
      // positions; the whole split: the mean over every chosen position.
      const double loss = cross_entropy(logits, y, kIgnore).item();
      loss_sum += whole ? loss * static_cast<double>(chosen) : loss;
      const float* l = contiguous(logits).data();
      for (int64_t p = 0; p < rows * len; ++p)
        if (y[p] != kIgnore) correct += (std::max_element(l + p * V, l + (p + 1) * V) - (l + p * V)) == y[p];
    }
    model_.set_training(was_training);
    if (m.abandoned) return m;
    m.set("loss", loss_sum / static_cast<double>(whole ? total : batches));
    m.set("accuracy", total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0);
    return m;
  }

  // The whole split's forward batches: its full windows B at a time, and the tail's.
  int64_t evaluation_batches(const std::string& split, int64_t batches) const override {
    if (batches > 0) return batches;
    const int64_t n = split_tokens(split).size(), windows = n / T_;
    return (windows + B_ - 1) / B_ + (n % T_ > 0 ? 1 : 0);
  }

 private:
  // Draws B windows of T tokens (x (B, T)) and masks them with the sampler's generator; y (B, T).
  int64_t draw(const TokenSpan& tokens, BatchSampler& sampler, std::vector<int32_t>& x,
               std::vector<int32_t>& y) {
    sampler.sample(tokens, B_, T_, x, y);  // y (the next tokens) is overwritten by the masking
    return mask_tokens(x, y, sampler.rng(), mask_prob_, mask_id(), tokenizer_.size());
  }

  double mask_prob_;
  std::vector<int32_t> x_, y_;
};

}  // namespace

int64_t mask_tokens(std::vector<int32_t>& x, std::vector<int32_t>& y, Rng& rng, double mask_prob,
                    int32_t mask_id, int64_t ordinary) {
  const size_t n = x.size();
  y.resize(n);
  int64_t chosen = 0;
  for (size_t p = 0; p < n; ++p) {
    // Two draws per position whether chosen or not, so a position's fate depends on its index only.
    const bool pick = rng.uniform() < mask_prob;
    const float u = rng.uniform();
    y[p] = pick ? x[p] : kNotMasked;
    if (!pick) continue;
    ++chosen;
    if (u < 0.8f)
      x[p] = mask_id;
    else if (u < 0.9f)
      x[p] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(ordinary)));
  }
  if (chosen == 0 && n > 0) {  // one position, so the loss is defined (the reference's would be NaN)
    const size_t p = static_cast<size_t>(rng.below(n));
    y[p] = x[p], x[p] = mask_id, chosen = 1;
  }
  return chosen;
}

int32_t mask_token_id(const Objective& objective) {
  const auto* mlm = dynamic_cast<const MaskedLm*>(&objective);
  return mlm ? mlm->mask_id() : -1;
}

std::vector<int32_t> encode_with_masks(const Tokenizer& tok, const std::string& text, int32_t mask_id,
                                       const std::string& flag, std::vector<int64_t>* positions) {
  std::vector<std::pair<size_t, int64_t>> found;
  std::vector<int32_t> ids =
      tok.encode_marked(text, {{kMaskToken, mask_id}, {kEndOfText, end_of_text_token(tok)}}, flag, &found);
  if (positions)
    for (const auto& [marker, at] : found)
      if (marker == 0) positions->push_back(at);
  return ids;
}

ObjectiveCapabilities masked_lm_capabilities() {
  return {TrainingData::Text,
          ModelKind::BidirectionalEncoder,
          Inference::FillMask,
          "tfm fill-mask",
          false,
          {"loss", "accuracy"},
          1 /* [MASK] */};
}

std::unique_ptr<Objective> make_masked_lm(const Config& c, const Vocabulary* ckpt,
                                          const ObjectiveOptions& o) {
  return std::make_unique<MaskedLm>(c, ckpt, o);
}

FillMaskResult fill_mask(Objective& objective, const std::string& text, int64_t top_k,
                         const std::string& source) {
  auto* mlm = dynamic_cast<MaskedLm*>(&objective);
  if (!mlm)
    throw ConfigError("fill-mask: the run was trained with train.objective \"" + objective.name() +
                      "\"; fill-mask needs a masked_lm run");
  const Tokenizer& tok = mlm->tokenizer();
  ThreadInvariantProducts same_bits_any_threads;  // the probabilities, whatever the thread count
  FillMaskResult r;
  const std::string mask = kMaskToken;
  std::vector<int64_t> positions;
  r.tokens = encode_with_masks(tok, text, mlm->mask_id(), source, &positions);
  for (const int64_t p : positions) r.masks.push_back({p, {}});
  if (r.masks.empty())
    throw ConfigError(source + ": no " + mask + " in the text (mark each position to fill with " + mask +
                      ")");
  LanguageModel& model = mlm->lm();
  const int64_t T = static_cast<int64_t>(r.tokens.size()), L = model.config().max_seq_len;
  if (T > L)
    throw ConfigError(source + ": " + std::to_string(T) +
                      " tokens, the model reads at most model.max_seq_len = " + std::to_string(L));
  const int64_t V = model.config().vocab_size, ordinary = tok.size();
  const int64_t k = std::min<int64_t>(std::max<int64_t>(top_k, 1), ordinary);
  const bool was_training = model.training();
  model.set_training(false);
  NoGradGuard no_grad;
  const Tensor logits = contiguous(model.forward(r.tokens, 1, T));  // (1, T, V)
  model.set_training(was_training);
  for (MaskCandidates& m : r.masks) {
    // Softmax over the ordinary tokens ([MASK] is never an answer).
    const float* l = logits.data() + m.position * V;
    const double mx = *std::max_element(l, l + ordinary);
    std::vector<double> p(static_cast<size_t>(ordinary));
    double sum = 0.0;
    for (int64_t i = 0; i < ordinary; ++i) sum += (p[i] = std::exp(static_cast<double>(l[i]) - mx));
    std::vector<int32_t> order(static_cast<size_t>(ordinary));
    for (int64_t i = 0; i < ordinary; ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) m.candidates.emplace_back(tok.decode(order[i]), p[order[i]] / sum);
  }
  return r;
}

}  // namespace tfm
