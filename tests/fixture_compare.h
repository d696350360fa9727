// Loading the PyTorch fixtures of scripts/dev/make_fixtures.py and comparing tensors with them: values to
// an absolute tolerance, gradients to 1e-4 relative to the largest entry of their tensor. Set
// TFM_REPORT_DIFFS=1 to print the largest differences seen.
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model_config.h"
#include "tfm/engine/tensor.h"
#include "tfm/models/model.h"
#include "tfm/nn/blocks.h"

namespace tfm::testing {

using json = nlohmann::json;

inline json load_fixture(const std::string& name) {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/" + name + ".json";
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

inline Tensor to_tensor(const json& j) {
  return Tensor::from_vector(j.at("data").get<std::vector<float>>(), j.at("shape").get<Shape>());
}

inline void copy_into(Tensor& dst, const json& j) {
  REQUIRE(dst.shape() == j.at("shape").get<Shape>());
  dst.copy_from(to_tensor(j));
}

// Every parameter of `m` set from the fixture's "params" (same names) and made a leaf that requires
// grad; returns them by name.
inline std::vector<std::pair<std::string, Tensor*>> load_parameters(Module& m, const json& fx) {
  auto params = m.named_parameters();
  REQUIRE(params.size() == fx.at("params").size());
  for (auto& [name, t] : params) {
    INFO("parameter " << name);
    REQUIRE(fx.at("params").contains(name));
    copy_into(*t, fx.at("params").at(name));
    t->set_requires_grad(true);
  }
  return params;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Largest |ours - theirs| over the tensor.
inline double max_diff(const Tensor& ours, const json& theirs) {
  REQUIRE(ours.shape() == theirs.at("shape").get<Shape>());
  const std::vector<float> a = ours.to_vector();
  const std::vector<float> b = theirs.at("data").get<std::vector<float>>();
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Largest |a - b| over two tensors of one shape.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x[i]) - y[i]));
  return m;
}

inline void report(const std::string& what, double diff) {
  if (std::getenv("TFM_REPORT_DIFFS")) std::printf("  %-48s max diff %.3g\n", what.c_str(), diff);
}

// Gradients: max |ours - theirs| <= 1e-4 * max |theirs| + 1e-6. The floor is for tensors whose
// gradient is zero in exact arithmetic, like the key bias (softmax ignores a shift shared by a row),
// where both sides hold only roundoff (~1e-8).
inline void check_gradient(const std::string& name, const Tensor& grad, const json& theirs) {
  INFO("gradient of " << name);
  REQUIRE(grad.defined());
  const double diff = max_diff(grad, theirs);
  const double scale = max_abs(theirs.at("data").get<std::vector<float>>());
  if (std::getenv("TFM_REPORT_DIFFS"))
    std::printf("  %-48s max diff %.3g (relative to its largest entry %.3g: %.3g)\n",
                ("grad " + name).c_str(), diff, scale, diff / std::max(scale, 1e-30));
  CHECK(diff <= 1e-4 * scale + 1e-6);
}

// The fixture's "config" (the LM's keys, torch_lm.model_config, or the encoder-decoder's) through the
// key table: each of its keys becomes a `--set model.KEY=VALUE` (a key the table does not know fails
// there), the objective follows from what the model is (encoder-decoder: seq2seq; bidirectional:
// masked_lm), and the key table fills in the rest as for a run.
inline ModelConfig config_from(const json& c) {
  std::vector<std::string> sets;
  for (const auto& [key, value] : c.items())
    if (key != "vocab_size" && key != "source_vocab_size")
      sets.push_back("model." + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
  if (c.contains("n_encoder_layers"))
    sets.push_back("train.objective=seq2seq");
  else if (!c.value("causal", true))
    sets.push_back("train.objective=masked_lm");
  ModelConfig m = tfm_test::model_config_from(sets, c.at("vocab_size"));
  m.source_vocab_size = c.value("source_vocab_size", int64_t{0});
  return m;
}

// Copies the fixture's "params" into the model's parameters: the same names and count.
inline void load_parameters(const Model& model, const json& params) {
  REQUIRE(model.parameters().size() == params.size());
  for (const NamedParameter& p : model.parameters()) {
    INFO("parameter " << p.name);
    REQUIRE(params.contains(p.name));
    Tensor v = p.value;
    copy_into(v, params.at(p.name));
  }
}

// Logits and loss against the fixture's to 1e-5; then the backward (gradients zeroed first by the
// caller) and every parameter's gradient against the fixture's "grads".
inline void check_logits_loss_gradients(const std::string& name, const Model& model, const json& fx,
                                        const Tensor& logits, const Tensor& loss) {
  const double logit_diff = max_diff(logits, fx.at("logits"));
  const double loss_diff = std::fabs(loss.item() - fx.at("loss").get<double>());
  report(name + " logits", logit_diff);
  report(name + " loss", loss_diff);
  CHECK(logit_diff <= 1e-5);
  CHECK(loss_diff <= 1e-5);
  loss.backward();
  for (const NamedParameter& p : model.parameters())
    check_gradient(p.name, p.value.grad(), fx.at("grads").at(p.name));
}

}  // namespace tfm::testing
