// Central-difference gradient checks for every op in include/tfm/engine/ops.h: one TEST_CASE per op, named
// "grad: <op>", each covering the op's shapes (broadcasting, batching, axes), a non-contiguous
// (transposed) input where the op accepts one, and the op's output used twice in one graph.
// Tolerances are gradcheck.h's defaults (eps 1e-2, atol 2e-3, rtol 2e-2) unless a check states others.
//
// How to add an op: give it a TEST_CASE("grad: <name>", "[grad]") here that calls check_gradients on
// tiny shapes; pick inputs away from the op's kinks and poles (see the input makers below).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "gradcheck.h"

using namespace tfm;
using tfm::testing::check_gradients;
using OpsInputs = std::vector<Tensor>;
using UnaryOp = std::function<Tensor(const Tensor&)>;
using BinaryOp = std::function<Tensor(const Tensor&, const Tensor&)>;
using Maker = std::function<Tensor(const Shape&, uint64_t)>;

namespace {

// ---- input makers: values that keep x +- eps inside the op's smooth region ----

Tensor normal(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::randn(shape, rng);
}

// Uniform in [0.5, 2): for log, sqrt, pow and divisors.
Tensor positive(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::uniform(shape, rng, 0.5f, 2.0f);
}

// Normal values pushed at least 0.2 away from 0: for relu's kink and rdiv's pole.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor t = normal(shape, seed);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] += p[i] >= 0.0f ? 0.2f : -0.2f;
  return t;
}

// Distinct values 0.1 apart in a seeded random order: max's argmax cannot move under +- eps.
Tensor distinct(const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = 0.1f * static_cast<float>(i) - 0.05f * static_cast<float>(n);
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[rng.below(static_cast<uint64_t>(i + 1))]);
  return Tensor::from_vector(v, shape);
}

// A 0/1 float mask with both values present.
Tensor bernoulli_mask(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  Tensor m = Tensor::empty(shape);
  for (int64_t i = 0; i < m.numel(); ++i)
    m.data()[i] = (i == 0 || (i != 1 && rng.uniform() < 0.5f)) ? 1.0f : 0.0f;
  return m;
}

// ---- shared checks ----

// An elementwise unary op on a contiguous input, a transposed view, a 3-D input, and with its output
// used twice (y * (y + 1)).
void check_unary(const UnaryOp& op, const Maker& make) {
  SECTION("contiguous (3, 4)") {
    check_gradients([&](const OpsInputs& in) { return op(in[0]); }, {make({3, 4}, 1)});
  }
  SECTION("transposed view of (4, 3)") {
    check_gradients([&](const OpsInputs& in) { return op(transpose(in[0], 0, 1)); }, {make({4, 3}, 2)});
  }
  SECTION("3-D (2, 2, 3)") {
    check_gradients([&](const OpsInputs& in) { return op(in[0]); }, {make({2, 2, 3}, 3)});
  }
  SECTION("output used twice") {
    check_gradients(
        [&](const OpsInputs& in) {
          const Tensor y = op(in[0]);
          return mul(y, add(y, 1.0f));
        },
        {make({2, 3}, 4)});
  }
}

