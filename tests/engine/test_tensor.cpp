// The Tensor itself: factories, views without copies, element access, printing, errors, the autograd
// engine's semantics, and the memory pool's reuse across identical steps.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/engine/strings.h"
#include "tfm/engine/tensor.h"

using namespace tfm;
using Catch::Contains;
using Catch::StartsWith;

namespace {
std::vector<float> grad_of(const Tensor& t) {
  REQUIRE(t.grad().defined());
  return t.grad().to_vector();
}
// What backward() of `loss` throws (tfm::Error), "" when it returns.
std::string backward_error(const Tensor& loss) {
  try {
    loss.backward();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Factories

TEST_CASE("tensor: factories fill values and shapes", "[tensor]") {
  const Tensor z = Tensor::zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.numel() == 6);
  CHECK(z.is_contiguous());
  CHECK(z.to_vector() == std::vector<float>(6, 0.0f));
  CHECK(Tensor::ones({4}).to_vector() == std::vector<float>(4, 1.0f));
  CHECK(Tensor::full({2, 2}, 2.5f).to_vector() == std::vector<float>(4, 2.5f));
  CHECK(Tensor::arange(5).to_vector() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(Tensor::arange(0).numel() == 0);
  const Tensor s = Tensor::full({}, 3.0f);  // 0-dim
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.0f);
  const Tensor v = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(v.at({2, 1}) == 6.0f);
  CHECK(v.at({1, 0}) == 3.0f);
  CHECK(v.size(-1) == 2);
  CHECK(v.size(0) == 3);
  REQUIRE_THROWS_AS(Tensor::from_vector({1, 2, 3}, {2, 2}), Error);
  REQUIRE_THROWS_WITH(Tensor::from_vector({1, 2, 3}, {2, 2}),
                      StartsWith("Tensor::from_vector") && Contains("[2, 2]"));
  REQUIRE_THROWS_WITH(Tensor::zeros({2, -1}), StartsWith("Tensor::empty") && Contains("[2, -1]"));
  REQUIRE_THROWS_WITH(v.size(2), StartsWith("Tensor::size") && Contains("[3, 2]"));
}

TEST_CASE("tensor: randn and uniform are seeded and reproducible", "[tensor]") {
  Rng a(3), b(3), c(4);
  const std::vector<float> ra = Tensor::randn({1000}, a).to_vector();
  CHECK(ra == Tensor::randn({1000}, b).to_vector());
  CHECK(ra != Tensor::randn({1000}, c).to_vector());
  // The stream continues: a second draw differs from the first.
  CHECK(Tensor::randn({1000}, a).to_vector() != ra);

  Rng big(11);
  const std::vector<float> n = Tensor::randn({20000}, big, 1.0f, 2.0f).to_vector();
  double m = 0, sq = 0;
  for (float x : n) m += x;
  m /= n.size();
  for (float x : n) sq += (x - m) * (x - m);
  CHECK(m == Approx(1.0).margin(0.05));
  CHECK(std::sqrt(sq / n.size()) == Approx(2.0).margin(0.05));

  Rng u1(5), u2(5);
  const std::vector<float> u = Tensor::uniform({20000}, u1, -1.0f, 3.0f).to_vector();
  CHECK(u == Tensor::uniform({20000}, u2, -1.0f, 3.0f).to_vector());
  double um = 0;
  float lo = 10, hi = -10;
  for (float x : u) {
    um += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  CHECK(lo >= -1.0f);
  CHECK(hi < 3.0f);
  CHECK(lo < -0.99f);
  CHECK(hi > 2.99f);
  CHECK(um / u.size() == Approx(1.0).margin(0.05));
}

TEST_CASE("random: below(n) draws from 0 to n - 1 and refuses n = 0, which has no integer to give",
          "[tensor]") {
  Rng r(9);
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 3000; ++i) ++counts.at(r.below(3));
  for (const int c : counts) CHECK(c > 900);
  CHECK(r.below(1) == 0);
  REQUIRE_THROWS_AS(r.below(0), Error);
  REQUIRE_THROWS_WITH(r.below(0), StartsWith("Rng::below: expected n >= 1, got 0"));
}

// ---------------------------------------------------------------------------------------------
// Views without copies

TEST_CASE("tensor: views share storage, contiguous copies only when needed", "[tensor]") {
  const Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});

