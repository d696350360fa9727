// Central-difference gradient checks, accumulated in double.
//
// check_gradients(f, inputs) makes every input a leaf that requires grad, computes out = f(inputs)
// and the analytic gradient of L = sum(out * R) for a fixed random R (so every output element
// matters), then compares it with (L(x + eps) - L(x - eps)) / (2 eps) for every input element, L
// summed in double. Pass when |analytic - numeric| <= atol + rtol * |numeric|.
// Defaults (eps 1e-2 on float32 values of order 1, atol 2e-3, rtol 2e-2) are stated in each failure.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <sstream>
#include <vector>

#include "tfm/engine/ops.h"
#include "tfm/engine/tensor.h"

namespace tfm::testing {

struct GradCheckOptions {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  uint64_t seed = 7;
};

inline double weighted_sum(const Tensor& out, const std::vector<float>& r) {
  const std::vector<float> v = out.to_vector();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            std::vector<Tensor> inputs, GradCheckOptions opt = {}) {
  for (Tensor& t : inputs) {
    t.set_grad(Tensor());
    t.set_requires_grad(true);
  }
  Tensor out = f(inputs);
  Rng rng(opt.seed);
  std::vector<float> r(static_cast<size_t>(out.numel()));
  for (float& v : r) v = rng.normal();
  out.backward(Tensor::from_vector(r, out.shape()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    REQUIRE(t.is_contiguous());
    const Tensor g = t.grad();
    std::vector<float> analytic = g.defined() ? g.to_vector() : std::vector<float>(t.numel(), 0.0f);
    float* p = t.data();
    int failures = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float saved = p[i];
      double lp, lm;
      {
        NoGradGuard ng;
        p[i] = saved + static_cast<float>(opt.eps);
        lp = weighted_sum(f(inputs), r);
        p[i] = saved - static_cast<float>(opt.eps);
        lm = weighted_sum(f(inputs), r);
      }
      p[i] = saved;
      const double numeric = (lp - lm) / (2.0 * opt.eps);
      const double diff = std::fabs(analytic[i] - numeric);
      if (diff > opt.atol + opt.rtol * std::fabs(numeric) && failures++ < 5) {
        std::ostringstream os;
        os << "input " << k << " " << shape_str(t.shape()) << " element " << i << ": analytic " << analytic[i]
           << " numeric " << numeric << " (eps " << opt.eps << ", atol " << opt.atol << ", rtol " << opt.rtol
           << ")";
        FAIL_CHECK(os.str());
      }
    }
    CHECK(failures == 0);
  }
}

// Every parameter element of `model` (anything with flat_values(), flat_grads(), parameter_count()):
// the analytic gradient of loss() against (loss(w + eps) - loss(w - eps)) / (2 eps), one element at a
// time, with eps 1e-2, atol 1e-3, rtol 2e-2 (stated in each failure; the first five are reported).
template <typename Model>
void check_every_parameter(Model& model, const std::function<Tensor()>& loss) {
  model.flat_grads().fill_(0.0f);
  loss().backward();
  const std::vector<float> analytic = model.flat_grads().to_vector();
  float* values = model.flat_values().data();
  int failures = 0;
  const double eps = 1e-2;
  for (int64_t i = 0; i < model.parameter_count(); ++i) {
    const float saved = values[i];
    double lp, lm;
    {
      NoGradGuard no_grad;
      values[i] = saved + static_cast<float>(eps);
      lp = loss().item();
      values[i] = saved - static_cast<float>(eps);
      lm = loss().item();
    }
    values[i] = saved;
    const double numeric = (lp - lm) / (2 * eps);
    if (std::fabs(analytic[i] - numeric) > 1e-3 + 2e-2 * std::fabs(numeric) && failures++ < 5)
      FAIL_CHECK("parameter element " << i << ": analytic " << analytic[i] << " numeric " << numeric
                                      << " (eps 1e-2, atol 1e-3, rtol 2e-2)");
  }
  CHECK(failures == 0);
}

}  // namespace tfm::testing