// A broadcasting binary op over the shapes NumPy allows, transposed views, the same tensor on both
// sides, and its output used twice.
void check_binary(const BinaryOp& op, const Maker& make_a, const Maker& make_b) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {3, 4}}, {{3, 1, 4}, {2, 4}}, {{4}, {3, 4}}, {{3, 4}, {1}},
      {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}}, {{1}, {2, 3}}, {{2, 1, 3}, {2, 4, 1}},
      {{2, 3}, {}},     {{}, {3}},           {{}, {}}};  // {} is 0-dim (a loss)
  SECTION("broadcasting shapes") {
    uint64_t seed = 10;
    for (const Case& c : cases) {
      INFO("a " << shape_str(c.a) << " b " << shape_str(c.b));
      check_gradients([&](const OpsInputs& in) { return op(in[0], in[1]); },
                      {make_a(c.a, seed), make_b(c.b, seed + 1)});
      seed += 2;
    }
  }
  SECTION("transposed view operands") {
    check_gradients([&](const OpsInputs& in) { return op(transpose(in[0], 0, 1), in[1]); },
                    {make_a({4, 3}, 1), make_b({3, 4}, 2)});
    check_gradients([&](const OpsInputs& in) { return op(in[0], transpose(in[1], 0, 1)); },
                    {make_a({3, 4}, 3), make_b({4, 3}, 4)});
    check_gradients([&](const OpsInputs& in) { return op(transpose(in[0], 0, 1), transpose(in[1], 0, 1)); },
                    {make_a({4, 3}, 5), make_b({4, 3}, 6)});
  }
  SECTION("transposed view broadcast against (3,)") {
    check_gradients([&](const OpsInputs& in) { return op(transpose(in[0], 0, 1), in[1]); },
                    {make_a({3, 4}, 7), make_b({3}, 8)});
  }
  SECTION("the same tensor on both sides") {
    check_gradients([&](const OpsInputs& in) { return op(in[0], in[0]); }, {make_b({3, 4}, 9)});
  }
  SECTION("output used twice") {
    check_gradients(
        [&](const OpsInputs& in) {
          const Tensor y = op(in[0], in[1]);
          return mul(y, tanh(y));
        },
        {make_a({2, 3}, 11), make_b({3}, 12)});
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Elementwise binary, with broadcasting

TEST_CASE("grad: add", "[grad]") {
  check_binary([](const Tensor& a, const Tensor& b) { return add(a, b); }, normal, normal);
}
TEST_CASE("grad: sub", "[grad]") {
  check_binary([](const Tensor& a, const Tensor& b) { return sub(a, b); }, normal, normal);
}
TEST_CASE("grad: mul", "[grad]") {
  check_binary([](const Tensor& a, const Tensor& b) { return mul(a, b); }, normal, normal);
}
TEST_CASE("grad: div", "[grad]") {
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, normal, positive);
}

// ---------------------------------------------------------------------------------------------
// Scalar variants

TEST_CASE("grad: add scalar", "[grad]") {
  check_unary([](const Tensor& x) { return add(x, 1.5f); }, normal);
}
TEST_CASE("grad: sub scalar", "[grad]") {
  check_unary([](const Tensor& x) { return sub(x, 0.7f); }, normal);
}
TEST_CASE("grad: mul scalar", "[grad]") {
  check_unary([](const Tensor& x) { return mul(x, -2.5f); }, normal);
}
TEST_CASE("grad: div scalar", "[grad]") {
  check_unary([](const Tensor& x) { return div(x, 0.4f); }, normal);
}
TEST_CASE("grad: rsub", "[grad]") {
  check_unary([](const Tensor& x) { return rsub(3.0f, x); }, normal);
}
TEST_CASE("grad: rdiv", "[grad]") {
  check_unary([](const Tensor& x) { return rdiv(2.0f, x); }, positive);
}

// ---------------------------------------------------------------------------------------------
// Elementwise unary

TEST_CASE("grad: neg", "[grad]") {
  check_unary([](const Tensor& x) { return neg(x); }, normal);
}
TEST_CASE("grad: exp", "[grad]") {
  check_unary([](const Tensor& x) { return exp(x); }, normal);
}
TEST_CASE("grad: log", "[grad]") {
  check_unary([](const Tensor& x) { return log(x); }, positive);
}
TEST_CASE("grad: sqrt", "[grad]") {
  check_unary([](const Tensor& x) { return sqrt(x); }, positive);
}
TEST_CASE("grad: pow", "[grad]") {
  // GENERATE, not a loop: check_unary's SECTIONs run once per test-case run.
  const float p = GENERATE(2.0f, 3.0f, 0.5f, -1.5f);
  INFO("exponent " << p);
  check_unary([p](const Tensor& x) { return pow(x, p); }, positive);
}
TEST_CASE("grad: tanh", "[grad]") {
  check_unary([](const Tensor& x) { return tanh(x); }, normal);
}
TEST_CASE("grad: relu", "[grad]") {
  check_unary([](const Tensor& x) { return relu(x); }, away_from_zero);
}
TEST_CASE("grad: gelu", "[grad]") {
  check_unary([](const Tensor& x) { return gelu(x); }, normal);
}

// ---------------------------------------------------------------------------------------------
// Matrix products