  SECTION("reshape of a contiguous tensor is a view") {
    const Tensor r = reshape(x, {3, 2});
    CHECK(r.storage() == x.storage());
    CHECK(r.data() == x.data());
    x.data()[5] = 50.0f;  // written through the base, seen through the view
    CHECK(r.at({2, 1}) == 50.0f);
    CHECK(reshape(x, {-1, 2}).shape() == Shape{3, 2});
    CHECK(view(x, {6}).storage() == x.storage());
  }
  SECTION("transpose, permute and narrow are views") {
    const Tensor t = transpose(x, 0, 1);
    CHECK(t.storage() == x.storage());
    CHECK(t.shape() == Shape{3, 2});
    CHECK(t.strides() == Shape{1, 3});
    CHECK_FALSE(t.is_contiguous());
    CHECK(t.at({2, 1}) == 5.0f);
    CHECK(t.to_vector() == std::vector<float>{0, 3, 1, 4, 2, 5});

    const Tensor y = reshape(Tensor::arange(24), {2, 3, 4});
    const Tensor p = permute(y, {2, 0, 1});
    CHECK(p.storage() == y.storage());
    CHECK(p.shape() == Shape{4, 2, 3});
    CHECK(p.at({3, 1, 2}) == y.at({1, 2, 3}));

    const Tensor n = narrow(x, 1, 1, 2);
    CHECK(n.storage() == x.storage());
    CHECK(n.offset() == 1);
    CHECK(n.to_vector() == std::vector<float>{1, 2, 4, 5});
    const std::vector<Tensor> parts = split(x, {1, 2}, 1);
    REQUIRE(parts.size() == 2);
    CHECK(parts[1].storage() == x.storage());
    CHECK(parts[1].to_vector() == std::vector<float>{1, 2, 4, 5});
  }
  SECTION("contiguous copies a transposed view, not a contiguous tensor") {
    CHECK(contiguous(x).storage() == x.storage());
    const Tensor t = transpose(x, 0, 1);
    const Tensor c = contiguous(t);
    CHECK(c.storage() != x.storage());
    CHECK(c.is_contiguous());
    CHECK(c.to_vector() == t.to_vector());
    // reshape of a non-contiguous tensor must copy, in row-major order of the view.
    const Tensor r = reshape(t, {6});
    CHECK(r.storage() != x.storage());
    CHECK(r.to_vector() == std::vector<float>{0, 3, 1, 4, 2, 5});
    // A contiguous narrow (whole rows) stays a view with an offset.
    const Tensor rows = narrow(reshape(Tensor::arange(12), {4, 3}), 0, 1, 2);
    CHECK(rows.is_contiguous());
    CHECK(view(rows, {6}).to_vector() == std::vector<float>{3, 4, 5, 6, 7, 8});
  }
  SECTION("view of a non-contiguous tensor is an error") {
    REQUIRE_THROWS_WITH(view(transpose(x, 0, 1), {6}), StartsWith("view") && Contains("[3, 2]"));
  }
}

// ---------------------------------------------------------------------------------------------
// Element access and printing

