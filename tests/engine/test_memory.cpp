// Memory is planned, not churned: once the first steps have filled the caching allocator, a training
// step (forward, backward, clipping, optimizer, and an evaluation in between) gets every buffer from
// the cache and asks the OS for no fresh storage. And a step keeps only the activations its backward
// needs: released values come back bit for bit, and a layer costs a bounded number of activations.
#include <catch2/catch.hpp>

#include "cli_run.h"
#include "model_config.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/optim.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {
void run_steps(LanguageModel& model, Optimizer& opt, Rng& rng, int steps, int64_t B, int64_t T) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> x(B * T), y(B * T), val(512);
  for (auto& t : val) t = static_cast<int32_t>(rng.below(V));
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(V)), y[i] = static_cast<int32_t>(rng.below(V));
    Tensor grads = model.flat_grads();
    grads.fill_(0.0f);
    LanguageModel::loss(model.forward(x, B, T), y).backward();
    clip_grad_norm(grads.data(), grads.numel(), 1.0);
    opt.step(model.flat_values().data(), grads.data(), 1e-3);
    if (s % 2 == 1) evaluate(model, val, B, T, 2, 7);
  }
}
}  // namespace

TEST_CASE("memory: steady-state training steps allocate no fresh storage", "[memory]") {
  for (const char* norm : {"pre", "post"}) {
    const ModelConfig c =
        model_config_from({"model.d_model=16", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
                           "model.d_ff=32", "model.max_seq_len=12", "model.dropout=0.1",
                           "model.attention_dropout=0.1", std::string("model.norm_position=") + norm},
                          17);
    LanguageModel model(c, 3);
    model.set_training(true);
    std::vector<ParamSegment> segs;
    for (const auto& p : model.parameters()) segs.push_back({p.offset, p.value.numel(), p.decay});
    Optimizer opt(OptimizerConfig{}, segs, model.parameter_count());
    Rng rng(11);
    run_steps(model, opt, rng, 3, 3, 12);  // warm-up fills the cache
    const size_t before = memory::stats().fresh_allocs;
    const size_t reused_before = memory::stats().reused;
    run_steps(model, opt, rng, 6, 3, 12);
    INFO("norm_position " << norm);
    CHECK(memory::stats().fresh_allocs == before);
    CHECK(memory::stats().reused > reused_before);  // the steps did allocate, from the cache
  }
}

namespace {
Tensor memory_normal(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::randn(shape, rng);
}
std::vector<float> grads_of(const std::vector<Tensor>& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const std::vector<float> g = t.grad().to_vector();
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}
}  // namespace

TEST_CASE("recompute: released values come back bit for bit and leave the gradients unchanged", "[memory]") {
  // x -> layer_norm -> a -> linear -> q -> q * q: a is saved by the linear, q by the product; both
  // are released after use in one run and kept in the other.
  std::vector<float> kept, released;
  for (const bool release : {false, true}) {
    std::vector<Tensor> leaves = {memory_normal({3, 5, 8}, 1), memory_normal({8}, 2), memory_normal({8}, 3),
                                  memory_normal({6, 8}, 4), memory_normal({6}, 5)};
    for (Tensor& t : leaves) t.set_requires_grad(true);
    const Tensor a = layer_norm(leaves[0], leaves[1], leaves[2]);
    const Tensor q = linear(a, leaves[3], leaves[4]);
    const Tensor y = q * q;
    const std::vector<float> a_values = a.to_vector(), q_values = q.to_vector();
    if (release) {
      a.release_values();
      q.release_values();
      CHECK(a.values_released());
      CHECK(q.values_released());
      CHECK(q.to_vector() == q_values);  // recomputed through a, which is recomputed too
      CHECK(a.to_vector() == a_values);
      CHECK_FALSE(a.values_released());
      a.release_values();
      q.release_values();
    }
    sum(y * memory_normal({3, 5, 6}, 6)).backward();
    (release ? released : kept) = grads_of(leaves);
  }
  CHECK(released == kept);
}

TEST_CASE("recompute: release_values is a no-op without a recipe", "[memory]") {
  const Tensor leaf = memory_normal({4}, 1);
  leaf.release_values();
  CHECK_FALSE(leaf.values_released());
  NoGradGuard no_grad;  // nothing is saved outside a graph, so ops attach no recipe
  const Tensor a = layer_norm(leaf, Tensor::ones({4}), Tensor::zeros({4}));
  a.release_values();
  CHECK_FALSE(a.values_released());
}

TEST_CASE("memory: a layer keeps a bounded set of activations through the step", "[memory]") {
  // Peak tensor memory of forward + backward for 2 and 4 layers: the difference is what two more
  // layers cost. A pre-norm layer's backward needs its input, K, V, the attention output, the
  // residual between the sublayers (5 x (B, T, C)) and fc1's output (B, T, F); Q, the norms' outputs,
  // the probabilities and act(h) are recomputed. Allowed: those plus one (B, T, C) of slack.
  const int64_t B = 4, T = 32, C = 32, F = 128;
  size_t peak[2];
  for (int i = 0; i < 2; ++i) {
    const ModelConfig c = model_config_from(
        {"model.d_model=" + std::to_string(C), i == 0 ? "model.n_layers=2" : "model.n_layers=4",
         "model.n_heads=4", "model.d_ff=" + std::to_string(F), "model.max_seq_len=" + std::to_string(T)},
        17);
    LanguageModel model(c, 3);
    model.set_training(true);
    Rng rng(5);
    std::vector<int32_t> x(B * T), y(B * T);
    for (size_t j = 0; j < x.size(); ++j)
      x[j] = static_cast<int32_t>(rng.below(17)), y[j] = static_cast<int32_t>(rng.below(17));
    LanguageModel::loss(model.forward(x, B, T), y).backward();  // warm-up
    const size_t before = memory::stats().live_bytes;
    memory::reset_peak();
    LanguageModel::loss(model.forward(x, B, T), y).backward();
    peak[i] = memory::stats().peak_live_bytes - before;
    CHECK(memory::stats().live_bytes == before);  // nothing of the step outlives it
  }
  const double per_layer = static_cast<double>(peak[1] - peak[0]) / 2.0 / sizeof(float);
  const double needed = 5.0 * B * T * C + static_cast<double>(B * T * F);
  INFO("per layer: " << per_layer << " floats; the backward needs " << needed);
  CHECK(per_layer <= needed + B * T * C);
}

TEST_CASE("memory: a released buffer is poisoned under AddressSanitizer until acquired again", "[memory]") {
  // The test code itself is compiled without the sanitizers (docs/testing.md): it asks the runtime, when
  // this binary has one (tests/cli_run.h).
  const auto is_poisoned = tfm_test::under_address_sanitizer() ? &__asan_address_is_poisoned : nullptr;
  const size_t n = 12345;  // a size no other test asks for, so the cache hands back this very buffer
  float* a = memory::acquire(n);
  a[0] = 1.0f, a[n - 1] = 2.0f;
  memory::release(a, n);
  if (is_poisoned) {
    CHECK(is_poisoned(a) == 1);
    CHECK(is_poisoned(a + n - 1) == 1);
  }
  float* b = memory::acquire(n);
  CHECK(b == a);
  if (is_poisoned) {
    CHECK(is_poisoned(b) == 0);
    CHECK(is_poisoned(b + n - 1) == 0);
  }
  memory::release(b, n);
}