TEST_CASE("grad: matmul", "[grad]") {
  const auto mm = [](bool ta, bool tb) {
    return [ta, tb](const OpsInputs& in) { return matmul(in[0], in[1], ta, tb); };
  };
  SECTION("2-D, all four trans_a/trans_b combinations") {
    // Stored shapes: a (M, K) or (K, M), b (K, N) or (N, K); M = 3, K = 4, N = 5.
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("trans_a " << ta << " trans_b " << tb);
        check_gradients(mm(ta, tb), {normal(ta ? Shape{4, 3} : Shape{3, 4}, 1),
                                     normal(tb ? Shape{5, 4} : Shape{4, 5}, 2)});
      }
  }
  SECTION("batched with equal batch dims, all four combinations") {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("trans_a " << ta << " trans_b " << tb);
        check_gradients(mm(ta, tb), {normal(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 3),
                                     normal(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 4)});
      }
  }
  SECTION("two leading batch dims") {
    check_gradients(mm(false, false), {normal({2, 2, 2, 3}, 5), normal({2, 2, 3, 2}, 6)});
  }
  SECTION("batched left x shared 2-D right (the folded path)") {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("trans_a " << ta << " trans_b " << tb);
        check_gradients(mm(ta, tb), {normal(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 7),
                                     normal(tb ? Shape{5, 4} : Shape{4, 5}, 8)});
      }
  }
  SECTION("2-D left x batched right") {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("trans_a " << ta << " trans_b " << tb);
        check_gradients(mm(ta, tb), {normal(ta ? Shape{4, 3} : Shape{3, 4}, 9),
                                     normal(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 10)});
      }
  }
  SECTION("transposed views passed to BLAS as transposed operands") {
    check_gradients([](const OpsInputs& in) { return matmul(transpose(in[0], -1, -2), in[1]); },
                    {normal({4, 3}, 11), normal({4, 5}, 12)});
    check_gradients([](const OpsInputs& in) { return matmul(in[0], transpose(in[1], -1, -2)); },
                    {normal({3, 4}, 13), normal({5, 4}, 14)});
    check_gradients(
        [](const OpsInputs& in) { return matmul(transpose(in[0], -1, -2), transpose(in[1], -1, -2)); },
        {normal({2, 4, 3}, 15), normal({2, 5, 4}, 16)});
    // A transposed view with a transpose flag: two transposes cancel.
    check_gradients([](const OpsInputs& in) { return matmul(transpose(in[0], -1, -2), in[1], true, false); },
                    {normal({3, 4}, 17), normal({4, 5}, 18)});
    check_gradients([](const OpsInputs& in) { return matmul(in[0], transpose(in[1], -1, -2), false, true); },
                    {normal({3, 4}, 19), normal({4, 5}, 20)});
    // Batched transposed view against a shared 2-D right operand.
    check_gradients([](const OpsInputs& in) { return matmul(transpose(in[0], -1, -2), in[1]); },
                    {normal({2, 4, 3}, 21), normal({4, 5}, 22)});
  }
  SECTION("views with permuted batch dims") {
    // (3, 2, 4) permuted to (2, 3, 4): rows 8 apart, batches 4 apart.
    check_gradients(
        [](const OpsInputs& in) {
          return matmul(permute(in[0], {1, 0, 2}), in[1]);
        },
        {normal({3, 2, 4}, 23), normal({4, 5}, 24)});
    check_gradients(
        [](const OpsInputs& in) {
          return matmul(permute(in[0], {1, 0, 2}), in[1]);
        },
        {normal({3, 2, 4}, 25), normal({2, 4, 5}, 26)});
    // A one-row matrix per batch whose row stride is not K (a (B, T=1, K) view from permute): the
    // batched x shared path must not read rows with that stride.
    check_gradients(
        [](const OpsInputs& in) {
          return matmul(permute(in[0], {1, 0, 2}), in[1]);
        },
        {normal({1, 3, 4}, 27), normal({4, 5}, 28)});
    check_gradients(
        [](const OpsInputs& in) {
          return matmul(permute(in[0], {1, 0, 2}), in[1], false, true);
        },
        {normal({1, 3, 4}, 29), normal({5, 4}, 30)});
  }
  SECTION("strides BLAS cannot take (copied first)") {
    // (2, 3, 4) permuted to (4, 2, 3): neither of the last two dims has stride 1.
    check_gradients(
        [](const OpsInputs& in) {
          return matmul(permute(in[0], {2, 0, 1}), in[1]);
        },
        {normal({2, 3, 4}, 31), normal({4, 3, 2}, 32)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = matmul(in[0], in[1]);  // (3, 2)
          return matmul(y, y, false, true);       // (3, 3)
        },
        {normal({3, 4}, 33), normal({4, 2}, 34)});
  }
}

