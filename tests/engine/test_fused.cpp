// Forward values against numbers computed by hand (or in double precision with Python's math module,
// quoted beside each), fused ops against the same math composed of primitive ops (values and
// gradients), numerical stability, and error messages for every op family.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "tfm/engine/ops.h"
#include "tfm/engine/tensor.h"

using namespace tfm;
using Catch::Contains;
using Catch::StartsWith;
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

namespace {

Tensor fused_normal(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::randn(shape, rng);
}

// Every element of `got` within atol + rtol * |want| of `want`.
void check_close(const std::vector<float>& got, const std::vector<double>& want, double atol = 1e-6,
                 double rtol = 1e-5) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  std::ostringstream first;  // the first few mismatches
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    if (bad++ < 4) first << "element " << i << ": got " << got[i] << " want " << want[i] << "; ";
  }
  INFO(first.str() << "(atol " << atol << ", rtol " << rtol << ")");
  CHECK(bad == 0);
}
void check_close(const Tensor& got, const std::vector<double>& want, double atol = 1e-6, double rtol = 1e-5) {
  check_close(got.to_vector(), want, atol, rtol);
}

// Runs `fused` and `composed` on separate leaf copies of `inputs`, runs backward through both with
// the same random upstream gradient, and compares the values and every input's gradient.
// Tolerance: atol 1e-5, rtol 1e-4 (float32 rounding differs between the two orders of operations).
void check_fused_vs_composed(const Fn& fused, const Fn& composed, const Inputs& inputs) {
  Inputs a, b;
  for (const Tensor& t : inputs) {
    a.push_back(t.clone());
    b.push_back(t.clone());
    a.back().set_requires_grad(true);
    b.back().set_requires_grad(true);
  }
  const Tensor ya = fused(a), yb = composed(b);
  REQUIRE(ya.shape() == yb.shape());
  const std::vector<float> vb = yb.to_vector();
  check_close(ya.to_vector(), std::vector<double>(vb.begin(), vb.end()), 1e-5, 1e-4);
  const Tensor up = fused_normal(ya.shape(), 99);
  ya.backward(up);
  yb.backward(up);
  for (size_t k = 0; k < inputs.size(); ++k) {
    INFO("gradient of input " << k << " " << shape_str(inputs[k].shape()));
    REQUIRE(a[k].grad().defined());
    REQUIRE(b[k].grad().defined());
    const std::vector<float> gb = b[k].grad().to_vector();
    check_close(a[k].grad(), std::vector<double>(gb.begin(), gb.end()), 1e-5, 1e-4);
  }
}

// A one-hot (N, V) float tensor; rows whose target is ignore_index are all zeros.
Tensor one_hot(const std::vector<int32_t>& targets, int64_t V, int32_t ignore_index = -100) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(targets.size()), V});
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] != ignore_index) t.data()[i * V + targets[i]] = 1.0f;
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Forward values by hand

TEST_CASE("values: softmax and log_softmax of [1, 2, 3]", "[values]") {
  const Tensor x = Tensor::from_vector({1, 2, 3}, {3});
  check_close(softmax(x), {0.09003057317038046, 0.24472847105479764, 0.6652409557748218});
  check_close(log_softmax(x), {-2.40760596444438, -1.4076059644443801, -0.40760596444438013});
  // Row-wise over the last dim of a (2, 3): the second row is the first shifted by 10 (same result).
  check_close(softmax(Tensor::from_vector({1, 2, 3, 11, 12, 13}, {2, 3})),
              {0.0900306, 0.2447285, 0.6652410, 0.0900306, 0.2447285, 0.6652410}, 1e-6);
}

TEST_CASE("values: layer_norm of a small row", "[values]") {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25, eps 1e-5.
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 4});
  check_close(layer_norm(x, Tensor::ones({4}), Tensor::zeros({4})),
              {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269});
  check_close(
      layer_norm(x, Tensor::from_vector({1, 2, 1, -1}, {4}), Tensor::from_vector({0, 0, 1, 0.5f}, {4})),
      {-1.3416354199689269, -0.894423613312618, 1.447211806656309, -0.8416354199689269});
  // A constant row normalises to 0 (variance 0, eps keeps it finite), leaving the bias.
  check_close(layer_norm(Tensor::full({1, 3}, 5.0f), Tensor::ones({3}), Tensor::full({3}, 0.25f)),
              {0.25, 0.25, 0.25});
}