TEST_CASE("tensor: at, item and to_vector", "[tensor]") {
  const Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.at({0, 0}) == 1.0f);
  CHECK(x.at({1, 2}) == 6.0f);
  CHECK(transpose(x, 0, 1).at({2, 0}) == 3.0f);
  CHECK(narrow(x, 1, 1, 1).at({1, 0}) == 5.0f);
  REQUIRE_THROWS_WITH(x.at({2, 0}), StartsWith("Tensor::at") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(x.at({0, -1}), StartsWith("Tensor::at"));
  REQUIRE_THROWS_WITH(x.at({0}), StartsWith("Tensor::at") && Contains("1 indices"));
  REQUIRE_THROWS_WITH(x.item(), StartsWith("Tensor::item") && Contains("[2, 3]"));
  CHECK(sum(x).item() == 21.0f);
  CHECK(Tensor::from_vector({7}, {1, 1}).item() == 7.0f);
  CHECK(permute(reshape(Tensor::arange(6), {1, 2, 3}), {2, 0, 1}).to_vector() ==
        std::vector<float>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("tensor: printing is readable", "[tensor]") {
  const Tensor x = Tensor::from_vector({1.5f, -2, 3, 4, 5, 6.25f}, {2, 3});
  const std::string s = x.str();
  CHECK_THAT(s, StartsWith("tensor("));
  CHECK_THAT(s, Contains("1.5") && Contains("-2") && Contains("6.25"));
  CHECK_THAT(s, Contains("shape=[2, 3]"));
  CHECK_THAT(s, Contains("[1.5, -2, 3]"));
  CHECK_THAT(transpose(x, 0, 1).str(), Contains("[1.5, 4]") && Contains("shape=[3, 2]"));
  // Long dims are elided, first and last values kept.
  const std::string big = Tensor::arange(100).str();
  CHECK_THAT(big, Contains("...") && Contains("99") && Contains("shape=[100]"));
  CHECK_THAT(big, !Contains("50"));
  CHECK_THAT(big, Contains("[0, 1, 2, ..., 97, 98, 99]"));
  // Tiny limits still show one value from each end, never past the end.
  CHECK_THAT(Tensor::from_vector({1, 2, 3, 4, 5}, {5}).str(1), Contains("[1, ..., 5]"));
  CHECK_THAT(Tensor::from_vector({1, 2, 3, 4, 5}, {5}).str(0), Contains("[1, ..., 5]"));
  CHECK_THAT(reshape(Tensor::arange(64), {8, 8}).str(2),
             Contains("[0, ..., 7]") && Contains("[56, ..., 63]"));
  Tensor w = Tensor::ones({2});
  w.set_requires_grad(true);
  CHECK_THAT(w.str(), Contains("requires_grad"));
  CHECK_THAT(Tensor::full({}, 2.0f).str(), Contains("2") && Contains("shape=[]"));
  CHECK(Tensor().str() == "Tensor(undefined)");
}

// ---------------------------------------------------------------------------------------------
// Errors say where and what

TEST_CASE("tensor: shape errors name the op and state the shapes", "[tensor]") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  REQUIRE_THROWS_AS(matmul(a, b), Error);
  REQUIRE_THROWS_WITH(matmul(a, b), StartsWith("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(add(a, b), StartsWith("add") && Contains("[2, 3]") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(reshape(a, {4, 2}), StartsWith("reshape") && Contains("[2, 3]") && Contains("[4, 2]"));
  REQUIRE_THROWS_WITH(narrow(a, 1, 2, 2), StartsWith("narrow") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(Tensor().shape(), StartsWith("Tensor"));
  Tensor c = Tensor::zeros({2});
  REQUIRE_THROWS_WITH(c.copy_from(a),
                      StartsWith("Tensor::copy_from") && Contains("[2, 3]") && Contains("[2]"));
  REQUIRE_THROWS_WITH(c.set_grad(Tensor::zeros({3})), StartsWith("Tensor::set_grad") && Contains("[3]"));
}

// ---------------------------------------------------------------------------------------------
// Autograd semantics

TEST_CASE("autograd: gradients accumulate across backward calls", "[autograd]") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3});
  x.set_requires_grad(true);
  CHECK_FALSE(x.grad().defined());
  sum(mul(x, 3.0f)).backward();
  CHECK(grad_of(x) == std::vector<float>{3, 3, 3});
  sum(mul(x, x)).backward();  // a second graph adds 2x
  CHECK(grad_of(x) == std::vector<float>{5, 7, 9});
  x.zero_grad();
  CHECK(grad_of(x) == std::vector<float>{0, 0, 0});

  SECTION("retain_graph lets one graph run backward twice") {
    const Tensor y = sum(mul(x, 2.0f));
    y.backward(true);
    CHECK(y.grad_fn() != nullptr);
    y.backward();
    CHECK(grad_of(x) == std::vector<float>{4, 4, 4});
  }
}

TEST_CASE("autograd: requires_grad propagates, backward needs it", "[autograd]") {
  Tensor x = Tensor::ones({2});
  const Tensor c = Tensor::ones({2});
  CHECK_FALSE(x.requires_grad());
  CHECK_FALSE(add(x, c).requires_grad());
  CHECK(add(x, c).is_leaf());
  REQUIRE_THROWS_WITH(sum(add(x, c)).backward(), StartsWith("Tensor::backward"));
  x.set_requires_grad(true);
  const Tensor y = add(x, c);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name) == "add");
  // Only a leaf may turn gradients off.
  Tensor y2 = y;
  REQUIRE_THROWS_WITH(y2.set_requires_grad(false), StartsWith("Tensor::set_requires_grad"));
  // The constant operand gets no gradient.
  sum(y).backward();
  CHECK(grad_of(x) == std::vector<float>{1, 1});
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("autograd: detach stops the gradient", "[autograd]") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3});
  x.set_requires_grad(true);
  const Tensor d = x.detach();
  CHECK(d.storage() == x.storage());
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  // d(x * detach(x))/dx = detach(x) = x, not 2x.
  sum(mul(x, d)).backward();
  CHECK(grad_of(x) == std::vector<float>{1, 2, 3});
  // Detaching an intermediate cuts the graph above it.
  x.zero_grad();
  const Tensor y = exp(x).detach();
  CHECK_FALSE(y.requires_grad());
  sum(add(mul(y, x), x)).backward();
  CHECK(grad_of(x)[0] == Approx(std::exp(1.0f) + 1.0f));
}