TEST_CASE("grad: feed_forward", "[grad]") {
  // GELU (smooth; ReLU's kink defeats central differences and is covered by the fused test). Chunks of
  // 2 rows over 5, so the chunked backward's accumulation across chunks is what is checked.
  SECTION("with biases, chunked") {
    check_gradients(
        [](const OpsInputs& in) {
          return feed_forward(in[0], in[1], in[2], in[3], in[4], Activation::Gelu, 2);
        },
        {normal({5, 3}, 1), normal({4, 3}, 2), normal({4}, 3), normal({3, 4}, 4), normal({3}, 5)});
  }
  SECTION("without biases, one chunk") {
    check_gradients(
        [](const OpsInputs& in) {
          return feed_forward(in[0], in[1], Tensor(), in[2], Tensor(), Activation::Gelu);
        },
        {normal({2, 2, 3}, 6), normal({4, 3}, 7), normal({3, 4}, 8)});
  }
}

TEST_CASE("grad: linear", "[grad]") {
  SECTION("with bias, 3-D input") {
    check_gradients([](const OpsInputs& in) { return linear(in[0], in[1], in[2]); },
                    {normal({2, 3, 4}, 1), normal({5, 4}, 2), normal({5}, 3)});
  }
  SECTION("without bias") {
    check_gradients([](const OpsInputs& in) { return linear(in[0], in[1], Tensor()); },
                    {normal({2, 3, 4}, 4), normal({5, 4}, 5)});
  }
  SECTION("2-D and 1-D inputs") {
    check_gradients([](const OpsInputs& in) { return linear(in[0], in[1], in[2]); },
                    {normal({3, 4}, 6), normal({2, 4}, 7), normal({2}, 8)});
    check_gradients([](const OpsInputs& in) { return linear(in[0], in[1], in[2]); },
                    {normal({4}, 9), normal({2, 4}, 10), normal({2}, 11)});
  }
  SECTION("transposed views for x and w") {
    check_gradients(
        [](const OpsInputs& in) { return linear(transpose(in[0], 0, 1), transpose(in[1], 0, 1), in[2]); },
        {normal({4, 3}, 12), normal({4, 5}, 13), normal({5}, 14)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = linear(in[0], in[1], in[2]);  // (3, 4)
          return linear(y, y, Tensor());                 // (3, 3)
        },
        {normal({3, 4}, 15), normal({4, 4}, 16), normal({4}, 17)});
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions

TEST_CASE("grad: sum", "[grad]") {
  check_gradients([](const OpsInputs& in) { return sum(in[0]); }, {normal({2, 3, 4}, 1)});
  check_gradients([](const OpsInputs& in) { return sum(transpose(in[0], 0, 1)); }, {normal({4, 3}, 2)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor s = sum(in[0]);
        return mul(s, s);
      },
      {normal({2, 3}, 3)});
}

TEST_CASE("grad: mean", "[grad]") {
  check_gradients([](const OpsInputs& in) { return mean(in[0]); }, {normal({2, 3, 4}, 1)});
  check_gradients([](const OpsInputs& in) { return mean(transpose(in[0], 0, 1)); }, {normal({4, 3}, 2)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor m = mean(in[0]);
        return mul(m, exp(m));
      },
      {normal({2, 3}, 3)});
}

namespace {
// An axis reduction over every axis of a (2, 3, 4) input, negative axes, keepdim on and off, a
// transposed input, and its output used twice.
void check_axis_reduction(const std::function<Tensor(const Tensor&, int64_t, bool)>& op, const Maker& make) {
  SECTION("every axis, with and without keepdim") {
    uint64_t seed = 1;
    for (int64_t axis : {0, 1, 2, -1, -2, -3})
      for (bool keepdim : {false, true}) {
        INFO("axis " << axis << " keepdim " << keepdim);
        check_gradients([&](const OpsInputs& in) { return op(in[0], axis, keepdim); },
                        {make({2, 3, 4}, seed++)});
      }
  }
  SECTION("transposed view input") {
    for (int64_t axis : {0, 1}) {
      INFO("axis " << axis);
      check_gradients([&](const OpsInputs& in) { return op(transpose(in[0], 0, 1), axis, false); },
                      {make({4, 3}, 20)});
    }
  }
  SECTION("output used twice") {
    check_gradients(
        [&](const OpsInputs& in) {
          const Tensor y = op(in[0], -1, true);  // (2, 1)
          return mul(y, add(in[0], y));          // (2, 3)
        },
        {make({2, 3}, 21)});
  }
}
}  // namespace

TEST_CASE("grad: sum axis", "[grad]") {
  check_axis_reduction([](const Tensor& x, int64_t a, bool k) { return sum(x, a, k); }, normal);
}
TEST_CASE("grad: mean axis", "[grad]") {
  check_axis_reduction([](const Tensor& x, int64_t a, bool k) { return mean(x, a, k); }, normal);
}
TEST_CASE("grad: max", "[grad]") {
  check_axis_reduction([](const Tensor& x, int64_t a, bool k) { return max(x, a, k); }, distinct);
}

// ---------------------------------------------------------------------------------------------
// Softmax, losses, normalisation

TEST_CASE("grad: softmax", "[grad]") {
  check_unary([](const Tensor& x) { return softmax(x); }, normal);
}
TEST_CASE("grad: log_softmax", "[grad]") {
  check_unary([](const Tensor& x) { return log_softmax(x); }, normal);
}

TEST_CASE("grad: cross_entropy", "[grad]") {
  SECTION("2-D logits with an ignored row") {
    check_gradients(
        [](const OpsInputs& in) {
          return cross_entropy(in[0], {1, -100, 4, 0});
        },
        {normal({4, 5}, 1)});
  }
  SECTION("3-D logits, every row counted") {
    check_gradients(
        [](const OpsInputs& in) {
          return cross_entropy(in[0], {0, 2, 3, 1});
        },
        {normal({2, 2, 4}, 2)});
  }
  SECTION("a custom ignore_index") {
    check_gradients(
        [](const OpsInputs& in) {
          return cross_entropy(in[0], {3, 1, 3, 2}, 3);
        },
        {normal({4, 4}, 3)});
  }
  SECTION("every row ignored: loss 0, gradient 0") {
    check_gradients(
        [](const OpsInputs& in) {
          return cross_entropy(in[0], {-100, -100});
        },
        {normal({2, 3}, 4)});
  }
  SECTION("transposed view logits") {
    check_gradients(
        [](const OpsInputs& in) {
          return cross_entropy(transpose(in[0], 0, 1), {2, 0, -100, 1});
        },
        {normal({3, 4}, 5)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor l = cross_entropy(in[0], {1, 0, 2});
          return mul(l, l);
        },
        {normal({3, 3}, 6)});
  }
}

TEST_CASE("grad: layer_norm", "[grad]") {
  SECTION("gradients of x, w and b") {
    check_gradients([](const OpsInputs& in) { return layer_norm(in[0], in[1], in[2]); },
                    {normal({3, 5}, 1), normal({5}, 2), normal({5}, 3)});
  }
  SECTION("3-D input") {
    check_gradients([](const OpsInputs& in) { return layer_norm(in[0], in[1], in[2]); },
                    {normal({2, 2, 4}, 4), normal({4}, 5), normal({4}, 6)});
  }
  SECTION("transposed view input") {
    check_gradients([](const OpsInputs& in) { return layer_norm(transpose(in[0], 0, 1), in[1], in[2]); },
                    {normal({5, 3}, 7), normal({5}, 8), normal({5}, 9)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = layer_norm(in[0], in[1], in[2]);
          return mul(y, y);
        },
        {normal({2, 4}, 10), normal({4}, 11), normal({4}, 12)});
  }
}

TEST_CASE("grad: rms_norm", "[grad]") {
  SECTION("gradients of x and w") {
    check_gradients([](const OpsInputs& in) { return rms_norm(in[0], in[1]); },
                    {normal({3, 5}, 21), normal({5}, 22)});
  }
  SECTION("3-D input through a transposed view, output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = rms_norm(transpose(in[0], 0, 1), in[1], 1e-3f);
          return mul(y, y);
        },
        {normal({4, 2, 3}, 23), normal({3}, 24)});
  }
}