TEST_CASE("values: gelu, exact erf form", "[values]") {
  check_close(gelu(Tensor::from_vector({1, -1, 0, 2, -3}, {5})),
              {0.8413447460685429, -0.15865525393145707, 0.0, 1.9544997361036416, -0.00404969409489031});
}

TEST_CASE("values: cross_entropy of a 2x3 example", "[values]") {
  // Row 0: logsumexp(1, 2, 3) - 3 = 0.4076060; row 1: logsumexp(1, 0, -1) - 0 = 1.4076060.
  Tensor logits = Tensor::from_vector({1, 2, 3, 1, 0, -1}, {2, 3});
  logits.set_requires_grad(true);
  const Tensor loss = cross_entropy(logits, {2, 1});
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == Approx(0.9076059644443802).epsilon(1e-6));
  loss.backward();  // (softmax - one_hot) / 2
  check_close(logits.grad(), {0.04501528658519024, 0.12236423552739885, -0.167379522112589,
                              0.33262047788741095, -0.37763576447260117, 0.04501528658519022});
  // The ignored row counts in neither the sum nor the mean.
  CHECK(cross_entropy(logits, {2, -100}).item() == Approx(0.40760596444438013).epsilon(1e-6));
  CHECK(cross_entropy(logits, {-1, 1}, -1).item() == Approx(1.4076059644443804).epsilon(1e-6));
  // Every row ignored: 0, and backward leaves no gradient behind.
  logits.zero_grad();
  const Tensor none = cross_entropy(logits, {-100, -100});
  CHECK(none.item() == 0.0f);
  none.backward();
  check_close(logits.grad(), {0, 0, 0, 0, 0, 0});
}

TEST_CASE("values: matmul 2x2, transposes and batches", "[values]") {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}), b = Tensor::from_vector({5, 6, 7, 8}, {2, 2});
  check_close(matmul(a, b), {19, 22, 43, 50});
  check_close(matmul(a, b, true, false), {26, 30, 38, 44});  // a^T b
  check_close(matmul(a, b, false, true), {17, 23, 39, 53});  // a b^T
  check_close(matmul(a, b, true, true), {23, 31, 34, 46});   // a^T b^T
  check_close(matmul(transpose(a, 0, 1), b), {26, 30, 38, 44});
  // Batched (2, 2, 2) x shared (2, 2): batch 1 is 2a.
  const Tensor batch = concat({reshape(a, {1, 2, 2}), reshape(mul(a, 2.0f), {1, 2, 2})}, 0);
  check_close(matmul(batch, b), {19, 22, 43, 50, 38, 44, 86, 100});
  // (1, 3) x (3, 1) and (3, 1) x (1, 2).
  check_close(matmul(Tensor::from_vector({1, 2, 3}, {1, 3}), Tensor::from_vector({4, 5, 6}, {3, 1})), {32});
  check_close(matmul(Tensor::from_vector({1, 2, 3}, {3, 1}), Tensor::from_vector({4, 5}, {1, 2})),
              {4, 5, 8, 10, 12, 15});
}