TEST_CASE("autograd: NoGradGuard records nothing", "[autograd]") {
  Tensor x = Tensor::ones({2, 2});
  x.set_requires_grad(true);
  CHECK(grad_enabled());
  {
    NoGradGuard ng;
    CHECK_FALSE(grad_enabled());
    const Tensor y = matmul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(y.at({0, 0}) == 2.0f);  // values are still computed
    {
      NoGradGuard nested;
      CHECK_FALSE(grad_enabled());
    }
    CHECK_FALSE(grad_enabled());  // the inner guard restores the outer state
    REQUIRE_THROWS_WITH(sum(y).backward(), StartsWith("Tensor::backward"));
  }
  CHECK(grad_enabled());
  const Tensor z = matmul(x, x);
  CHECK(z.requires_grad());
  CHECK(z.grad_fn() != nullptr);
}

TEST_CASE("autograd: backward with an explicit upstream gradient", "[autograd]") {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  x.set_requires_grad(true);
  const Tensor y = mul(x, x);  // dy/dx = 2x
  REQUIRE_THROWS_WITH(y.backward(), StartsWith("Tensor::backward") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(y.backward(Tensor::ones({3, 2})), StartsWith("Tensor::backward") && Contains("[3, 2]"));
  y.backward(Tensor::from_vector({1, 0, -1, 2, 0.5f, 0}, {2, 3}));
  CHECK(grad_of(x) == std::vector<float>{2, 0, -6, 16, 5, 0});
  // A transposed (non-contiguous) upstream gradient is read in logical order.
  x.zero_grad();
  const Tensor z = mul(x, 3.0f);
  z.backward(transpose(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}), 0, 1));
  CHECK(grad_of(x) == std::vector<float>{3, 9, 15, 6, 12, 18});
}