TEST_CASE("grad: rope", "[grad]") {
  // Head width 4 (two pairs), 3 heads, positions from 2: the backward is the opposite rotation.
  const auto [cos, sin] = rope_table(8, 4, 100.0);
  SECTION("(B, T, heads * D)") {
    check_gradients([&](const OpsInputs& in) { return rope(in[0], 3, cos, sin, 2); },
                    {normal({2, 3, 12}, 25)});
  }
  SECTION("a transposed view, output used twice") {
    check_gradients(
        [&](const OpsInputs& in) {
          const Tensor y = rope(transpose(in[0], 0, 1), 1, cos, sin, 0);
          return mul(y, y);
        },
        {normal({5, 2, 4}, 26)});
  }
}

// ---------------------------------------------------------------------------------------------
// Indexing and masking

TEST_CASE("grad: embedding", "[grad]") {
  // Ids repeat (1 three times), so the backward's scatter-add must accumulate.
  const std::vector<int32_t> ids = {1, 3, 1, 0, 1, 4};
  SECTION("repeated ids") {
    check_gradients([&](const OpsInputs& in) { return embedding(in[0], ids, {2, 3}); }, {normal({5, 3}, 1)});
  }
  SECTION("transposed view weight") {
    check_gradients([&](const OpsInputs& in) { return embedding(transpose(in[0], 0, 1), ids, {6}); },
                    {normal({3, 5}, 2)});
  }
  SECTION("output used twice") {
    check_gradients(
        [&](const OpsInputs& in) {
          const Tensor y = embedding(in[0], ids, {6});
          return mul(y, y);
        },
        {normal({5, 2}, 3)});
  }
}