TEST_CASE("values: elementwise ops, broadcasting and scalars", "[values]") {
  const Tensor col = Tensor::from_vector({1, 2}, {2, 1}), row = Tensor::from_vector({10, 20, 30}, {3});
  check_close(add(col, row), {11, 21, 31, 12, 22, 32});
  check_close(sub(col, row), {-9, -19, -29, -8, -18, -28});
  check_close(mul(col, row), {10, 20, 30, 20, 40, 60});
  check_close(div(row, col), {10, 20, 30, 5, 10, 15});
  const Tensor x = Tensor::from_vector({1, 4, 9}, {3});
  check_close(add(x, 1.0f), {2, 5, 10});
  check_close(sub(x, 1.0f), {0, 3, 8});
  check_close(mul(x, 2.0f), {2, 8, 18});
  check_close(div(x, 2.0f), {0.5, 2, 4.5});
  check_close(rsub(1.0f, x), {0, -3, -8});
  check_close(rdiv(36.0f, x), {36, 9, 4});
  check_close(neg(x), {-1, -4, -9});
  check_close(sqrt(x), {1, 2, 3});
  check_close(pow(x, 1.5f), {1, 8, 27});
  check_close(log(x), {0, std::log(4.0), std::log(9.0)});
  check_close(exp(Tensor::from_vector({0, 1}, {2})), {1, std::exp(1.0)});
  check_close(tanh(Tensor::from_vector({0, 1}, {2})), {0, std::tanh(1.0)});
  check_close(relu(Tensor::from_vector({-1, 0, 2}, {3})), {0, 0, 2});
  // The operators are the named ops.
  check_close(x + x * 2.0f - x / x, {2, 11, 26});
  check_close(-(2.0f * x), {-2, -8, -18});
}

