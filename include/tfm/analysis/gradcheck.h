// Whole-model gradient check by central differences, for any loss written with the engine's ops.
//
// The caller gives a closure that runs the model and returns its output (a 1-element loss, or any
// tensor: then L = sum(out * R) for a fixed random R, so every output element matters), the model's
// flat value and gradient buffers, and its table of named parameters. For each parameter tensor and a
// few random unit directions u (over that tensor's elements), the analytic directional derivative
// g . u from one backward pass is compared with (L(x + eps u) - L(x - eps u)) / (2 eps), L summed in
// double. A direction moves every element of the tensor at once, so one pair of forwards checks the
// whole tensor's gradient. Float32 rounding moves L by tens of ulps between forwards: derivatives
// below that level (the floor) are judged against the floor, not against themselves.
//
// Kinks (ReLU) make central differences wrong where the step crosses one. A crossed kink shows in
// the second differences f(+h) + f(-h) - 2 f(0) at h, h/2 and h/4: a smooth function's are second
// order (each a quarter of the previous), a crossed kink's first order. Such a direction cannot be
// judged and is drawn again (up to max_redraws per tensor). The test reads only L's values, never
// the analytic gradient, so a wrong backward formula cannot hide behind it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tfm/engine/tensor.h"
#include "tfm/models/language_model.h"

namespace tfm {

struct GradCheckOptions {
  double eps = 1e-3;   // step along each unit direction (small: ReLU kinks are crossed rarely)
  int directions = 4;  // random directions per parameter tensor
  // Relative errors are taken against max(|analytic|, |numeric|, floor): a derivative at the level of
  // float32 rounding in L cannot be checked. The floor used is the larger of `floor` and
  // noise * |L| * FLT_EPSILON / eps (what rounding in the forward passes can move the difference by).
  double floor = 0;
  double noise = 100;
  double tolerance = 1e-2;  // largest relative error that passes
  int max_redraws = 32;     // per tensor: directions drawn again because the step crossed a kink
  uint64_t seed = 1;        // of R and the directions
};

struct ParameterGradCheck {
  std::string name;
  Shape shape;
  double worst_relative_error = 0;   // over the directions
  double analytic = 0, numeric = 0;  // of the worst direction
};

struct GradCheckReport {
  std::vector<ParameterGradCheck> parameters;  // in the table's order
  double worst_relative_error = 0;
  std::string worst_parameter;
  int64_t kinks = 0;    // directions drawn again because the step crossed a kink
  bool passed = false;  // worst_relative_error <= tolerance
  double loss = 0;      // L at the unperturbed values
  double floor = 0;     // the floor used
  int64_t forward_passes = 0;
};

// Checks the gradient of `loss` with respect to every parameter of `parameters` (views into `values`,
// whose gradients are the matching views into `grads`). Leaves the values as it found them and the
// gradients holding the analytic gradient.
GradCheckReport gradient_check(const std::function<Tensor()>& loss, Tensor values, Tensor grads,
                               const std::vector<NamedParameter>& parameters,
                               const GradCheckOptions& options = {});

}  // namespace tfm