TEST_CASE("grad: dropout", "[grad]") {
  // The Rng is re-seeded inside f, so every call of f draws the same mask.
  const auto train = [](const Tensor& x) {
    Rng rng(42);
    return dropout(x, 0.5f, true, rng);
  };
  SECTION("training: the mask is not trivial") {
    const Tensor y = train(Tensor::ones({4, 4}));
    int zeros = 0, scaled = 0;
    for (float v : y.to_vector()) {
      if (v == 0.0f) ++zeros;
      if (v == 2.0f) ++scaled;
    }
    CHECK(zeros > 0);
    CHECK(scaled > 0);
    CHECK(zeros + scaled == 16);
  }
  SECTION("training mode") {
    check_unary(train, normal);
  }
  SECTION("eval mode is the identity") {
    Rng rng(1);
    const Tensor x = normal({3, 4}, 1);
    CHECK(dropout(x, 0.5f, false, rng).to_vector() == x.to_vector());
    check_unary(
        [](const Tensor& x) {
          Rng r(7);
          return dropout(x, 0.5f, false, r);
        },
        normal);
  }
}

TEST_CASE("grad: masked_fill", "[grad]") {
  SECTION("mask broadcast over columns") {
    check_gradients(
        [](const OpsInputs& in) {
          return masked_fill(in[0], bernoulli_mask({3, 1}, 1), -5.0f);
        },
        {normal({3, 4}, 2)});
  }
  SECTION("full mask, 3-D") {
    check_gradients(
        [](const OpsInputs& in) {
          return masked_fill(in[0], bernoulli_mask({2, 3, 4}, 3), 7.0f);
        },
        {normal({2, 3, 4}, 4)});
  }
  SECTION("transposed view input") {
    check_gradients(
        [](const OpsInputs& in) { return masked_fill(transpose(in[0], 0, 1), bernoulli_mask({4}, 5), 0.0f); },
        {normal({4, 3}, 6)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = masked_fill(in[0], bernoulli_mask({2, 3}, 7), 2.0f);
          return mul(y, y);
        },
        {normal({2, 3}, 8)});
  }
}