TEST_CASE("values: reductions", "[values]") {
  const Tensor x = Tensor::from_vector({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(sum(x).item() == 21.0f);
  CHECK(mean(x).item() == 3.5f);
  check_close(sum(x, 0), {5, 7, 9});
  check_close(sum(x, -1), {9, 12});
  CHECK(sum(x, 1, true).shape() == Shape{2, 1});
  CHECK(sum(x, 1, false).shape() == Shape{2});
  check_close(mean(x, 1), {3, 4});
  check_close(max(x, 0), {4, 5, 6});
  check_close(max(x, 1, true), {5, 6});
  check_close(max(transpose(x, 0, 1), 1), {4, 5, 6});
  // A tie sends the gradient to the first maximum only.
  Tensor t = Tensor::from_vector({2, 7, 7, 1}, {4});
  t.set_requires_grad(true);
  max(t, 0).backward();
  check_close(t.grad(), {0, 1, 0, 0});
}

TEST_CASE("values: indexing, masking and shape ops", "[values]") {
  const Tensor w = Tensor::from_vector({0, 1, 10, 11, 20, 21}, {3, 2});
  const Tensor e = embedding(w, {2, 0, 2}, {3});
  CHECK(e.shape() == Shape{3, 2});
  check_close(e, {20, 21, 0, 1, 20, 21});
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  check_close(masked_fill(x, Tensor::from_vector({0, 1}, {2}), -9.0f), {1, -9, 3, -9});
  check_close(where(Tensor::from_vector({1, 0}, {2, 1}), x, Tensor::full({1}, 7.0f)), {1, 2, 7, 7});
  check_close(concat({x, Tensor::from_vector({5, 6}, {1, 2})}, 0), {1, 2, 3, 4, 5, 6});
  check_close(concat({x, Tensor::from_vector({5, 6}, {2, 1})}, 1), {1, 2, 5, 3, 4, 6});
  const std::vector<Tensor> parts = split(Tensor::arange(5), {2, 3}, 0);
  check_close(parts[0], {0, 1});
  check_close(parts[1], {2, 3, 4});
}

TEST_CASE("values: dropout drops about p and keeps the expectation", "[values]") {
  Rng rng(3);
  const Tensor y = dropout(Tensor::ones({10000}), 0.25f, true, rng);
  int zeros = 0, others = 0;
  double total = 0.0;
  for (float v : y.to_vector()) {
    zeros += v == 0.0f;
    others += v != 0.0f && v != Approx(1.0f / 0.75f);  // kept values are scaled by 1/(1-p)
    total += v;
  }
  CHECK(others == 0);
  CHECK(zeros / 10000.0 == Approx(0.25).margin(0.02));
  CHECK(total / 10000.0 == Approx(1.0).margin(0.03));
  // Seeded: the same seed gives the same mask.
  Rng r1(8), r2(8);
  const Tensor x = fused_normal({50}, 1);
  CHECK(dropout(x, 0.5f, true, r1).to_vector() == dropout(x, 0.5f, true, r2).to_vector());
  // Training with p = 0 and eval mode are the identity.
  CHECK(dropout(x, 0.0f, true, r1).to_vector() == x.to_vector());
  CHECK(dropout(x, 0.9f, false, r1).to_vector() == x.to_vector());
}

// ---------------------------------------------------------------------------------------------
// Fused ops against their composed forms: values and gradients

TEST_CASE("fused: cross_entropy equals -mean of the gathered log_softmax", "[fused]") {
  SECTION("every row counted") {
    const std::vector<int32_t> targets = {1, 4, 0, 2};
    const Tensor oh = one_hot(targets, 5);
    check_fused_vs_composed([&](const Inputs& in) { return cross_entropy(in[0], targets); },
                            [&](const Inputs& in) { return neg(mean(sum(mul(log_softmax(in[0]), oh), 1))); },
                            {fused_normal({4, 5}, 1)});
  }
  SECTION("an ignored row: sum over counted rows / their count") {
    const std::vector<int32_t> targets = {1, -100, 4, 0};
    const Tensor oh = one_hot(targets, 5);
    check_fused_vs_composed(
        [&](const Inputs& in) { return cross_entropy(in[0], targets); },
        [&](const Inputs& in) { return mul(sum(mul(log_softmax(in[0]), oh)), -1.0f / 3.0f); },
        {fused_normal({4, 5}, 2)});
  }
  SECTION("3-D logits viewed as rows") {
    const std::vector<int32_t> targets = {2, 0, 1, 3, 3, 0};
    const Tensor oh = reshape(one_hot(targets, 4), {2, 3, 4});
    check_fused_vs_composed([&](const Inputs& in) { return cross_entropy(in[0], targets); },
                            [&](const Inputs& in) { return neg(mean(sum(mul(log_softmax(in[0]), oh), -1))); },
                            {fused_normal({2, 3, 4}, 3)});
  }
}

TEST_CASE("fused: layer_norm equals its mean/sub/pow/sqrt/div composition", "[fused]") {
  const float eps = 1e-5f;
  const Fn composed = [eps](const Inputs& in) {
    const Tensor mu = mean(in[0], -1, true);
    const Tensor d = sub(in[0], mu);
    const Tensor var = mean(pow(d, 2.0f), -1, true);  // biased, as in PyTorch
    return add(mul(div(d, sqrt(add(var, eps))), in[1]), in[2]);
  };
  const Fn fused = [eps](const Inputs& in) { return layer_norm(in[0], in[1], in[2], eps); };
  check_fused_vs_composed(fused, composed,
                          {fused_normal({3, 6}, 1), fused_normal({6}, 2), fused_normal({6}, 3)});
  check_fused_vs_composed(fused, composed,
                          {fused_normal({2, 2, 5}, 4), fused_normal({5}, 5), fused_normal({5}, 6)});
}

TEST_CASE("fused: rms_norm equals x / sqrt(mean(x^2) + eps) * w", "[fused]") {
  const float eps = 1e-5f;
  const Fn composed = [eps](const Inputs& in) {
    return mul(div(in[0], sqrt(add(mean(pow(in[0], 2.0f), -1, true), eps))), in[1]);
  };
  const Fn fused = [eps](const Inputs& in) { return rms_norm(in[0], in[1], eps); };
  check_fused_vs_composed(fused, composed, {fused_normal({3, 6}, 1), fused_normal({6}, 2)});
  check_fused_vs_composed(fused, composed, {fused_normal({2, 2, 5}, 4), fused_normal({5}, 5)});
}

TEST_CASE("fused: rope equals the rotation of each pair written with narrow and concat", "[fused]") {
  // x (B, T, H*D) with H = 2, D = 4 at positions [1, 1 + T): pair i of each head, (x0, x1) ->
  // (x0 c - x1 s, x0 s + x1 c) with c, s of the angle p * theta^(-2i/D), as separate columns.
  const int64_t B = 2, T = 3, H = 2, D = 4;
  const auto [cos, sin] = rope_table(6, D, 10000.0);
  const Fn composed = [&](const Inputs& in) {
    std::vector<Tensor> columns;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const Tensor x0 = narrow(in[0], 2, h * D + 2 * i, 1), x1 = narrow(in[0], 2, h * D + 2 * i + 1, 1);
        const Tensor c = reshape(contiguous(narrow(narrow(cos, 0, 1, T), 1, i, 1)), {1, T, 1});
        const Tensor s = reshape(contiguous(narrow(narrow(sin, 0, 1, T), 1, i, 1)), {1, T, 1});
        columns.push_back(sub(mul(x0, c), mul(x1, s)));
        columns.push_back(add(mul(x0, s), mul(x1, c)));
      }
    return concat(columns, 2);
  };
  check_fused_vs_composed([&](const Inputs& in) { return rope(in[0], H, cos, sin, 1); }, composed,
                          {fused_normal({B, T, H * D}, 1)});
  // Position 0 is the identity; the table's angles are p * theta^(-2i/D).
  CHECK(cos.at({0, 1}) == 1.0f);
  CHECK(sin.at({3, 1}) == static_cast<float>(std::sin(3.0 * std::pow(10000.0, -0.5))));
}

TEST_CASE("fused: softmax equals exp(x - max) / sum", "[fused]") {
  const Fn composed = [](const Inputs& in) {
    const Tensor e = exp(sub(in[0], max(in[0], -1, true)));
    return div(e, sum(e, -1, true));
  };
  check_fused_vs_composed([](const Inputs& in) { return softmax(in[0]); }, composed,
                          {fused_normal({3, 5}, 1)});
  check_fused_vs_composed([](const Inputs& in) { return softmax(in[0]); }, composed,
                          {fused_normal({2, 2, 4}, 2)});
}

TEST_CASE("fused: log_softmax equals log(softmax)", "[fused]") {
  check_fused_vs_composed([](const Inputs& in) { return log_softmax(in[0]); },
                          [](const Inputs& in) { return log(softmax(in[0])); }, {fused_normal({3, 5}, 1)});
}

TEST_CASE("fused: linear equals matmul(x, w^T) + bias", "[fused]") {
  check_fused_vs_composed([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                          [](const Inputs& in) { return add(matmul(in[0], in[1], false, true), in[2]); },
                          {fused_normal({2, 3, 4}, 1), fused_normal({5, 4}, 2), fused_normal({5}, 3)});
  check_fused_vs_composed([](const Inputs& in) { return linear(in[0], in[1], Tensor()); },
                          [](const Inputs& in) { return matmul(in[0], transpose(in[1], 0, 1)); },
                          {fused_normal({3, 4}, 4), fused_normal({2, 4}, 5)});
}

TEST_CASE("fused: feed_forward equals linear -> activation -> linear", "[fused]") {
  // Chunk sizes that split the 7 rows unevenly, one row at a time, and all at once.
  for (const Activation act : {Activation::Gelu, Activation::Relu})
    for (const int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{7}, kFeedForwardChunkRows}) {
      INFO((act == Activation::Gelu ? "gelu" : "relu") << ", chunk_rows " << chunk);
      const auto activate = [act](const Tensor& h) { return act == Activation::Gelu ? gelu(h) : relu(h); };
      check_fused_vs_composed(
          [act, chunk](const Inputs& in) {
            return feed_forward(in[0], in[1], in[2], in[3], in[4], act, chunk);
          },
          [activate](const Inputs& in) {
            return linear(activate(linear(in[0], in[1], in[2])), in[3], in[4]);
          },
          {fused_normal({7, 4}, 1), fused_normal({6, 4}, 2), fused_normal({6}, 3), fused_normal({4, 6}, 4),
           fused_normal({4}, 5)});
    }
  SECTION("SwiGLU: fc2(silu(fc1 x) * fc3 x), silu(h) = h / (1 + exp(-h))") {
    for (const int64_t chunk : {int64_t{1}, int64_t{3}, kFeedForwardChunkRows}) {
      INFO("chunk_rows " << chunk);
      check_fused_vs_composed(
          [chunk](const Inputs& in) {
            return feed_forward(in[0], in[1], in[2], in[3], in[4], Activation::SwiGLU, chunk, in[5], in[6]);
          },
          [](const Inputs& in) {
            const Tensor h = linear(in[0], in[1], in[2]);
            const Tensor silu = div(h, add(exp(neg(h)), 1.0f));
            return linear(mul(silu, linear(in[0], in[5], in[6])), in[3], in[4]);
          },
          {fused_normal({7, 4}, 11), fused_normal({6, 4}, 12), fused_normal({6}, 13),
           fused_normal({4, 6}, 14), fused_normal({4}, 15), fused_normal({6, 4}, 16), fused_normal({6}, 17)});
    }
  }
  SECTION("without biases, a 3-D input read through a transposed view") {
    check_fused_vs_composed(
        [](const Inputs& in) {
          return feed_forward(transpose(in[0], 0, 1), in[1], Tensor(), in[2], Tensor(), Activation::Gelu, 2);
        },
        [](const Inputs& in) {
          return linear(gelu(linear(transpose(in[0], 0, 1), in[1], Tensor())), in[2], Tensor());
        },
        {fused_normal({3, 2, 4}, 6), fused_normal({5, 4}, 7), fused_normal({4, 5}, 8)});
  }
}

TEST_CASE("fused: mean equals sum / n, and over an axis", "[fused]") {
  check_fused_vs_composed([](const Inputs& in) { return mean(in[0], 1, true); },
                          [](const Inputs& in) { return div(sum(in[0], 1, true), 3.0f); },
                          {fused_normal({2, 3, 2}, 1)});
}

TEST_CASE("fused: matmul equals a broadcast multiply and sum", "[fused]") {
  // a (B, M, K) x b (K, N) as sum over k of a (B, M, K, 1) * b (K, N), at sizes past BLAS's tiny cases.
  const int64_t B = 2, M = 9, K = 33, N = 7;
  check_fused_vs_composed([](const Inputs& in) { return matmul(in[0], in[1]); },
                          [&](const Inputs& in) {
                            return sum(mul(reshape(in[0], {B, M, K, 1}), in[1]), -2);
                          },
                          {fused_normal({B, M, K}, 1), fused_normal({K, N}, 2)});
  check_fused_vs_composed(
      [](const Inputs& in) { return matmul(in[0], in[1], true, true); },  // a (B, K, M), b (B, N, K)
      [&](const Inputs& in) {
        return sum(
            mul(reshape(transpose(in[0], 1, 2), {B, M, K, 1}), reshape(transpose(in[1], 1, 2), {B, 1, K, N})),
            -2);
      },
      {fused_normal({B, K, M}, 3), fused_normal({B, N, K}, 4)});
}

TEST_CASE("fused: kernels agree with their compositions on the parallel (large) path", "[fused]") {
  // The kernels split rows across OpenMP threads above 2^15 elements; these inputs are (64, 520).
  const Tensor x = fused_normal({64, 520}, 1);
  SECTION("softmax") {
    check_fused_vs_composed([](const Inputs& in) { return softmax(in[0]); },
                            [](const Inputs& in) {
                              const Tensor e = exp(sub(in[0], max(in[0], -1, true)));
                              return div(e, sum(e, -1, true));
                            },
                            {x});
  }
  SECTION("log_softmax") {
    check_fused_vs_composed([](const Inputs& in) { return log_softmax(in[0]); },
                            [](const Inputs& in) { return log(softmax(in[0])); }, {x});
  }
  SECTION("layer_norm") {
    check_fused_vs_composed([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
                            [](const Inputs& in) {
                              const Tensor d = sub(in[0], mean(in[0], -1, true));
                              const Tensor var = mean(pow(d, 2.0f), -1, true);
                              return add(mul(div(d, sqrt(add(var, 1e-5f))), in[1]), in[2]);
                            },
                            {x, fused_normal({520}, 2), fused_normal({520}, 3)});
  }
  SECTION("cross_entropy") {
    std::vector<int32_t> targets(64);
    for (int i = 0; i < 64; ++i) targets[i] = i % 7 == 3 ? -100 : (i * 37) % 520;
    int count = 0;
    for (int32_t t : targets) count += t != -100;
    const Tensor oh = one_hot(targets, 520);
    check_fused_vs_composed([&](const Inputs& in) { return cross_entropy(in[0], targets); },
                            [&](const Inputs& in) {
                              return mul(sum(mul(log_softmax(in[0]), oh)), -1.0f / static_cast<float>(count));
                            },
                            {x});
  }
  SECTION("gelu against x * Phi(x) computed here") {
    Tensor xs = x.clone();
    xs.set_requires_grad(true);
    const Tensor y = gelu(xs);
    sum(y).backward();
    const std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = xs.grad().to_vector();
    int bad = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double v = xv[i], cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
      bad += std::fabs(yv[i] - v * cdf) > 1e-5 || std::fabs(gv[i] - (cdf + v * pdf)) > 1e-5;
    }
    CHECK(bad == 0);  // tolerance 1e-5 absolute
  }
}

// ---------------------------------------------------------------------------------------------
// Numerical stability

TEST_CASE("stability: softmax family on huge and masked inputs", "[stability]") {
  Tensor x = Tensor::from_vector({1000, 1001, -1000, -1001}, {2, 2});
  x.set_requires_grad(true);
  const Tensor s = softmax(x);
  check_close(s, {0.2689414213699951, 0.7310585786300049, 0.7310585786300049, 0.2689414213699951});
  check_close(log_softmax(x),
              {-1.3132616875182228, -0.31326168751822286, -0.31326168751822286, -1.3132616875182228}, 1e-5);
  const Tensor ce = cross_entropy(x, {0, 1});
  CHECK(ce.item() == Approx(1.3132616875182228).epsilon(1e-5));
  ce.backward();
  for (float g : x.grad().to_vector()) CHECK(std::isfinite(g));
  // -inf (a causal mask) gets probability 0; a fully masked row is zeros, not NaN.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor m = softmax(masked_fill(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}),
                                       Tensor::from_vector({0, 1, 1, 1, 1, 1}, {2, 3}), -inf));
  check_close(m, {1, 0, 0, 0, 0, 0});
  const Tensor y = log_softmax(Tensor::from_vector({-inf, 0}, {2}));
  CHECK(y.at({0}) == -inf);
  CHECK(y.at({1}) == 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Errors: each op family throws tfm::Error whose message starts with the op's name

TEST_CASE("errors: elementwise shape mismatch", "[errors]") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  REQUIRE_THROWS_AS(add(a, b), Error);
  REQUIRE_THROWS_WITH(add(a, b), StartsWith("add:") && Contains("[2, 3]") && Contains("[4]"));
  REQUIRE_THROWS_WITH(sub(a, b), StartsWith("sub:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(mul(a, b), StartsWith("mul:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(div(a, b), StartsWith("div:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(add(Tensor::zeros({3, 2}), Tensor::zeros({2, 2, 3})),
                      StartsWith("add:") && Contains("[2, 2, 3]"));
}

TEST_CASE("errors: matmul and linear shapes", "[errors]") {
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})),
                      StartsWith("matmul:") && Contains("[2, 3]") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 5}), false, true),
                      StartsWith("matmul:"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 2, 3, 4})),
                      StartsWith("matmul:") && Contains("[2, 2, 3]") && Contains("[3, 2, 3, 4]"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({3}), Tensor::zeros({3, 4})),
                      StartsWith("matmul:") && Contains("[3]"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({2, 3}), Tensor::zeros({5, 4}), Tensor()),
                      StartsWith("linear:") && Contains("[2, 3]") && Contains("[5, 4]"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({5, 4}), Tensor::zeros({4})),
                      StartsWith("linear:") && Contains("[4]") && Contains("[5, 4]"));
  REQUIRE_THROWS_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({4}), Tensor()), StartsWith("linear:"));
}

