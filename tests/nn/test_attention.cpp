// The fused attention op against the same math composed from primitive ops (values and gradients),
// and central-difference gradient checks of the fused op, for each mask and head configuration.
// Legend: B batch, Tq/Tk query/key length, H/Hkv heads, Dk/Dv per-head widths.
#include <cmath>
#include <functional>

#include "gradcheck.h"
#include "tfm/engine/fused_attention.h"

using namespace tfm;

namespace {

struct Case {
  const char* name;
  int64_t B, Tq, Tk, H, Hkv, Dk, Dv;
  bool causal;
  std::vector<int64_t> key_lengths;
  float dropout = 0.0f;
};

// 1 where query i (at absolute position i + Tk - Tq) must not see key j: (B, 1, Tq, Tk).
Tensor hidden_mask(const Case& c) {
  Tensor m = Tensor::zeros({c.B, 1, c.Tq, c.Tk});
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.Tq; ++i)
      for (int64_t j = 0; j < c.Tk; ++j)
        if ((c.causal && j > i + c.Tk - c.Tq) || (!c.key_lengths.empty() && j >= c.key_lengths[b]))
          m.data()[(b * c.Tq + i) * c.Tk + j] = 1.0f;
  return m;
}

// kv (B, Tk, Hkv*D) -> (B, H, Tk, D): query head h reads kv head h / (H / Hkv).
Tensor repeat_kv_heads(const Tensor& kv, const Case& c, int64_t D) {
  const Tensor heads = permute(reshape(kv, {c.B, c.Tk, c.Hkv, D}), {0, 2, 1, 3});  // (B, Hkv, Tk, D)
  std::vector<Tensor> per_head;
  for (int64_t h = 0; h < c.H; ++h) per_head.push_back(narrow(heads, 1, h / (c.H / c.Hkv), 1));
  return concat(per_head, 1);
}

// The composed form: softmax(Q K^T / sqrt(Dk) masked) (dropped) V, per head, from primitive ops.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Case& c, Tensor* probs,
                uint64_t seed) {
  const Tensor qh = permute(reshape(q, {c.B, c.Tq, c.H, c.Dk}), {0, 2, 1, 3});  // (B, H, Tq, Dk)
  const Tensor kh = repeat_kv_heads(k, c, c.Dk);                                // (B, H, Tk, Dk)
  const Tensor vh = repeat_kv_heads(v, c, c.Dv);                                // (B, H, Tk, Dv)
  const Tensor s = matmul(qh, kh, false, true) * (1.0f / std::sqrt(static_cast<float>(c.Dk)));
  const Tensor mask = hidden_mask(c);
  Tensor p = softmax(masked_fill(s, mask, -1e30f)) * rsub(1.0f, mask);  // (B, H, Tq, Tk)
  if (probs) *probs = p;
  Rng rng(seed);
  p = dropout(p, c.dropout, c.dropout > 0.0f, rng);
  return reshape(permute(matmul(p, vh), {0, 2, 1, 3}), {c.B, c.Tq, c.H * c.Dv});  // (B, Tq, H*Dv)
}

// rows: head gating's selected (query, head) rows (AttentionOptions::active_rows), empty = all.
Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, const Case& c, Tensor* probs, uint64_t seed,
             const std::vector<uint8_t>& rows = {}) {
  Rng rng(seed);
  AttentionOptions opt;
  opt.n_heads = c.H;
  opt.n_kv_heads = c.Hkv;
  opt.causal = c.causal;
  opt.key_lengths = c.key_lengths;
  opt.dropout = c.dropout;
  opt.training = c.dropout > 0.0f;
  opt.rng = &rng;
  opt.active_rows = rows;
  return scaled_dot_product_attention(q, k, v, opt, probs);
}

void require_close(const Tensor& a, const Tensor& b, float tol, const char* what) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::isfinite(x[i]));
    worst = std::max(worst, std::fabs(x[i] - y[i]));
  }
  CAPTURE(worst);
  CHECK(worst <= tol);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"plain", 2, 3, 3, 2, 2, 3, 3, false, {}},
      {"causal", 2, 4, 4, 2, 2, 3, 3, true, {}},
      {"key padding, one sequence fully padded", 2, 3, 4, 2, 2, 3, 2, false, {3, 0}},
      {"causal and padding", 2, 4, 4, 2, 2, 2, 2, true, {4, 2}},
      {"grouped-query (4 heads, 2 kv heads)", 2, 3, 3, 4, 2, 2, 3, true, {}},
      {"multi-query (4 heads, 1 kv head)", 2, 3, 3, 4, 1, 2, 2, true, {3, 2}},
      {"Tq < Tk with causal offset (KV-cache decoding)", 2, 2, 5, 2, 1, 3, 3, true, {}},
      {"Tq > Tk causal: first rows see nothing", 1, 4, 2, 2, 2, 2, 2, true, {}},
      {"attention dropout, fixed seed", 2, 4, 4, 2, 2, 3, 3, true, {}, 0.3f},
      // Longer than the kernel's 64-row blocks: the causal block skipping and ragged last blocks.
      {"several row blocks, causal and padding", 2, 150, 150, 2, 1, 2, 2, true, {150, 70}},
      {"several row blocks, Tq < Tk causal, dropout", 1, 100, 140, 2, 2, 2, 3, true, {}, 0.2f},
      {"several row blocks, padding only", 2, 70, 130, 2, 2, 2, 2, false, {0, 129}},
  };
  return all;
}