TEST_CASE("grad: where", "[grad]") {
  SECTION("same shapes") {
    check_gradients(
        [](const OpsInputs& in) {
          return where(bernoulli_mask({3, 4}, 1), in[0], in[1]);
        },
        {normal({3, 4}, 2), normal({3, 4}, 3)});
  }
  SECTION("broadcast condition and operands") {
    check_gradients(
        [](const OpsInputs& in) {
          return where(bernoulli_mask({3, 1}, 4), in[0], in[1]);
        },
        {normal({3, 4}, 5), normal({4}, 6)});
    check_gradients(
        [](const OpsInputs& in) {
          return where(bernoulli_mask({2, 3, 4}, 7), in[0], in[1]);
        },
        {normal({1, 4}, 8), normal({3, 1}, 9)});
  }
  SECTION("transposed view operand") {
    check_gradients(
        [](const OpsInputs& in) {
          return where(bernoulli_mask({3, 4}, 10), transpose(in[0], 0, 1), in[1]);
        },
        {normal({4, 3}, 11), normal({3, 4}, 12)});
  }
  SECTION("the same tensor on both sides, output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = where(bernoulli_mask({2, 3}, 13), in[0], mul(in[0], 3.0f));
          return mul(y, y);
        },
        {normal({2, 3}, 14)});
  }
}

// ---------------------------------------------------------------------------------------------
// Shape ops

TEST_CASE("grad: concat", "[grad]") {
  SECTION("axis 0") {
    check_gradients(
        [](const OpsInputs& in) {
          return concat({in[0], in[1]}, 0);
        },
        {normal({2, 3}, 1), normal({1, 3}, 2)});
  }
  SECTION("axis 1 and -1, three inputs") {
    check_gradients(
        [](const OpsInputs& in) {
          return concat({in[0], in[1], in[2]}, 1);
        },
        {normal({2, 3}, 3), normal({2, 1}, 4), normal({2, 2}, 5)});
    check_gradients(
        [](const OpsInputs& in) {
          return concat({in[0], in[1]}, -1);
        },
        {normal({2, 2, 3}, 6), normal({2, 2, 2}, 7)});
  }
  SECTION("transposed view input") {
    check_gradients(
        [](const OpsInputs& in) {
          return concat({transpose(in[0], 0, 1), in[1]}, 1);
        },
        {normal({3, 2}, 8), normal({2, 2}, 9)});
  }
  SECTION("the same tensor twice, output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = concat({in[0], in[0]}, 0);  // (4, 3)
          return mul(y, y);
        },
        {normal({2, 3}, 10)});
  }
}

TEST_CASE("grad: split", "[grad]") {
  SECTION("axis 1, parts recombined with broadcasting") {
    check_gradients(
        [](const OpsInputs& in) {
          const std::vector<Tensor> p = split(in[0], {1, 3}, 1);  // (3, 1), (3, 3)
          return mul(p[1], p[0]);
        },
        {normal({3, 4}, 1)});
  }
  SECTION("axis 0 and -1, three parts") {
    check_gradients(
        [](const OpsInputs& in) {
          const std::vector<Tensor> p = split(in[0], {1, 2, 1}, 0);  // (1, 4), (2, 4), (1, 4)
          return add(mul(p[1], p[0]), p[2]);
        },
        {normal({4, 4}, 2)});
    check_gradients(
        [](const OpsInputs& in) {
          const std::vector<Tensor> p = split(in[0], {2, 2}, -1);
          return concat({p[1], p[0]}, 0);
        },
        {normal({3, 4}, 3)});
  }
  SECTION("transposed view input") {
    check_gradients(
        [](const OpsInputs& in) {
          const std::vector<Tensor> p = split(transpose(in[0], 0, 1), {2, 1}, 1);  // (4, 2), (4, 1)
          return mul(p[0], exp(p[1]));
        },
        {normal({3, 4}, 4)});
  }
}

TEST_CASE("grad: reshape", "[grad]") {
  SECTION("contiguous input (a view), with -1") {
    check_gradients([](const OpsInputs& in) { return reshape(in[0], {2, 6}); }, {normal({3, 4}, 1)});
    check_gradients([](const OpsInputs& in) { return reshape(in[0], {-1}); }, {normal({2, 3, 2}, 2)});
    check_gradients([](const OpsInputs& in) { return reshape(in[0], {4, -1, 1}); }, {normal({2, 6}, 3)});
  }
  SECTION("transposed view input (a copy)") {
    check_gradients(
        [](const OpsInputs& in) {
          return reshape(transpose(in[0], 0, 1), {2, 6});
        },
        {normal({3, 4}, 4)});
  }
  SECTION("then an op, output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = reshape(in[0], {3, 2});
          return matmul(y, y, false, true);
        },
        {normal({2, 3}, 5)});
  }
}