TEST_CASE("autograd: the graph is freed after backward", "[autograd]") {
  Tensor x = Tensor::from_vector({0.5f, 1.0f}, {2});
  x.set_requires_grad(true);
  std::weak_ptr<TensorImpl> hidden;  // an intermediate only the graph holds
  Tensor kept;                       // an intermediate the caller also holds
  Tensor loss;
  {
    const Tensor h = tanh(x);
    hidden = h.impl_ptr();
    kept = exp(h);
    loss = sum(mul(kept, kept));
  }
  REQUIRE_FALSE(hidden.expired());
  REQUIRE(kept.grad_fn() != nullptr);
  loss.backward();
  CHECK(hidden.expired());             // nothing references the intermediate any more
  CHECK(kept.grad_fn() == nullptr);    // its closure (and what it saved) is released
  CHECK_FALSE(kept.grad().defined());  // intermediate gradients are not kept
  CHECK(loss.grad_fn() == nullptr);
  CHECK(x.grad().defined());  // leaf gradients are
  // d/dx sum(exp(tanh x)^2) = 2 exp(2 tanh x) (1 - tanh^2 x)
  for (int i = 0; i < 2; ++i) {
    const double xi = i ? 1.0 : 0.5, t = std::tanh(xi);
    CHECK(x.grad().at({i}) == Approx(2 * std::exp(2 * t) * (1 - t * t)).epsilon(1e-5));
  }
}

TEST_CASE("autograd: a backward through a graph an earlier backward freed is refused", "[autograd]") {
  Tensor w = Tensor::from_vector({1, 2}, {2});
  w.set_requires_grad(true);
  const auto says_freed = [](const std::string& what, const char* op) {
    INFO(what);
    CHECK_THAT(what,
               StartsWith(std::string("Tensor::backward: the graph through a tensor computed by ") + op) &&
                   Contains("freed by an earlier backward()") && Contains("retain_graph = true"));
  };

  SECTION("a second loss from an intermediate of the first") {
    const Tensor h = mul(w, w);
    sum(h).backward();
    CHECK(grad_of(w) == std::vector<float>{2, 4});
    CHECK_FALSE(h.is_leaf());  // its closure is gone, but it was computed, not made by the caller
    CHECK(h.requires_grad());
    says_freed(backward_error(sum(h)), "mul");
    CHECK(grad_of(w) == std::vector<float>{2, 4});  // refused before any gradient changed
  }
  SECTION("the same loss twice") {
    const Tensor loss = sum(mul(w, w));
    loss.backward();
    says_freed(backward_error(loss), "sum");
    CHECK(grad_of(w) == std::vector<float>{2, 4});
  }
  SECTION("a shared intermediate reached through a new op") {
    const Tensor h = mul(w, w);
    sum(h).backward();
    says_freed(backward_error(sum(mul(h, 3.0f))), "mul");
    CHECK(grad_of(w) == std::vector<float>{2, 4});
  }
  SECTION("retain_graph keeps the graph: the second backward accumulates") {
    const Tensor h = mul(w, w);
    sum(h).backward(true);
    sum(mul(h, 3.0f)).backward();  // frees h's graph too
    CHECK(grad_of(w) == std::vector<float>{8, 16});
    says_freed(backward_error(sum(h)), "mul");
  }
  SECTION("a new graph from the leaf is always fine") {
    sum(mul(w, w)).backward();
    sum(mul(w, w)).backward();
    CHECK(grad_of(w) == std::vector<float>{4, 8});
  }
}