// Two forms of the op on the same random q, k, v of case c: their outputs, probabilities and the
// gradients (dq, dk, dv) of sum(out * R) for one random R.
struct Compared {
  Tensor outs[2], probs[2];
  std::vector<Tensor> grads[2];
};
using Form = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* probs)>;
Compared compare_forms(const Case& c, uint64_t seed, const Form& first, const Form& second) {
  Rng rng(seed);
  Tensor q = Tensor::randn({c.B, c.Tq, c.H * c.Dk}, rng);
  Tensor k = Tensor::randn({c.B, c.Tk, c.Hkv * c.Dk}, rng);
  Tensor v = Tensor::randn({c.B, c.Tk, c.Hkv * c.Dv}, rng);
  const Tensor r = Tensor::randn({c.B, c.Tq, c.H * c.Dv}, rng);
  Compared out;
  for (int which = 0; which < 2; ++which) {
    for (Tensor* t : {&q, &k, &v}) {
      t->set_grad(Tensor());
      t->set_requires_grad(true);
    }
    out.outs[which] = (which == 0 ? first : second)(q, k, v, &out.probs[which]);
    sum(out.outs[which] * r).backward();
    out.grads[which] = {q.grad(), k.grad(), v.grad()};
  }
  require_close(out.outs[0], out.outs[1], 1e-5f, "output");
  require_close(out.grads[0][0], out.grads[1][0], 1e-5f, "dq");
  require_close(out.grads[0][1], out.grads[1][1], 1e-5f, "dk");
  require_close(out.grads[0][2], out.grads[1][2], 1e-5f, "dv");
  return out;
}

}  // namespace

TEST_CASE("attention: fused op equals the composed form, values and gradients", "[attention]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const Compared cmp = compare_forms(
          c, 11,
          [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor* p) {
            return fused(q, k, v, c, p, 5);
          },
          [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor* p) {
            return composed(q, k, v, c, p, 5);
          });
      const Tensor* outs = cmp.outs;
      const Tensor* probs = cmp.probs;
      require_close(probs[0], probs[1], 1e-6f, "probabilities");
      // Rows with no visible key: zero probabilities and zero output, never NaN.
      const Tensor mask = hidden_mask(c);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Tq; ++i) {
          bool any = false;
          for (int64_t j = 0; j < c.Tk; ++j) any = any || mask.at({b, 0, i, j}) == 0.0f;
          for (int64_t h = 0; h < c.H; ++h) {
            float row = 0.0f;
            for (int64_t j = 0; j < c.Tk; ++j) {
              row += probs[0].at({b, h, i, j});
              if (mask.at({b, 0, i, j}) != 0.0f) CHECK(probs[0].at({b, h, i, j}) == 0.0f);
            }
            CHECK(row == Approx(any ? 1.0f : 0.0f).margin(1e-6));
            if (!any)
              for (int64_t e = 0; e < c.Dv; ++e) CHECK(outs[0].at({b, i, h * c.Dv + e}) == 0.0f);
          }
        }
    }
  }
}

TEST_CASE("attention: fused op gradient check", "[attention][gradcheck]") {
  for (const Case& c : cases()) {
    if (c.Tq > 8) continue;  // the long cases are covered by the comparison above
    SECTION(c.name) {
      Rng rng(3);
      testing::check_gradients(
          [&c](const std::vector<Tensor>& in) { return fused(in[0], in[1], in[2], c, nullptr, 9); },
          {Tensor::randn({c.B, c.Tq, c.H * c.Dk}, rng), Tensor::randn({c.B, c.Tk, c.Hkv * c.Dk}, rng),
           Tensor::randn({c.B, c.Tk, c.Hkv * c.Dv}, rng)});
    }
  }
}