TEST_CASE("grad: view", "[grad]") {
  SECTION("contiguous input") {
    check_gradients([](const OpsInputs& in) { return view(in[0], {4, 3}); }, {normal({3, 4}, 1)});
  }
  SECTION("a contiguous narrow with an offset") {
    check_gradients(
        [](const OpsInputs& in) {
          return view(narrow(in[0], 0, 1, 2), {3, 2});
        },
        {normal({4, 3}, 2)});
  }
  SECTION("output used twice") {
    check_gradients(
        [](const OpsInputs& in) {
          const Tensor y = view(in[0], {-1});
          return mul(y, exp(y));
        },
        {normal({2, 3}, 3)});
  }
}

TEST_CASE("grad: transpose", "[grad]") {
  check_gradients([](const OpsInputs& in) { return transpose(in[0], 0, 2); }, {normal({2, 3, 4}, 1)});
  check_gradients([](const OpsInputs& in) { return transpose(in[0], -1, -2); }, {normal({2, 3, 4}, 2)});
  check_gradients([](const OpsInputs& in) { return transpose(transpose(in[0], 0, 1), 1, 2); },
                  {normal({2, 3, 4}, 3)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor t = transpose(in[0], 0, 1);  // used twice, and beside its base
        return add(matmul(t, in[0]), mul(t, t));
      },
      {normal({3, 3}, 4)});
}

TEST_CASE("grad: permute", "[grad]") {
  check_gradients([](const OpsInputs& in) { return permute(in[0], {2, 0, 1}); }, {normal({2, 3, 4}, 1)});
  check_gradients([](const OpsInputs& in) { return permute(in[0], {1, 2, 0}); }, {normal({2, 3, 4}, 2)});
  check_gradients([](const OpsInputs& in) { return permute(in[0], {-1, 0, 1}); }, {normal({2, 3, 2}, 3)});
  check_gradients(
      [](const OpsInputs& in) {
        return permute(transpose(in[0], 0, 2), {1, 0, 2});
      },
      {normal({2, 3, 4}, 4)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor p = permute(in[0], {1, 0, 2});  // (3, 2, 2)
        return mul(p, exp(p));
      },
      {normal({2, 3, 2}, 5)});
}

TEST_CASE("grad: narrow", "[grad]") {
  check_gradients([](const OpsInputs& in) { return narrow(in[0], 0, 1, 2); }, {normal({4, 3}, 1)});
  check_gradients([](const OpsInputs& in) { return narrow(in[0], 1, 1, 2); }, {normal({2, 4, 3}, 2)});
  check_gradients([](const OpsInputs& in) { return narrow(in[0], -1, 0, 2); }, {normal({2, 3}, 3)});
  check_gradients([](const OpsInputs& in) { return narrow(transpose(in[0], 0, 1), 1, 1, 2); },
                  {normal({4, 3}, 4)});
  // Overlapping narrows of one tensor: the middle column gets both contributions.
  check_gradients([](const OpsInputs& in) { return mul(narrow(in[0], 1, 0, 2), narrow(in[0], 1, 1, 2)); },
                  {normal({3, 3}, 5)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor y = narrow(in[0], 0, 1, 2);
        return mul(y, y);
      },
      {normal({3, 2}, 6)});
}

TEST_CASE("grad: contiguous", "[grad]") {
  check_gradients([](const OpsInputs& in) { return contiguous(transpose(in[0], 0, 1)); },
                  {normal({3, 4}, 1)});
  check_gradients(
      [](const OpsInputs& in) {
        return contiguous(permute(in[0], {2, 0, 1}));
      },
      {normal({2, 3, 4}, 2)});
  check_gradients([](const OpsInputs& in) { return contiguous(in[0]); }, {normal({2, 3}, 3)});
  check_gradients(
      [](const OpsInputs& in) {
        const Tensor c = contiguous(transpose(in[0], 0, 1));
        return mul(c, c);
      },
      {normal({2, 3}, 4)});
}
