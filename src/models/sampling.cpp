// Sampling from a language model with its KV cache: temperature, top-k, a seeded generator.
#include "tfm/models/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "tfm/engine/ops.h"

namespace tfm {
namespace {

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
    // Only the last context's tokens are read again: a long generation stays in constant memory.
    if (ids.size() > 2 * static_cast<size_t>(L)) ids.erase(ids.begin(), ids.end() - L);
    const std::string piece = tokenizer.decode(next);
    if (on_text)
      on_text(piece);
    else
      out += piece;
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

}  // namespace tfm