TEST_CASE("attention: keys and values strided per batch (a narrowed KV cache) are read in place",
          "[attention]") {
  const Case c{"cache", 2, 1, 3, 2, 1, 2, 2, true, {}};
  Rng rng(4);
  const Tensor q = Tensor::randn({2, 1, 4}, rng);
  const Tensor cache_k = Tensor::randn({2, 6, 2}, rng), cache_v = Tensor::randn({2, 6, 2}, rng);
  const Tensor k = narrow(cache_k, 1, 0, 3), v = narrow(cache_v, 1, 0, 3);  // batch stride 12, not 6
  REQUIRE_FALSE(k.is_contiguous());
  require_close(fused(q, k, v, c, nullptr, 1), fused(q, k.clone(), v.clone(), c, nullptr, 1), 0.0f,
                "strided");
}

TEST_CASE("attention: bad shapes are reported with the op's name", "[attention]") {
  AttentionOptions opt;
  opt.n_heads = 3;
  opt.n_kv_heads = 2;
  const Tensor x = Tensor::zeros({1, 2, 6});
  CHECK_THROWS_WITH(scaled_dot_product_attention(x, x, x, opt),
                    Catch::Contains("scaled_dot_product_attention"));
  opt.n_kv_heads = 3;
  opt.key_lengths = {5};
  CHECK_THROWS_WITH(scaled_dot_product_attention(x, x, x, opt), Catch::Contains("key length 5"));
}

namespace {

// Head gating's row selection: (B, Tq, H) flags, about half set, with one head of the first sequence
// serving no row and one serving every row (the edge cases of the kernel's row lists).
std::vector<uint8_t> random_rows(const Case& c, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> active(c.B * c.Tq * c.H);
  for (int64_t r = 0; r < c.B * c.Tq; ++r)
    for (int64_t h = 0; h < c.H; ++h) active[r * c.H + h] = h == 0 ? 0 : h == 1 ? 1 : rng.uniform() < 0.5;
  for (int64_t r = c.Tq; r < c.B * c.Tq; ++r) active[r * c.H] = rng.uniform() < 0.5;  // b >= 1: random
  return active;
}

// The dense op's output with the unselected (query, head) rows multiplied by 0: (B, Tq, H*Dv).
Tensor dense_then_zeroed(const Tensor& q, const Tensor& k, const Tensor& v, const Case& c,
                         const std::vector<uint8_t>& rows, Tensor* probs, uint64_t seed) {
  std::vector<float> m(rows.begin(), rows.end());
  const Tensor o = fused(q, k, v, c, probs, seed);
  return reshape(reshape(o, {c.B, c.Tq, c.H, c.Dv}) * Tensor::from_vector(m, {c.B, c.Tq, c.H, 1}),
                 {c.B, c.Tq, c.H * c.Dv});
}

}  // namespace

TEST_CASE("attention: selected rows (head gating) equal the dense op with the other rows zeroed",
          "[attention]") {
  for (const Case& c : cases()) {
    SECTION(c.name) {
      const std::vector<uint8_t> rows = random_rows(c, 4);
      const Compared cmp = compare_forms(
          c, 12,
          [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor* p) {
            return fused(q, k, v, c, p, 5, rows);
          },
          [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor* p) {
            return dense_then_zeroed(q, k, v, c, rows, p, 5);
          });
      const Tensor* probs = cmp.probs;
      // Probabilities: the dense ones on selected rows (to rounding: a gathered block is a GEMM of
      // another shape), exactly zero on the others.
      float worst = 0.0f;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Tq; ++i)
          for (int64_t h = 0; h < c.H; ++h) {
            const bool on = rows[(b * c.Tq + i) * c.H + h];
            for (int64_t j = 0; j < c.Tk; ++j) {
              if (!on) REQUIRE(probs[0].at({b, h, i, j}) == 0.0f);
              worst = std::max(
                  worst, std::fabs(probs[0].at({b, h, i, j}) - (on ? probs[1].at({b, h, i, j}) : 0.0f)));
            }
          }
      CHECK(worst <= 1e-6f);
    }
  }
}

TEST_CASE("attention: selected rows (head gating) gradient check", "[attention][gradcheck]") {
  for (const Case& c : cases()) {
    if (c.Tq > 8) continue;
    SECTION(c.name) {
      Rng rng(3);
      const std::vector<uint8_t> rows = random_rows(c, 6);
      testing::check_gradients(
          [&](const std::vector<Tensor>& in) { return fused(in[0], in[1], in[2], c, nullptr, 9, rows); },
          {Tensor::randn({c.B, c.Tq, c.H * c.Dk}, rng), Tensor::randn({c.B, c.Tk, c.Hkv * c.Dk}, rng),
           Tensor::randn({c.B, c.Tk, c.Hkv * c.Dv}, rng)});
    }
  }
}