TEST_CASE("errors: bad axes", "[errors]") {
  const Tensor x = Tensor::zeros({2, 3});
  REQUIRE_THROWS_WITH(sum(x, 2), StartsWith("sum:") && Contains("2") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(sum(x, -3), StartsWith("sum:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(mean(x, 5), StartsWith("mean:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(max(x, 2), StartsWith("max:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(transpose(x, 0, 2), StartsWith("transpose:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(permute(x, {0, 0}), StartsWith("permute:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(permute(x, {0}), StartsWith("permute:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(narrow(x, 2, 0, 1), StartsWith("narrow:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(narrow(x, 1, 2, 2), StartsWith("narrow:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(narrow(x, 1, -1, 1), StartsWith("narrow:"));
  REQUIRE_THROWS_WITH(split(x, {1, 1}, 1), StartsWith("split:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(split(x, {1, 2}, 3), StartsWith("split:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(softmax(Tensor::full({}, 1.0f)), StartsWith("softmax:"));
  REQUIRE_THROWS_WITH(log_softmax(Tensor::full({}, 1.0f)), StartsWith("log_softmax:"));
}

TEST_CASE("errors: shape ops", "[errors]") {
  const Tensor x = Tensor::zeros({2, 3});
  REQUIRE_THROWS_WITH(concat({x, Tensor::zeros({2, 2})}, 0),
                      StartsWith("concat:") && Contains("[2, 2]") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(concat({x, Tensor::zeros({3})}, 0), StartsWith("concat:") && Contains("[3]"));
  REQUIRE_THROWS_WITH(concat({x, x}, 2), StartsWith("concat:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(concat({}, 0), StartsWith("concat:"));
  REQUIRE_THROWS_WITH(reshape(x, {4, -1}), StartsWith("reshape:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(reshape(x, {-1, -1}), StartsWith("reshape:"));
  REQUIRE_THROWS_WITH(view(x, {7}), StartsWith("view:") && Contains("[2, 3]") && Contains("[7]"));
}

TEST_CASE("errors: feed_forward shapes", "[errors]") {
  const Tensor x = Tensor::zeros({2, 4}), w1 = Tensor::zeros({6, 4}), w2 = Tensor::zeros({4, 6});
  CHECK_THROWS_WITH(feed_forward(x, w1, Tensor(), Tensor::zeros({3, 6}), Tensor(), Activation::Gelu),
                    StartsWith("feed_forward") && Contains("do not chain"));
  CHECK_THROWS_WITH(feed_forward(x, w1, Tensor::zeros({4}), w2, Tensor(), Activation::Gelu),
                    StartsWith("feed_forward") && Contains("b1 [4] must be [6]"));
  CHECK_THROWS_WITH(feed_forward(x, w1, Tensor(), w2, Tensor(), Activation::Gelu, 0),
                    StartsWith("feed_forward") && Contains("chunk_rows"));
}

TEST_CASE("errors: losses, normalisation, indexing and masking", "[errors]") {
  const Tensor logits = Tensor::zeros({2, 3});
  REQUIRE_THROWS_WITH(cross_entropy(logits, {0, 3}), StartsWith("cross_entropy:") && Contains("3"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, {-1, 0}), StartsWith("cross_entropy:") && Contains("-1"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, {0}), StartsWith("cross_entropy:") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(layer_norm(logits, Tensor::ones({2}), Tensor::zeros({3})),
                      StartsWith("layer_norm:") && Contains("[2]") && Contains("[2, 3]"));
  const Tensor w = Tensor::zeros({4, 2});
  REQUIRE_THROWS_WITH(embedding(w, {0, 4}, {2}),
                      StartsWith("embedding:") && Contains("4") && Contains("[4, 2]"));
  REQUIRE_THROWS_WITH(embedding(w, {-1}, {1}), StartsWith("embedding:") && Contains("-1"));
  REQUIRE_THROWS_WITH(embedding(w, {0, 1}, {3}), StartsWith("embedding:") && Contains("[3]"));
  REQUIRE_THROWS_WITH(embedding(Tensor::zeros({4}), {0}, {1}), StartsWith("embedding:") && Contains("[4]"));
  Rng rng(1);
  REQUIRE_THROWS_WITH(dropout(logits, 1.0f, true, rng), StartsWith("dropout:") && Contains("1"));
  REQUIRE_THROWS_WITH(dropout(logits, -0.1f, true, rng), StartsWith("dropout:"));
  REQUIRE_THROWS_WITH(masked_fill(logits, Tensor::zeros({2}), 0.0f),
                      StartsWith("masked_fill:") && Contains("[2]"));
  REQUIRE_THROWS_WITH(masked_fill(logits, Tensor::zeros({2, 2, 3}), 0.0f),
                      StartsWith("masked_fill:") && Contains("[2, 2, 3]"));
  REQUIRE_THROWS_WITH(where(Tensor::zeros({2, 3}), logits, Tensor::zeros({4})),
                      StartsWith("where:") && Contains("[4]"));
}
