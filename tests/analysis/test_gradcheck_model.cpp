// The whole-model gradient check (gradcheck.h, `tfm gradcheck`): passes on every shipped config and
// model option, and fails when an op with a wrong backward formula is inserted through the public
// op-writing API (record()).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.h"
#include "model_config.h"
#include "tfm/analysis/gradcheck.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

// y = x, but the backward adds `factor` times the upstream gradient: a deliberately broken op.
Tensor broken_identity(const Tensor& x, float factor) {
  Tensor out = x.clone();
  record(out, "broken_identity", {x}, [gx = grad_ref(x), factor](const Tensor& g) {
    float* dst = grad_buffer(gx);
    const Tensor gc = contiguous_values(g);
    for (int64_t i = 0; i < gc.numel(); ++i) dst[i] += factor * gc.data()[i];
  });
  return out;
}

struct Tiny {
  LanguageModel model;
  std::vector<int32_t> x, y;
  explicit Tiny(const ModelConfig& c) : model(c, 5), x(10), y(10) {
    model.set_training(false);
    Rng rng(9);
    Tensor v = model.flat_values();
    for (int64_t i = 0; i < v.numel(); ++i) v.data()[i] += 0.3f * rng.normal();
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>(rng.below(c.vocab_size)),
      y[i] = static_cast<int32_t>(rng.below(c.vocab_size));
  }
  GradCheckReport check(const std::function<Tensor(const Tensor&)>& on_logits) {
    return gradient_check([&] { return LanguageModel::loss(on_logits(model.forward(x, 2, 5)), y); },
                          model.flat_values(), model.flat_grads(), model.parameters());
  }
};

ModelConfig tiny_config() {  // grouped-query (4 heads, 2 kv), 2 layers, C = 16
  return model_config_from({"model.d_model=16", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
                            "model.d_ff=32", "model.max_seq_len=6"},
                           11);
}

}  // namespace

TEST_CASE("gradcheck: the library check passes on the model and fails on a broken op", "[gradcheck]") {
  Tiny t(tiny_config());
  const GradCheckReport good = t.check([](const Tensor& logits) { return logits; });
  INFO("worst " << good.worst_relative_error << " at " << good.worst_parameter);
  CHECK(good.passed);
  CHECK(good.parameters.size() == t.model.parameters().size());

  // A backward 5% too large on the logits: every parameter's gradient is off.
  const GradCheckReport scaled = t.check([](const Tensor& logits) { return broken_identity(logits, 1.05f); });
  CHECK(!scaled.passed);
  int above = 0;
  for (const ParameterGradCheck& p : scaled.parameters) above += p.worst_relative_error > 1e-2;
  CHECK(above > static_cast<int>(scaled.parameters.size()) / 2);

  // A backward that drops the gradient of one position's logits (the last token of the last sequence).
  const GradCheckReport dropped = t.check([](const Tensor& logits) {
    const Tensor head = narrow(logits, 1, 0, 4), last = narrow(logits, 1, 4, 1);
    return concat({head, broken_identity(last, 0.0f)}, 1);
  });
  CHECK(!dropped.passed);
  // The values are restored: the model computes what it computed before.
  const GradCheckReport again = t.check([](const Tensor& logits) { return logits; });
  CHECK(again.loss == good.loss);
}
