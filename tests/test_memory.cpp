// Memory is planned, not churned: once the first steps have filled the caching allocator, a training
// step (forward, backward, clipping, optimizer, and an evaluation in between) gets every buffer from
// the cache and asks the OS for no fresh storage.
#include <catch2/catch.hpp>

#include "tfm/memory.h"
#include "tfm/model.h"
#include "tfm/optim.h"
#include "tfm/trainer.h"

using namespace tfm;

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
    ModelConfig c;
    c.vocab_size = 17;
    c.d_model = 16;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.d_ff = 32;
    c.max_seq_len = 12;
    c.dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.norm_position = norm;
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
