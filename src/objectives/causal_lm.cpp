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

namespace {

class CausalLm : public TextObjective {
 public:
  CausalLm(const Config& c, const Vocabulary* ckpt, const ObjectiveOptions& o)
      : TextObjective(c, ckpt, o, 0) {
    if (!c.boolean("model.causal"))
      throw ConfigError(
          "model.causal: train.objective \"causal_lm\" needs model.causal = true (a "
          "bidirectional model trained on the next token reads the answer through attention; "
          "for a bidirectional encoder use train.objective \"masked_lm\")");
  }
  std::string name() const override { return "causal_lm"; }
  ObjectiveCapabilities capabilities() const override {
    return {TrainingData::Text, ModelKind::CausalDecoder, Inference::Sample, "tfm sample", false, {"loss"}};
  }
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

  std::function<Tensor()> random_batch_loss(Rng& rng) override {
    const int64_t V = model_.config().vocab_size;
    std::vector<int32_t> x(B_ * T_), y(B_ * T_);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
    return [this, x, y] { return LanguageModel::loss(model_.forward(x, B_, T_), y); };
  }

  Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed,
                   const std::atomic<bool>* stop) override {
    Metrics m;
    const std::optional<double> loss =
        tfm::evaluate(model_, split_tokens(split), B_, T_, batches, seed, stop);
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

std::unique_ptr<Objective> make_causal_lm(const Config& c, const Vocabulary* ckpt,
                                          const ObjectiveOptions& o) {
  return std::make_unique<CausalLm>(c, ckpt, o);
}

}  // namespace tfm