TEST_CASE("autograd: gradients through views of a leaf", "[autograd]") {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  x.set_requires_grad(true);
  const Tensor c = Tensor::from_vector({10, 20, 30, 40, 50, 60}, {3, 2});

  SECTION("transpose") {
    sum(mul(transpose(x, 0, 1), c)).backward();  // d/dx = c^T
    CHECK(grad_of(x) == std::vector<float>{10, 30, 50, 20, 40, 60});
  }
  SECTION("narrow") {
    sum(mul(narrow(x, 1, 1, 2), Tensor::from_vector({1, 2, 3, 4}, {2, 2}))).backward();
    CHECK(grad_of(x) == std::vector<float>{0, 1, 2, 0, 3, 4});
  }
  SECTION("reshape") {
    sum(mul(reshape(x, {3, 2}), c)).backward();
    CHECK(grad_of(x) == std::vector<float>{10, 20, 30, 40, 50, 60});
  }
  SECTION("narrow of a transpose, then matmul") {
    // t = x^T (3, 2); rows 1..2 of t are columns 1..2 of x. out = t[1:3] @ [1, 1]^T.
    const Tensor t = narrow(transpose(x, 0, 1), 0, 1, 2);
    sum(matmul(t, Tensor::ones({2, 1}))).backward();
    CHECK(grad_of(x) == std::vector<float>{0, 1, 1, 0, 1, 1});
  }
  SECTION("two views of one leaf") {
    sum(add(mul(transpose(x, 0, 1), c), mul(reshape(x, {3, 2}), c))).backward();
    CHECK(grad_of(x) == std::vector<float>{20, 50, 80, 60, 90, 120});
  }
}

TEST_CASE("autograd: a tensor used twice gets both contributions", "[autograd]") {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3});
  x.set_requires_grad(true);
  SECTION("x * x") {
    sum(mul(x, x)).backward();
    CHECK(grad_of(x) == std::vector<float>{2, -4, 6});
  }
  SECTION("an intermediate feeding two branches (a diamond)") {
    const Tensor a = tanh(x);
    sum(add(mul(a, a), a)).backward();  // d/dx = (2a + 1)(1 - a^2)
    const std::vector<float> g = grad_of(x);
    for (int i = 0; i < 3; ++i) {
      const double t = std::tanh(static_cast<double>(x.at({i})));
      CHECK(g[i] == Approx((2 * t + 1) * (1 - t * t)).epsilon(1e-5));
    }
  }
  SECTION("two different ops on x") {
    sum(add(exp(x), mul(x, 3.0f))).backward();
    const std::vector<float> g = grad_of(x);
    for (int i = 0; i < 3; ++i) CHECK(g[i] == Approx(std::exp(x.at({i})) + 3.0f).epsilon(1e-6));
  }
}

TEST_CASE("autograd: gradients land in a flat buffer placed with set_grad", "[autograd]") {
  // As Module does: parameters are views into one storage, their gradients views into another.
  auto values = std::make_shared<Storage>(10);
  auto grads = std::make_shared<Storage>(10);
  for (int i = 0; i < 10; ++i) values->data()[i] = static_cast<float>(i), grads->data()[i] = 0.0f;
  Tensor w = Tensor::view_of(values, {2, 3}, 1), b = Tensor::view_of(values, {3}, 7);
  CHECK(w.storage() == values);
  CHECK(w.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(b.to_vector() == std::vector<float>{7, 8, 9});
  w.set_grad(Tensor::view_of(grads, {2, 3}, 1));
  b.set_grad(Tensor::view_of(grads, {3}, 7));
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor x = Tensor::from_vector({1, 2}, {1, 2});
  sum(add(matmul(x, w), b)).backward();  // d/dw = x^T 1, d/db = 1
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<float> flat(grads->data(), grads->data() + 10);
    const float k = static_cast<float>(pass + 1);
    CHECK(flat == std::vector<float>{0, k, k, k, 2 * k, 2 * k, 2 * k, k, k, k});
    if (pass == 0) sum(add(matmul(x, w), b)).backward();  // accumulates in place
  }
  REQUIRE_THROWS_WITH(Tensor::view_of(values, {2, 3}, 5),
                      StartsWith("Tensor::view_of") && Contains("[2, 3]"));
}

