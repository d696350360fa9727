// causal_lm: decoder-only next-token prediction (docs/architecture.md): batches are B random windows of
// T + 1 tokens, input t[i:i+T], target t[i+1:i+T+1]; the loss is the mean cross-entropy over all
// B*T positions. Generation is sampling with the KV cache (models/sampling.h).
#include <algorithm>
#include <cmath>
#include <functional>

#include "text_objective.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"

namespace tfm {

ObjectiveCapabilities causal_lm_capabilities();  // defined below, with the factory

std::optional<double> evaluate(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T,
                               int64_t batches, uint64_t seed, const std::atomic<bool>* stop) {
  const bool was_training = model.training();
  model.set_training(false);
  NoGradGuard no_grad;
  BatchSampler sampler(seed);
  std::vector<int32_t> x, y;
  double sum = 0.0;
  for (int64_t i = 0; i < batches; ++i) {
    if (stop_requested(stop)) {
      model.set_training(was_training);
      return std::nullopt;
    }
    sampler.sample(tokens, B, T, x, y);
    sum += LanguageModel::loss(model.forward(x, B, T), y).item();
  }
  model.set_training(was_training);
  return sum / static_cast<double>(batches);
}

std::optional<double> evaluate_whole(LanguageModel& model, const TokenSpan& tokens, int64_t B, int64_t T,
                                     const std::atomic<bool>* stop) {
  const int64_t n = tokens.size();
  TFM_CHECK(n >= 2 && B >= 1 && T >= 1, "evaluate_whole", "expected at least 2 tokens, got ", n);
  const int64_t targets = n - 1, windows = targets / T, tail = targets % T;
  const bool was_training = model.training();
  model.set_training(false);
  NoGradGuard no_grad;
  std::vector<int32_t> x, y;
  double sum = 0.0;  // of the per-token losses
  // `rows` consecutive windows of `len` inputs from token `begin` on, as one (rows, len) batch.
  const auto run = [&](int64_t begin, int64_t rows, int64_t len) {
    x.resize(static_cast<size_t>(rows * len));
    y.resize(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      tokens.read(begin + r * len, len, x.data() + r * len);
      tokens.read(begin + r * len + 1, len, y.data() + r * len);
    }
    // The batch's mean times its tokens: the sum of its per-token losses.
    sum += LanguageModel::loss(model.forward(x, rows, len), y).item() * static_cast<double>(rows * len);
  };
  for (int64_t k = 0; k < windows; k += B) {
    if (stop_requested(stop)) {
      model.set_training(was_training);
      return std::nullopt;
    }
    run(k * T, std::min(B, windows - k), T);
  }
  if (tail > 0) run(windows * T, 1, tail);  // (1, tail)
  model.set_training(was_training);
  return sum / static_cast<double>(targets);
}

namespace {

class CausalLm : public TextObjective {
 public:
  CausalLm(const Config& c, const Vocabulary* ckpt, const ObjectiveOptions& o)
      : TextObjective(c, ckpt, o, 0) {
    if (!model_.config().causal)
      throw ConfigError(
          "model.causal: train.objective \"causal_lm\" needs model.causal = true (a "
          "bidirectional model trained on the next token reads the answer through attention; "
          "for a bidirectional encoder use train.objective \"masked_lm\")");
  }
  std::string name() const override { return "causal_lm"; }
  ObjectiveCapabilities capabilities() const override { return causal_lm_capabilities(); }
  std::string usage_hint(const std::string& dir) const override {
    return "Sample with: tfm sample --run " + dir;
  }

  // Every position counts: shard i's share is its rows / B.
  BatchShards train_batch_shards(int parts) override {
    sampler_.sample(split_tokens("train"), B_, T_, x_, y_);
    return shards_of(x_, y_, parts);
  }

  Tensor split_batch_loss(const std::string& split, uint64_t seed) override {
    BatchSampler sampler(seed);
    std::vector<int32_t> x, y;
    sampler.sample(split_tokens(split), B_, T_, x, y);
    return LanguageModel::loss(model_.forward(x, B_, T_), y);
  }

  // The forward batches of the whole split: its full windows B at a time, and the tail's.
  int64_t evaluation_batches(const std::string& split, int64_t batches) const override {
    if (batches > 0) return batches;
    const int64_t targets = split_tokens(split).size() - 1, windows = targets / T_;
    return (windows + B_ - 1) / B_ + (targets % T_ > 0 ? 1 : 0);
  }

  // With model.mtp_heads, the loss of the first training step: next-token loss + train.mtp_weight times
  // the extra heads' loss.
  std::function<Tensor()> random_batch_loss(Rng& rng) override {
    const int64_t V = model_.config().vocab_size;
    std::vector<int32_t> x(B_ * T_), y(B_ * T_);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
    if (model_.config().mtp_heads == 0)
      return [this, x, y] { return LanguageModel::loss(model_.forward(x, B_, T_), y); };
    const float weight = static_cast<float>(config_.train().mtp_weight);
    return [this, x, y, weight] {
      const MultiTokenLogits heads = model_.forward_multi_token(x, B_, T_);
      return LanguageModel::loss(heads.logits, y) + LanguageModel::mtp_loss(heads.extra, y, B_, T_) * weight;
    };
  }

  // batches 0: the whole split (evaluate_whole).
  Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed,
                   const std::atomic<bool>* stop) override {
    Metrics m;
    const std::optional<double> loss =
        batches == 0 ? evaluate_whole(model_, split_tokens(split), B_, T_, stop)
                     : tfm::evaluate(model_, split_tokens(split), B_, T_, batches, seed, stop);
    if (loss)
      m.set("loss", *loss);
    else
      m.abandoned = true;
    return m;
  }

 private:
  std::vector<int32_t> x_, y_;
};

}  // namespace

ObjectiveCapabilities causal_lm_capabilities() {
  return {TrainingData::Text, ModelKind::CausalDecoder, Inference::Sample, "tfm sample", false, {"loss"}};
}

std::unique_ptr<Objective> make_causal_lm(const Config& c, const Vocabulary* ckpt,
                                          const ObjectiveOptions& o) {
  return std::make_unique<CausalLm>(c, ckpt, o);
}

}  // namespace tfm
