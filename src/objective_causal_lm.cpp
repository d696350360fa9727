// causal_lm: decoder-only next-token prediction (ARCHITECTURE.md): batches are B random windows of
// T + 1 tokens, input t[i:i+T], target t[i+1:i+T+1]; the loss is the mean cross-entropy over all
// B*T positions. Generation is sampling with the KV cache (generate()).
#include <algorithm>
#include <cmath>
#include <functional>

#include "objective_text.h"
#include "tfm/error.h"
#include "tfm/ops.h"
#include "tfm/trainer.h"

namespace tfm {

double evaluate(LanguageModel& model, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                int64_t batches, uint64_t seed) {
  const bool was_training = model.training();
  model.set_training(false);
  NoGradGuard no_grad;
  BatchSampler sampler(seed);
  std::vector<int32_t> x, y;
  double sum = 0.0;
  for (int64_t i = 0; i < batches; ++i) {
    sampler.sample(tokens, B, T, x, y);
    sum += LanguageModel::loss(model.forward(x, B, T), y).item();
  }
  model.set_training(was_training);
  return sum / static_cast<double>(batches);
}

namespace {

class CausalLm : public TextObjective {
 public:
  CausalLm(const Config& c, const Checkpoint* ckpt, const ObjectiveOptions& o)
      : TextObjective(c, ckpt, o, 0) {
    if (!c.boolean("model.causal"))
      throw ConfigError("model.causal: train.objective \"causal_lm\" needs model.causal = true (a "
                        "bidirectional model trained on the next token reads the answer through attention; "
                        "for a bidirectional encoder use train.objective \"masked_lm\")");
  }
  std::string name() const override { return "causal_lm"; }
  std::string usage_hint(const std::string& dir) const override { return "Sample with: tfm sample --run " + dir; }

  BatchLoss train_batch() override {
    sampler_.sample(split_tokens("train"), B_, T_, x_, y_);
    return {LanguageModel::loss(model_.forward(x_, B_, T_), y_), B_ * T_};
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

  Metrics evaluate(const std::string& split, int64_t batches, uint64_t seed) override {
    Metrics m;
    m.set("loss", tfm::evaluate(model_, split_tokens(split), B_, T_, batches, seed));
    return m;
  }

 private:
  std::vector<int32_t> x_, y_;
};

int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, Rng& rng) {
  if (o.temperature <= 0.0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<double> z(logits, logits + V);
  for (double& v : z) v /= o.temperature;
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
    const double kth = sorted[o.top_k - 1];
    for (double& v : z)
      if (v < kth) v = -INFINITY;
  }
  const double mx = *std::max_element(z.begin(), z.end());
  double sum = 0.0;
  for (double& v : z) sum += (v = std::exp(v - mx));
  const double u = static_cast<double>(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0) * sum;
  double acc = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    acc += z[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  for (int64_t i = V - 1; i >= 0; --i)
    if (z[i] > 0) return static_cast<int32_t>(i);
  return 0;
}

}  // namespace

std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const SampleOptions& o,
                     const std::function<void(const std::string&)>& on_text) {
  const bool was_training = model.training();
  model.set_training(false);
  NoGradGuard no_grad;
  Rng rng(o.seed);
  const int64_t L = model.config().max_seq_len, V = model.config().vocab_size;
  std::vector<int32_t> ids = tokenizer.encode(o.prompt, "--prompt");
  if (ids.empty() && tokenizer.kind() == Tokenizer::Kind::Bpe) ids = tokenizer.encode("\n", "--prompt");
  if (ids.empty()) {
    const auto& s = tokenizer.symbols();
    const auto nl = std::lower_bound(s.begin(), s.end(), static_cast<uint32_t>('\n'));
    ids.push_back(nl != s.end() && *nl == '\n' ? static_cast<int32_t>(nl - s.begin()) : 0);
  }
  KVCache cache;
  std::vector<float> last(V);
  // (Re)fills the cache with the last `keep` tokens and keeps the logits of the final one.
  auto refill = [&](size_t keep) {
    cache = model.make_cache(1);
    const std::vector<int32_t> window(ids.end() - static_cast<std::ptrdiff_t>(keep), ids.end());
    const std::vector<float> logits =
        model.forward_cached(cache, window, 1, static_cast<int64_t>(window.size())).to_vector();
    std::copy(logits.end() - V, logits.end(), last.begin());
  };
  refill(std::min<size_t>(ids.size(), static_cast<size_t>(L)));
  std::string out;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int32_t next = pick_token(last.data(), V, o, rng);
    ids.push_back(next);
    const std::string piece = tokenizer.decode(next);
    out += piece;
    if (on_text) on_text(piece);
    if (i + 1 == o.max_new_tokens) break;
    if (cache.length >= L) {
      // The context is full: restart from the newest half (amortised O(1) refills per token).
      refill(std::min<size_t>(ids.size(), static_cast<size_t>(std::max<int64_t>(1, L / 2))));
    } else {
      const std::vector<float> logits = model.forward_cached(cache, {next}, 1, 1).to_vector();
      std::copy(logits.end() - V, logits.end(), last.begin());
    }
  }
  model.set_training(was_training);
  return out;
}

std::unique_ptr<Objective> make_causal_lm(const Config& c, const Checkpoint* ckpt, const ObjectiveOptions& o) {
  return std::make_unique<CausalLm>(c, ckpt, o);
}

}  // namespace tfm