// ---------------------------------------------------------------------------------------------
// Memory

TEST_CASE("memory: the pool serves repeated identical steps without new allocations", "[memory]") {
  // A small training step: embedding, layer norm, linear, gelu, attention-like matmuls, softmax,
  // dropout, cross-entropy, and backward.
  Rng init(1);
  Tensor emb = Tensor::randn({11, 8}, init), w1 = Tensor::randn({16, 8}, init), b1 = Tensor::zeros({16});
  Tensor ln_w = Tensor::ones({8}), ln_b = Tensor::zeros({8}), head = Tensor::randn({11, 16}, init);
  std::vector<Tensor*> params = {&emb, &w1, &b1, &ln_w, &ln_b, &head};
  for (Tensor* p : params) p->set_requires_grad(true);
  const std::vector<int32_t> ids = {1, 4, 2, 9, 0, 3}, targets = {4, 2, 9, 0, 3, -100};
  const auto step = [&]() {
    Rng drop(5);
    for (Tensor* p : params) p->zero_grad();
    const Tensor x = layer_norm(embedding(emb, ids, {2, 3}), ln_w, ln_b);               // (2, 3, 8)
    const Tensor scores = softmax(div(matmul(x, x, false, true), 3.0f));                // (2, 3, 3)
    const Tensor mixed = add(x, matmul(scores, x));                                     // (2, 3, 8)
    const Tensor h = dropout(gelu(linear(mixed, w1, b1)), 0.1f, true, drop);            // (2, 3, 16)
    const Tensor logits = linear(transpose(transpose(h, 0, 1), 0, 1), head, Tensor());  // (2, 3, 11)
    const Tensor loss = add(cross_entropy(logits, targets), mul(mean(pow(h, 2.0f)), 0.01f));
    loss.backward();
    return loss.item();
  };
  const float first = step();
  const size_t after_first = memory::stats().fresh_allocs;
  for (int i = 0; i < 3; ++i) CHECK(step() == first);
  CHECK(memory::stats().fresh_allocs == after_first);
  CHECK(memory::stats().reused > 0);
}

TEST_CASE("memory: released buffers are reused by size", "[memory]") {
  const size_t n = 12345;  // a size no other test uses
  { const Tensor a = Tensor::zeros({static_cast<int64_t>(n)}); }
  const memory::Stats before = memory::stats();
  CHECK(before.cached_bytes >= n * sizeof(float));
  { const Tensor b = Tensor::ones({static_cast<int64_t>(n)}); }
  const memory::Stats after = memory::stats();
  CHECK(after.fresh_allocs == before.fresh_allocs);
  CHECK(after.reused == before.reused + 1);
}

TEST_CASE("tensor: the first value that is not finite, and its name", "[tensor]") {
  const float x[] = {1.0f, -0.0f, 3e38f, NAN, INFINITY};
  CHECK(first_nonfinite(x, 3) == 3);  // all finite: n
  CHECK(first_nonfinite(x, 5) == 3);
  CHECK(first_nonfinite(x + 4, 1) == 0);
  CHECK(first_nonfinite(x, 0) == 0);
  CHECK(std::string(nonfinite_name(NAN)) == "NaN");
  CHECK(std::string(nonfinite_name(INFINITY)) == "+Inf");
  CHECK(std::string(nonfinite_name(-INFINITY)) == "-Inf");
}

TEST_CASE("strings: ends_with, and ascii_lower folds ASCII letters only", "[tensor]") {
  CHECK(tfm::ends_with("run.txt.gz", ".gz"));
  CHECK_FALSE(tfm::ends_with("gz", ".gz"));
  CHECK(tfm::ascii_lower("Notes.TXT") == "notes.txt");
  CHECK(tfm::ascii_lower("\xC3\x89T\xC3\x89") == "\xC3\x89t\xC3\x89");  // "ÉTÉ": UTF-8 bytes untouched
}
