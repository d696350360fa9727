#include "tfm/analysis/gradcheck.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/random.h"

namespace tfm {
namespace {

// L = sum(out * r) in double (r empty: out is a 1-element loss).
double weighted_sum(const Tensor& out, const std::vector<float>& r) {
  const std::vector<float> v = out.to_vector();
  if (r.empty()) return static_cast<double>(v.at(0));
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

}  // namespace

GradCheckReport gradient_check(const std::function<Tensor()>& loss, Tensor values, Tensor grads,
                               const std::vector<NamedParameter>& parameters, const GradCheckOptions& o) {
  TFM_CHECK(values.defined() && grads.defined() && values.numel() == grads.numel() &&
                values.is_contiguous() && grads.is_contiguous(),
            "gradient_check", "expected contiguous flat value and gradient buffers of one size");
  TFM_CHECK(o.eps > 0 && o.directions >= 1 && o.floor >= 0 && o.noise >= 0, "gradient_check",
            "expected eps > 0, directions >= 1, floor >= 0, noise >= 0, got ", o.eps, ", ", o.directions,
            ", ", o.floor, ", ", o.noise);
  Rng rng(o.seed);
  GradCheckReport report;

  // The analytic gradient: one backward of L.
  grads.fill_(0.0f);
  std::vector<float> r;
  {
    const Tensor out = loss();
    ++report.forward_passes;
    if (out.numel() != 1) {
      r.resize(static_cast<size_t>(out.numel()));
      for (float& v : r) v = rng.normal();
    }
    report.loss = weighted_sum(out, r);
    if (r.empty())
      out.backward();
    else
      out.backward(Tensor::from_vector(r, out.shape()));
  }
  report.floor = std::max(o.floor, o.noise * std::fabs(report.loss) * FLT_EPSILON / o.eps);
  const std::vector<float> g = grads.to_vector();

  float* x = values.data();
  for (const NamedParameter& p : parameters) {
    const int64_t n = p.value.numel();
    TFM_CHECK(p.offset >= 0 && p.offset + n <= values.numel(), "gradient_check", p.name, " at ", p.offset,
              " of ", n, " values lies outside the flat buffer of ", values.numel());
    ParameterGradCheck c{p.name, p.value.shape()};
    std::vector<float> saved(x + p.offset, x + p.offset + n), u(static_cast<size_t>(n));
    // L(saved + step * u), the parameter restored afterwards.
    auto loss_at = [&](double step) {
      for (int64_t i = 0; i < n; ++i) x[p.offset + i] = saved[i] + static_cast<float>(step) * u[i];
      NoGradGuard no_grad;
      const double l = weighted_sum(loss(), r);
      ++report.forward_passes;
      std::copy(saved.begin(), saved.end(), x + p.offset);
      return l;
    };
    const double l0 = loss_at(0.0);
    // Second differences f(+h) + f(-h) - 2 f(0) at h, h/2, h/4: a smooth L gives ratios of 1/4 (they
    // are O(h^2)); a kink crossed at any distance d < h breaks one of them (Delta (h - d) is O(h)).
    // Ratios are read only where the differences stand above rounding.
    const double rounding = 20 * std::fabs(l0) * FLT_EPSILON;
    auto smooth_ratio = [&](double big, double small, double scale, double h) {
      if (std::fabs(big) <= std::max(0.1 * o.tolerance * scale * h, rounding))
        return true;  // too small to matter
      if (std::fabs(small) <= rounding)
        return std::fabs(big) / 4 <= 2 * rounding;  // vanished: a kink, if readable
      return small / big > 0.15 && small / big < 0.35;
    };
    int redraws = 0;
    for (int d = 0; d < o.directions; ++d) {
      double norm = 0;
      for (float& v : u) v = rng.normal(), norm += static_cast<double>(v) * v;
      norm = std::sqrt(norm);
      double analytic = 0;
      for (int64_t i = 0; i < n; ++i) {
        u[i] = static_cast<float>(u[i] / norm);
        analytic += static_cast<double>(g[p.offset + i]) * u[i];
      }
      const double h = o.eps;
      const double lp = loss_at(h), lm = loss_at(-h);
      const double numeric = (lp - lm) / (2.0 * h);
      const double scale = std::max({std::fabs(analytic), std::fabs(numeric), report.floor});
      const double s1 = lp + lm - 2 * l0, s2 = loss_at(h / 2) + loss_at(-h / 2) - 2 * l0;
      const double s3 = loss_at(h / 4) + loss_at(-h / 4) - 2 * l0;
      if (!(smooth_ratio(s1, s2, scale, h) && smooth_ratio(s2, s3, scale, h / 2)) &&
          redraws < o.max_redraws) {
        ++redraws, ++report.kinks, --d;  // a kink within the step: this direction cannot be judged
        continue;
      }
      const double err = std::fabs(analytic - numeric) / scale;
      if (!(err <= c.worst_relative_error))
        c.worst_relative_error = err, c.analytic = analytic, c.numeric = numeric;
    }
    if (!(c.worst_relative_error <= report.worst_relative_error))
      report.worst_relative_error = c.worst_relative_error, report.worst_parameter = c.name;
    report.parameters.push_back(std::move(c));
  }
  report.passed = report.worst_relative_error <= o.tolerance;
  return report;
}

}  // namespace tfm
