// Every op: its forward, and beside it the closure that adds its inputs' gradients.
#include "tfm/engine/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels.h"
#include "strided.h"
#include "tfm/engine/gemm.h"

namespace tfm {

template <>
const std::vector<std::string>& enum_names<Activation>() {
  static const std::vector<std::string> names = {"gelu", "relu", "swiglu"};
  return names;
}

namespace {

// Elementwise loops over more elements than this run on all OpenMP threads (memory-bound passes over
// large (B, T, C) activations); smaller ones stay on one thread, where a fork/join would cost more
// than it saves (the small config's 98K-element tensors).
constexpr int64_t kParallelElements = 1 << 20;

int64_t normalize_axis(const char* op, int64_t axis, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  TFM_CHECK(axis >= -rank && axis < rank, op, "axis ", axis, " out of range for shape ", shape_str(shape));
  return axis < 0 ? axis + rank : axis;
}

// grad (contiguous, of the slot's shape) += g (contiguous, same number of elements, same order).
void accumulate_flat(const GradRef& slot, const Tensor& g) {
  float* dst = grad_buffer(slot);
  const float* src = g.data();
  const int64_t n = g.numel();
#pragma omp parallel for simd if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    TFM_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ", shape_str(b),
              " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Elementwise binary ops. da(a, b) and db(a, b) are the partial derivatives of f. When they are
// constants (add, sub: kReadsValues false) the backward keeps only the inputs' gradient slots, so
// the graph does not hold the operands' values.

template <bool kReadsValues, class F, class DA, class DB>
Tensor binary(const char* name, const Tensor& a, const Tensor& b, F f, DA da, DB db) {
  TFM_CHECK(a.defined() && b.defined(), name, "undefined operand");
  const Shape out_shape = broadcast_shape(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape);
  float* o = out.data();
  const bool same = a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous();
  if (same) {
    const float* pa = a.data();
    const float* pb = b.data();
    const int64_t n = out.numel();
#pragma omp parallel for simd if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
  } else {
    const Shape sa = strided::broadcast_strides(a.shape(), a.strides(), out_shape);
    const Shape sb = strided::broadcast_strides(b.shape(), b.strides(), out_shape);
    const Shape so = out.strides();
    strided::for_each<3>(out_shape, {so.data(), sa.data(), sb.data()}, {o, a.data(), b.data()},
                         [&](float** p) { *p[0] = f(*p[1], *p[2]); });
  }
  // Values are saved only when the derivatives read them; otherwise the gradient itself stands in
  // for them in the loops below (it has the output's shape, and da/db ignore their arguments).
  const Tensor va = kReadsValues ? a : Tensor(), vb = kReadsValues ? b : Tensor();
  const Shape shape_a = a.shape(), shape_b = b.shape();
  record(
      out, name, {a, b},
      [ra = grad_ref(a), rb = grad_ref(b), va, vb, shape_a, shape_b, da, db, same,
       out_shape](const Tensor& g) {
        const Shape sg = contiguous_strides(out_shape);
        for (int which = 0; which < 2; ++which) {
          const GradRef& r = which == 0 ? ra : rb;
          if (!r) continue;
          const float* pa = kReadsValues ? va.data() : g.data();
          const float* pb = kReadsValues ? vb.data() : g.data();
          if (same) {  // every element written: the first writer stores instead of adding to zeros
            const GradTarget t = grad_target(r);
            float* gt = t.data;
            const float keep = t.beta;
            const float* pg = g.data();
            const int64_t n = g.numel();
            if (which == 0) {
#pragma omp parallel for simd if (n > kParallelElements)
              for (int64_t i = 0; i < n; ++i)
                gt[i] = (keep != 0.0f ? gt[i] : 0.0f) + pg[i] * da(pa[i], pb[i]);
            } else {
#pragma omp parallel for simd if (n > kParallelElements)
              for (int64_t i = 0; i < n; ++i)
                gt[i] = (keep != 0.0f ? gt[i] : 0.0f) + pg[i] * db(pa[i], pb[i]);
            }
            continue;
          }
          float* gt = grad_buffer(r);
          // Broadcast dims of the input get stride 0 in its gradient, so contributions sum there.
          const Shape sa = kReadsValues ? strided::broadcast_strides(shape_a, va.strides(), out_shape) : sg;
          const Shape sb = kReadsValues ? strided::broadcast_strides(shape_b, vb.strides(), out_shape) : sg;
          const Shape& shape_t = which == 0 ? shape_a : shape_b;
          const Shape st = strided::broadcast_strides(shape_t, contiguous_strides(shape_t), out_shape);
          strided::for_each<4>(
              out_shape, {sg.data(), sa.data(), sb.data(), st.data()},
              {g.data(), const_cast<float*>(pa), const_cast<float*>(pb), gt},
              [&](float** p) { *p[3] += *p[0] * (which == 0 ? da(*p[1], *p[2]) : db(*p[1], *p[2])); });
        }
      });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Elementwise unary ops. df(x, y) is dy/dx given the input x and the output y.

// f of every element of x (contiguous), into a new contiguous tensor; not recorded.
template <class F>
Tensor map_elements(const Tensor& x, F f) {
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) po[i] = f(px[i]);
  return out;
}

template <class F, class DF>
Tensor unary(const char* name, const Tensor& x_in, F f, DF df) {
  TFM_CHECK(x_in.defined(), name, "undefined operand");
  const Tensor x = contiguous_values(x_in);
  Tensor out = map_elements(x, f);
  const Tensor y = out.detach();  // saved output, without a reference cycle
  record(out, name, {x_in}, [rx = grad_ref(x_in), x, y, df](const Tensor& g) {
    float* gx = grad_buffer(rx);
    const float* pg = g.data();
    const float* px = x.data();
    const float* py = y.data();
    const int64_t n = g.numel();
    for (int64_t i = 0; i < n; ++i) gx[i] += pg[i] * df(px[i], py[i]);
  });
  return out;
}

// y = s * x + t elementwise: the backward needs neither x nor y, only s.
Tensor affine(const char* name, const Tensor& x_in, float s, float t) {
  TFM_CHECK(x_in.defined(), name, "undefined operand");
  Tensor out = map_elements(contiguous_values(x_in), [s, t](float v) { return s * v + t; });
  record(out, name, {x_in}, [rx = grad_ref(x_in), s](const Tensor& g) {
    float* gx = grad_buffer(rx);
    const float* pg = g.data();
    const int64_t n = g.numel();
#pragma omp parallel for simd if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) gx[i] += s * pg[i];
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary<false>(
      "add", a, b, [](float x, float y) { return x + y; }, [](float, float) { return 1.0f; },
      [](float, float) { return 1.0f; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary<false>(
      "sub", a, b, [](float x, float y) { return x - y; }, [](float, float) { return 1.0f; },
      [](float, float) { return -1.0f; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary<true>(
      "mul", a, b, [](float x, float y) { return x * y; }, [](float, float y) { return y; },
      [](float x, float) { return x; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary<true>(
      "div", a, b, [](float x, float y) { return x / y; }, [](float, float y) { return 1.0f / y; },
      [](float x, float y) { return -x / (y * y); });
}

Tensor add(const Tensor& a, float s) {
  return affine("add_scalar", a, 1.0f, s);
}
Tensor sub(const Tensor& a, float s) {
  return add(a, -s);
}
Tensor mul(const Tensor& a, float s) {
  return affine("mul_scalar", a, s, 0.0f);
}
Tensor div(const Tensor& a, float s) {
  // x / s, not x * (1 / s): the forward rounds as the division does.
  return unary(
      "div_scalar", a, [s](float x) { return x / s; }, [s](float, float) { return 1.0f / s; });
}
Tensor rsub(float s, const Tensor& a) {
  return affine("rsub_scalar", a, -1.0f, s);
}
Tensor rdiv(float s, const Tensor& a) {
  // d(s/x)/dx = -s/x^2 = -y/x
  return unary(
      "rdiv_scalar", a, [s](float x) { return s / x; }, [](float x, float y) { return -y / x; });
}

Tensor neg(const Tensor& x) {
  return affine("neg", x, -1.0f, 0.0f);
}
Tensor exp(const Tensor& x) {
  return unary(
      "exp", x, [](float v) { return std::exp(v); }, [](float, float y) { return y; });
}
Tensor log(const Tensor& x) {
  return unary(
      "log", x, [](float v) { return std::log(v); }, [](float v, float) { return 1.0f / v; });
}
Tensor sqrt(const Tensor& x) {
  return unary(
      "sqrt", x, [](float v) { return std::sqrt(v); }, [](float, float y) { return 0.5f / y; });
}
Tensor pow(const Tensor& x, float p) {
  return unary(
      "pow", x, [p](float v) { return std::pow(v, p); },
      [p](float v, float) { return p * std::pow(v, p - 1.0f); });
}
Tensor tanh(const Tensor& x) {
  return unary(
      "tanh", x, [](float v) { return std::tanh(v); }, [](float, float y) { return 1.0f - y * y; });
}
Tensor relu(const Tensor& x) {
  return unary(
      "relu", x, [](float v) { return v > 0.0f ? v : 0.0f; },
      [](float v, float) { return v > 0.0f ? 1.0f : 0.0f; });
}

Tensor gelu(const Tensor& x_in) {
  const Tensor x = contiguous_values(x_in);
  Tensor out = Tensor::empty(x.shape());
  kernels::gelu_forward(out.data(), x.data(), x.numel());
  record(out, "gelu", {x_in}, [rx = grad_ref(x_in), x](const Tensor& g) {
    kernels::gelu_backward(grad_buffer(rx), g.data(), x.data(), x.numel());
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Matrix products

namespace {

// The last two dims of t as a BLAS operand: logical (rows, cols) = trans ? P^T : P, with P row-major
// with leading dimension ld. `batch_offsets` lists where each matrix of the leading dims starts.
struct MatOperand {
  Tensor values;  // t, or a contiguous copy when its strides do not fit BLAS
  int64_t rows = 0, cols = 0, ld = 0;
  bool trans = false;
  std::vector<int64_t> batch_offsets;
};

std::vector<int64_t> batch_offsets_of(const Tensor& t) {
  const int64_t rank = t.dim();
  Shape bshape(t.shape().begin(), t.shape().end() - 2);
  Shape bstrides(t.strides().begin(), t.strides().end() - 2);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(shape_numel(bshape)));
  if (rank == 2) return {0};
  Shape index(bshape.size(), 0);
  int64_t off = 0;
  while (true) {
    offsets.push_back(off);
    int64_t d = static_cast<int64_t>(bshape.size()) - 1;
    for (; d >= 0; --d) {
      if (++index[d] < bshape[d]) {
        off += bstrides[d];
        break;
      }
      off -= bstrides[d] * (bshape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) break;
  }
  return offsets;
}

MatOperand mat_operand(const Tensor& t) {
  MatOperand m;
  const int64_t rank = t.dim();
  m.rows = t.shape()[rank - 2];
  m.cols = t.shape()[rank - 1];
  const int64_t sr = t.strides()[rank - 2], sc = t.strides()[rank - 1];
  if (t.is_contiguous()) {
    // Dense rows, cols apart. Not sr: a size-1 dim may carry any stride (a (B, 1, K) view from permute
    // has sr = B * K), and the folded batched GEMM reads every batch's rows with this ld.
    m.values = t;
    m.ld = std::max<int64_t>(m.cols, 1);
  } else if ((sc == 1 || m.cols == 1) && sr >= std::max<int64_t>(m.cols, 1)) {
    m.values = t;
    m.ld = sr;
  } else if ((sr == 1 || m.rows == 1) && sc >= std::max<int64_t>(m.rows, 1) && m.cols > 1) {
    m.values = t;
    m.ld = sc;
    m.trans = true;
  } else {
    m.values = contiguous_values(t);
    m.ld = std::max<int64_t>(m.cols, 1);
  }
  m.batch_offsets = batch_offsets_of(m.values);
  return m;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TFM_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul", "operands need at least 2 dims, got ",
            shape_str(a.shape()), " and ", shape_str(b.shape()));
  const Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  TFM_CHECK(ba == bb || ba.empty() || bb.empty(), "matmul", "batch dims of ", shape_str(a.shape()), " and ",
            shape_str(b.shape()), " must match (or one operand be 2-D)");
  const MatOperand A = mat_operand(a), B = mat_operand(b);
  const int64_t M = trans_a ? A.cols : A.rows, K = trans_a ? A.rows : A.cols;
  const int64_t Kb = trans_b ? B.cols : B.rows, N = trans_b ? B.rows : B.cols;
  TFM_CHECK(K == Kb, "matmul", "inner dims differ: ", shape_str(a.shape()), (trans_a ? "^T" : ""), " x ",
            shape_str(b.shape()), (trans_b ? "^T" : ""), " (", K, " vs ", Kb, ")");
  const bool at = A.trans != trans_a, bt = B.trans != trans_b;  // logical op(A), op(B) from raw storage
  Shape out_shape = ba.empty() ? bb : ba;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape);
  const int64_t batches = std::max(A.batch_offsets.size(), B.batch_offsets.size());
  const float* pa = A.values.data();
  const float* pb = B.values.data();
  // A shared right operand and a row-major left operand whose matrices follow each other: one GEMM.
  const bool fold = B.batch_offsets.size() == 1 && !at && A.values.is_contiguous() && batches > 1;
  if (fold) {
    gemm(false, bt, batches * M, N, K, 1.0f, pa, A.ld, pb, B.ld, 0.0f, out.data(), N);
  } else {
    for (int64_t i = 0; i < batches; ++i) {
      const float* ai = pa + A.batch_offsets[A.batch_offsets.size() == 1 ? 0 : i];
      const float* bi = pb + B.batch_offsets[B.batch_offsets.size() == 1 ? 0 : i];
      gemm(at, bt, M, N, K, 1.0f, ai, A.ld, bi, B.ld, 0.0f, out.data() + i * M * N, N);
    }
  }
  record(out, "matmul", {a, b},
         [ra = grad_ref(a), rb = grad_ref(b), A, B, at, bt, trans_a, trans_b, M, N, K, batches,
          fold](const Tensor& g) {
           // With logical op(A) (M,K), op(B) (K,N): d op(A) = dC op(B)^T, d op(B) = op(A)^T dC. When the user
           // asked for a transpose, the gradient of the stored operand is the transpose of those.
           const float* pa = A.values.data();
           const float* pb = B.values.data();
           const float* pg = g.data();
           if (ra) {
             float* ga = grad_buffer(ra);
             const int64_t a_mat = M * K;
             if (fold && !trans_a) {
               gemm(false, !bt, batches * M, K, N, 1.0f, pg, N, pb, B.ld, 1.0f, ga, K);
             } else {
               for (int64_t i = 0; i < batches; ++i) {
                 const float* bi = pb + B.batch_offsets[B.batch_offsets.size() == 1 ? 0 : i];
                 float* gai = ga + (A.batch_offsets.size() == 1 ? 0 : i * a_mat);
                 const float* gi = pg + i * M * N;
                 if (!trans_a)
                   gemm(false, !bt, M, K, N, 1.0f, gi, N, bi, B.ld, 1.0f, gai, K);
                 else
                   gemm(bt, true, K, M, N, 1.0f, bi, B.ld, gi, N, 1.0f, gai, M);
               }
             }
           }
           if (rb) {
             float* gb = grad_buffer(rb);
             const int64_t b_mat = K * N;
             if (fold) {
               if (!trans_b)
                 gemm(true, false, K, N, batches * M, 1.0f, pa, A.ld, pg, N, 1.0f, gb, N);
               else
                 gemm(true, false, N, K, batches * M, 1.0f, pg, N, pa, A.ld, 1.0f, gb, K);
             } else {
               for (int64_t i = 0; i < batches; ++i) {
                 const float* ai = pa + A.batch_offsets[A.batch_offsets.size() == 1 ? 0 : i];
                 float* gbi = gb + (B.batch_offsets.size() == 1 ? 0 : i * b_mat);
                 const float* gi = pg + i * M * N;
                 if (!trans_b)
                   gemm(!at, false, K, N, M, 1.0f, ai, A.ld, gi, N, 1.0f, gbi, N);
                 else
                   gemm(true, at, N, K, M, 1.0f, gi, N, ai, A.ld, 1.0f, gbi, K);
               }
             }
           }
         });
  return out;
}

namespace {
// out (N, out_dim) = x (N, in) W^T (+ bias): the forward of linear and of the feed-forward's layers.
void linear_rows(float* out, const float* x, const float* w, const float* bias, int64_t N, int64_t in,
                 int64_t out_dim) {
  if (bias)
    gemm_bias(false, true, N, out_dim, in, 1.0f, x, in, w, in, bias, out, out_dim);
  else
    gemm(false, true, N, out_dim, in, 1.0f, x, in, w, in, 0.0f, out, out_dim);
}

void activation_forward(Activation act, float* out, const float* inp, int64_t n) {
  if (act == Activation::Gelu) {
    kernels::gelu_forward(out, inp, n);
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
// out = act(inp) and slope = act'(inp).
void activation_with_slope(Activation act, float* out, float* slope, const float* inp, int64_t n) {
  if (act == Activation::Gelu) {
    kernels::gelu_with_slope(out, slope, inp, n);
    return;
  }
  activation_forward(act, out, inp, n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) slope[i] = inp[i] > 0.0f ? 1.0f : 0.0f;
}
}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  TFM_CHECK(x_in.dim() >= 1 && w_in.dim() == 2, "linear", "expected x (..., in) and w (out, in), got ",
            shape_str(x_in.shape()), " and ", shape_str(w_in.shape()));
  const int64_t in = w_in.size(1), out_dim = w_in.size(0);
  TFM_CHECK(x_in.size(-1) == in, "linear", "x ", shape_str(x_in.shape()), " has ", x_in.size(-1),
            " features, w ", shape_str(w_in.shape()), " expects ", in);
  if (bias.defined())
    TFM_CHECK(bias.dim() == 1 && bias.size(0) == out_dim, "linear", "bias ", shape_str(bias.shape()),
              " does not match w ", shape_str(w_in.shape()));
  const Tensor x = contiguous_values(x_in), w = contiguous_values(w_in);
  const int64_t N = x.numel() / in;
  Shape out_shape = x.shape();
  out_shape.back() = out_dim;
  Tensor out = Tensor::empty(out_shape);  // (N, out)
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  linear_rows(out.data(), x.data(), w.data(), bc.defined() ? bc.data() : nullptr, N, in, out_dim);
  // x is saved only when W needs a gradient, W only when x does.
  const GradRef rx = grad_ref(x_in), rw = grad_ref(w_in), rb = grad_ref(bias);
  record(out, "linear", {x_in, w_in, bias},
         [rx, rw, rb, x = rw ? x : Tensor(), w = rx ? w : Tensor(), N, in, out_dim](const Tensor& g) {
           const SameOperandsScope same;  // dy: rounded to bfloat16 once for both products
           if (rx) {                      // dx (N, in) (+)= dy (N, out) W (out, in)
             const GradTarget gx = grad_target(rx);
             gemm(false, false, N, in, out_dim, 1.0f, g.data(), out_dim, w.data(), in, gx.beta, gx.data, in);
           }
           if (rw)  // dW (out, in) += dy^T (out, N) x (N, in)
             gemm(true, false, out_dim, in, N, 1.0f, g.data(), out_dim, x.data(), in, 1.0f, grad_buffer(rw),
                  in);
           if (rb) kernels::bias_add_backward(grad_buffer(rb), g.data(), N, out_dim);
         });
  // Recomputable by one more GEMM: a layer may release an output that a backward saves (see
  // MultiHeadAttention: the queries).
  set_recompute(out, [x, w, bc, N, in, out_dim](float* dst) {
    linear_rows(dst, x.data(), w.data(), bc.defined() ? bc.data() : nullptr, N, in, out_dim);
  });
  return out;
}

Tensor feed_forward(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1, const Tensor& w2_in,
                    const Tensor& b2, Activation act, int64_t chunk_rows, const Tensor& w3_in,
                    const Tensor& b3) {
  const char* fn = "feed_forward";
  TFM_CHECK(x_in.dim() >= 1 && w1_in.dim() == 2 && w2_in.dim() == 2, fn, "expected x (..., C), w1 (F, C), ",
            "w2 (C, F), got ", shape_str(x_in.shape()), ", ", shape_str(w1_in.shape()), ", ",
            shape_str(w2_in.shape()));
  const int64_t C = w1_in.size(1), F = w1_in.size(0);
  TFM_CHECK(x_in.size(-1) == C && w2_in.size(0) == C && w2_in.size(1) == F, fn, "x ", shape_str(x_in.shape()),
            ", w1 ", shape_str(w1_in.shape()), " and w2 ", shape_str(w2_in.shape()),
            " do not chain as (..., C) -> (..., F) -> (..., C)");
  TFM_CHECK(!b1.defined() || b1.shape() == Shape{F}, fn, "b1 ", shape_str(b1.shape()), " must be [", F, "]");
  TFM_CHECK(!b2.defined() || b2.shape() == Shape{C}, fn, "b2 ", shape_str(b2.shape()), " must be [", C, "]");
  const bool gated = act == Activation::SwiGLU;
  TFM_CHECK(gated == w3_in.defined() && (!gated || w3_in.shape() == w1_in.shape()), fn,
            "SwiGLU takes w3 (the up projection) shaped as w1 ", shape_str(w1_in.shape()),
            ", the other activations none; got ", w3_in.defined() ? shape_str(w3_in.shape()) : "none");
  TFM_CHECK(!b3.defined() || (gated && b3.shape() == Shape{F}), fn, "b3 ", shape_str(b3.shape()),
            " must be [", F, "] with w3");
  TFM_CHECK(chunk_rows > 0, fn, "chunk_rows must be positive, got ", chunk_rows);
  const Tensor x = contiguous_values(x_in), w1 = contiguous_values(w1_in), w2 = contiguous_values(w2_in);
  const Tensor w3 = gated ? contiguous_values(w3_in) : Tensor();
  const Tensor b1c = b1.defined() ? contiguous_values(b1) : Tensor(),
               b2c = b2.defined() ? contiguous_values(b2) : Tensor();
  const Tensor b3c = b3.defined() ? contiguous_values(b3) : Tensor();
  const int64_t N = C ? x.numel() / C : 0;
  const int64_t chunk = std::min(chunk_rows, std::max<int64_t>(N, 1));
  Tensor h = Tensor::empty({N, F});  // (N, F): fc1's output, the one activation kept for the backward
  linear_rows(h.data(), x.data(), w1.data(), b1c.defined() ? b1c.data() : nullptr, N, C, F);
  Tensor u;  // (N, F): SwiGLU's up projection x W3^T + b3, kept for the backward too
  if (gated) {
    u = Tensor::empty({N, F});
    linear_rows(u.data(), x.data(), w3.data(), b3c.defined() ? b3c.data() : nullptr, N, C, F);
  }
  // act(h) (SwiGLU: silu(h) * u) of n elements into a.
  const auto activate = [act](float* a, const float* hc, const float* uc, int64_t n) {
    if (uc)
      kernels::swiglu_forward(a, hc, uc, n);
    else
      activation_forward(act, a, hc, n);
  };
  Tensor out = Tensor::empty(x.shape());  // (..., C)
  {
    Tensor a = Tensor::empty({chunk, F});  // (chunk, F): act(h) of one chunk of rows
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t rows = std::min(chunk, N - r0);
      activate(a.data(), h.data() + r0 * F, gated ? u.data() + r0 * F : nullptr, rows * F);
      linear_rows(out.data() + r0 * C, a.data(), w2.data(), b2c.defined() ? b2c.data() : nullptr, rows, F, C);
    }
  }
  const GradRef rx = grad_ref(x_in), rw1 = grad_ref(w1_in), rb1 = grad_ref(b1), rw2 = grad_ref(w2_in),
                rb2 = grad_ref(b2), rw3 = grad_ref(w3_in), rb3 = grad_ref(b3);
  record(out, "feed_forward", {x_in, w1_in, b1, w2_in, b2, w3_in, b3},
         [rx, rw1, rb1, rw2, rb2, rw3, rb3, x, w1, w2, w3, h, u, act, gated, activate, N, C, F,
          chunk](const Tensor& g) {
           const bool need_h = rx || rw1 || rb1 || rw3 || rb3;
           Tensor a = Tensor::empty({chunk, F});      // (chunk, F): act(h), then d act(h)
           Tensor slope = Tensor::empty({chunk, F});  // (chunk, F): act'(h), then dh (SwiGLU: d gate)
           Tensor du = gated ? Tensor::empty({chunk, F}) : Tensor();  // (chunk, F): SwiGLU's d up
           // Every row of dx is written once (row blocks): the first writer stores.
           const GradTarget gx = rx ? grad_target(rx) : GradTarget{nullptr, 1.0f};
           for (int64_t r0 = 0; r0 < N; r0 += chunk) {
             const int64_t rows = std::min(chunk, N - r0);
             const float* gc = g.data() + r0 * C;  // (rows, C)
             const float* hc = h.data() + r0 * F;  // (rows, F)
             const float* uc = gated ? u.data() + r0 * F : nullptr;
             // act(h) and act'(h) in one pass (GELU: one erf for both); SwiGLU's slopes come below.
             if (need_h && !gated)
               activation_with_slope(act, a.data(), slope.data(), hc, rows * F);
             else if (rw2)
               activate(a.data(), hc, uc, rows * F);
             {
               const SameOperandsScope same;  // g: rounded to bfloat16 once for dW2 and d act(h)
               if (rw2)                       // dW2 (C, F) += g^T act(h)
                 gemm(true, false, C, F, rows, 1.0f, gc, C, a.data(), F, 1.0f, grad_buffer(rw2), F);
               if (rb2) kernels::bias_add_backward(grad_buffer(rb2), gc, rows, C);
               if (!need_h) continue;
               // d act(h) (rows, F) = g W2;  dh = d act(h) * act'(h)
               gemm(false, false, rows, F, C, 1.0f, gc, C, w2.data(), F, 0.0f, a.data(), F);
             }
             float* dh = slope.data();
             const float* da = a.data();
             if (gated) {
               kernels::swiglu_backward(dh, du.data(), da, hc, uc, rows * F);
             } else {
#pragma omp simd
               for (int64_t i = 0; i < rows * F; ++i) dh[i] *= da[i];
             }
             const SameOperandsScope same_dh;  // dh: rounded to bfloat16 once for dW1 and dx
             if (rw1)                          // dW1 (F, C) += dh^T x
               gemm(true, false, F, C, rows, 1.0f, dh, F, x.data() + r0 * C, C, 1.0f, grad_buffer(rw1), C);
             if (rb1) kernels::bias_add_backward(grad_buffer(rb1), dh, rows, F);
             if (rx)  // dx (rows, C) (+)= dh W1
               gemm(false, false, rows, C, F, 1.0f, dh, F, w1.data(), C, gx.beta, gx.data + r0 * C, C);
             if (!gated) continue;
             const SameOperandsScope same_du;  // du: rounded once for dW3 and dx
             if (rw3)                          // dW3 (F, C) += du^T x
               gemm(true, false, F, C, rows, 1.0f, du.data(), F, x.data() + r0 * C, C, 1.0f, grad_buffer(rw3),
                    C);
             if (rb3) kernels::bias_add_backward(grad_buffer(rb3), du.data(), rows, F);
             if (rx)  // dx (rows, C) += du W3
               gemm(false, false, rows, C, F, 1.0f, du.data(), F, w3.data(), C, 1.0f, gx.data + r0 * C, C);
           }
         });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reductions. The input is viewed as (outer, n, inner) around the reduced axis.

namespace {
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};
AxisSplit split_axis(const char* op, const Shape& shape, int64_t& axis, bool keepdim) {
  axis = normalize_axis(op, axis, shape);
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    if (d > axis) s.inner *= shape[d];
    if (d != axis || keepdim) s.out_shape.push_back(d == axis ? 1 : shape[d]);
  }
  s.n = shape[axis];
  return s;
}
}  // namespace

Tensor sum(const Tensor& x_in) {
  const Tensor x = contiguous_values(x_in);
  double total = 0.0;
  const float* p = x.data();
  for (int64_t i = 0; i < x.numel(); ++i) total += p[i];
  Tensor out = Tensor::full({}, static_cast<float>(total));
  record(out, "sum", {x_in}, [rx = grad_ref(x_in), n = x_in.numel()](const Tensor& g) {
    float* gx = grad_buffer(rx);
    const float gv = g.data()[0];
    for (int64_t i = 0; i < n; ++i) gx[i] += gv;
  });
  return out;
}

Tensor mean(const Tensor& x) {
  TFM_CHECK(x.numel() > 0, "mean", "mean of an empty tensor of shape ", shape_str(x.shape()));
  return mul(sum(x), 1.0f / static_cast<float>(x.numel()));
}

Tensor sum(const Tensor& x_in, int64_t axis, bool keepdim) {
  const AxisSplit s = split_axis("sum", x_in.shape(), axis, keepdim);
  const Tensor x = contiguous_values(x_in);
  Tensor out = Tensor::zeros(s.out_shape);
  const float* px = x.data();
  float* po = out.data();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < s.n; ++j)
      for (int64_t i = 0; i < s.inner; ++i) po[o * s.inner + i] += px[(o * s.n + j) * s.inner + i];
  record(out, "sum_axis", {x_in}, [rx = grad_ref(x_in), s](const Tensor& g) {
    float* gx = grad_buffer(rx);
    const float* pg = g.data();
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < s.inner; ++i) gx[(o * s.n + j) * s.inner + i] += pg[o * s.inner + i];
  });
  return out;
}

Tensor mean(const Tensor& x, int64_t axis, bool keepdim) {
  const int64_t n = x.size(normalize_axis("mean", axis, x.shape()));
  TFM_CHECK(n > 0, "mean", "mean over an empty axis of shape ", shape_str(x.shape()));
  return mul(sum(x, axis, keepdim), 1.0f / static_cast<float>(n));
}

Tensor max(const Tensor& x_in, int64_t axis, bool keepdim) {
  const AxisSplit s = split_axis("max", x_in.shape(), axis, keepdim);
  TFM_CHECK(s.n > 0, "max", "max over an empty axis of shape ", shape_str(x_in.shape()));
  const Tensor x = contiguous_values(x_in);
  Tensor out = Tensor::empty(s.out_shape);
  auto argmax = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(s.outer * s.inner));
  const float* px = x.data();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < s.n; ++j)
        if (px[(o * s.n + j) * s.inner + i] > px[(o * s.n + best) * s.inner + i]) best = j;
      (*argmax)[o * s.inner + i] = best;
      out.data()[o * s.inner + i] = px[(o * s.n + best) * s.inner + i];
    }
  record(out, "max_axis", {x_in}, [rx = grad_ref(x_in), s, argmax](const Tensor& g) {
    float* gx = grad_buffer(rx);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i)
        gx[(o * s.n + (*argmax)[o * s.inner + i]) * s.inner + i] += g.data()[o * s.inner + i];
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Softmax, losses, normalisation

Tensor softmax(const Tensor& x_in) {
  TFM_CHECK(x_in.dim() >= 1, "softmax", "needs at least 1 dim, got a scalar");
  const Tensor x = contiguous_values(x_in);
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  Tensor out = Tensor::empty(x.shape());
  kernels::softmax_forward(out.data(), x.data(), N, C);
  const Tensor y = out.detach();
  record(out, "softmax", {x_in}, [rx = grad_ref(x_in), y, N, C](const Tensor& g) {
    kernels::softmax_backward(grad_buffer(rx), g.data(), y.data(), N, C);
  });
  return out;
}

Tensor log_softmax(const Tensor& x_in) {
  TFM_CHECK(x_in.dim() >= 1, "log_softmax", "needs at least 1 dim, got a scalar");
  const Tensor x = contiguous_values(x_in);
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  Tensor out = Tensor::empty(x.shape());
  kernels::log_softmax_forward(out.data(), x.data(), N, C);
  const Tensor y = out.detach();
  record(out, "log_softmax", {x_in}, [rx = grad_ref(x_in), y, N, C](const Tensor& g) {
    kernels::log_softmax_backward(grad_buffer(rx), g.data(), y.data(), N, C);
  });
  return out;
}

Tensor cross_entropy(const Tensor& logits_in, const std::vector<int32_t>& targets, int32_t ignore_index) {
  TFM_CHECK(logits_in.dim() >= 1, "cross_entropy", "logits need at least 1 dim");
  const int64_t V = logits_in.size(-1), N = V ? logits_in.numel() / V : 0;
  TFM_CHECK(static_cast<int64_t>(targets.size()) == N, "cross_entropy", "logits ",
            shape_str(logits_in.shape()), " have ", N, " rows but ", targets.size(), " targets were given");
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets[i];
    if (t == ignore_index) continue;
    TFM_CHECK(t >= 0 && t < V, "cross_entropy", "target ", t, " at row ", i, " is outside [0, ", V, ")");
    ++count;
  }
  const Tensor logits = contiguous_values(logits_in);
  Tensor lse = Tensor::empty({N});
  const double total =
      kernels::cross_entropy_forward(lse.data(), logits.data(), targets.data(), N, V, ignore_index);
  Tensor out = Tensor::full({}, count ? static_cast<float>(total / count) : 0.0f);
  record(out, "cross_entropy", {logits_in},
         [rl = grad_ref(logits_in), logits, lse, targets, N, V, ignore_index, count](const Tensor& g) {
           if (!count || !rl) return;
           const GradTarget gl = grad_target(rl);
           kernels::cross_entropy_backward(gl.data, logits.data(), lse.data(), targets.data(), N, V,
                                           ignore_index, g.data()[0] / static_cast<float>(count),
                                           gl.overwrite());
         });
  return out;
}

Tensor layer_norm(const Tensor& x_in, const Tensor& w, const Tensor& b, float eps) {
  TFM_CHECK(x_in.dim() >= 1, "layer_norm", "needs at least 1 dim");
  const int64_t C = x_in.size(-1), N = C ? x_in.numel() / C : 0;
  TFM_CHECK(w.shape() == Shape{C} && b.shape() == Shape{C}, "layer_norm", "weight ", shape_str(w.shape()),
            " and bias ", shape_str(b.shape()), " must be [", C, "] for input ", shape_str(x_in.shape()));
  const Tensor x = contiguous_values(x_in), wc = contiguous_values(w), bc = contiguous_values(b);
  Tensor out = Tensor::empty(x.shape());
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), wc.data(), bc.data(), N, C, eps);
  record(out, "layer_norm", {x_in, w, b},
         [rx = grad_ref(x_in), rw = grad_ref(w), rb = grad_ref(b), x, wc, mean, rstd, N, C](const Tensor& g) {
           const GradTarget gx = rx ? grad_target(rx) : GradTarget{nullptr, 1.0f};
           kernels::layernorm_backward(gx.data, rw ? grad_buffer(rw) : nullptr,
                                       rb ? grad_buffer(rb) : nullptr, g.data(), x.data(), wc.data(),
                                       mean.data(), rstd.data(), N, C, gx.overwrite());
         });
  // The output is cheap to recompute from what the backward keeps anyway (x, mean, rstd), so layers
  // may release it once its consumers have saved it (Tensor::release_values).
  set_recompute(out, [x, wc, bc, mean, rstd, N, C](float* dst) {
    kernels::layernorm_apply(dst, x.data(), wc.data(), bc.data(), mean.data(), rstd.data(), N, C);
  });
  return out;
}

Tensor rms_norm(const Tensor& x_in, const Tensor& w, float eps) {
  TFM_CHECK(x_in.dim() >= 1, "rms_norm", "needs at least 1 dim");
  const int64_t C = x_in.size(-1), N = C ? x_in.numel() / C : 0;
  TFM_CHECK(w.shape() == Shape{C}, "rms_norm", "weight ", shape_str(w.shape()), " must be [", C,
            "] for input ", shape_str(x_in.shape()));
  const Tensor x = contiguous_values(x_in), wc = contiguous_values(w);
  Tensor out = Tensor::empty(x.shape());
  Tensor rstd = Tensor::empty({N});
  kernels::rmsnorm_forward(out.data(), rstd.data(), x.data(), wc.data(), N, C, eps);
  record(out, "rms_norm", {x_in, w},
         [rx = grad_ref(x_in), rw = grad_ref(w), x, wc, rstd, N, C](const Tensor& g) {
           const GradTarget gx = rx ? grad_target(rx) : GradTarget{nullptr, 1.0f};
           kernels::rmsnorm_backward(gx.data, rw ? grad_buffer(rw) : nullptr, g.data(), x.data(), wc.data(),
                                     rstd.data(), N, C, gx.overwrite());
         });
  // As LayerNorm's: recomputable from what the backward keeps (x, rstd).
  set_recompute(out, [x, wc, rstd, N, C](float* dst) {
    kernels::rmsnorm_apply(dst, x.data(), wc.data(), rstd.data(), N, C);
  });
  return out;
}

std::pair<Tensor, Tensor> rope_table(int64_t max_len, int64_t D, double theta) {
  TFM_CHECK(D > 0 && D % 2 == 0, "rope_table", "the rotated width must be even, got ", D);
  const int64_t half = D / 2;
  Tensor cos = Tensor::empty({max_len, half}), sin = Tensor::empty({max_len, half});  // (max_len, D/2)
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    for (int64_t p = 0; p < max_len; ++p) {
      const double angle = static_cast<double>(p) * freq;
      cos.data()[p * half + i] = static_cast<float>(std::cos(angle));
      sin.data()[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return {cos, sin};
}

namespace {
// out (B, T, heads * D) = x rotated by +angle (sign 1) or -angle (sign -1, the backward: a rotation's
// transpose is the opposite rotation), pairs (2i, 2i + 1) of each head at positions start + t.
void rope_rotate(float* out, const float* x, const float* cos, const float* sin, int64_t B, int64_t T,
                 int64_t heads, int64_t D, int64_t start, float sign, bool accumulate) {
  const int64_t half = D / 2;
#pragma omp parallel for collapse(2) if (B * T * heads * D > (1 << 15))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* c = cos + (start + t) * half;
      const float* s = sin + (start + t) * half;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = ((b * T + t) * heads + h) * D;
        const float* xi = x + row;
        float* yi = out + row;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = xi[2 * i], x1 = xi[2 * i + 1], si = sign * s[i];
          const float y0 = x0 * c[i] - x1 * si, y1 = x0 * si + x1 * c[i];
          yi[2 * i] = accumulate ? yi[2 * i] + y0 : y0;
          yi[2 * i + 1] = accumulate ? yi[2 * i + 1] + y1 : y1;
        }
      }
    }
}
}  // namespace

Tensor rope(const Tensor& x_in, int64_t heads, const Tensor& cos, const Tensor& sin, int64_t start) {
  TFM_CHECK(x_in.dim() == 3 && heads > 0 && x_in.size(2) % heads == 0, "rope",
            "expected x (B, T, heads * D) with ", heads, " heads, got ", shape_str(x_in.shape()));
  const int64_t B = x_in.size(0), T = x_in.size(1), D = x_in.size(2) / heads;
  TFM_CHECK(cos.dim() == 2 && cos.size(1) * 2 == D && sin.shape() == cos.shape(), "rope", "tables ",
            shape_str(cos.shape()), " and ", shape_str(sin.shape()), " do not fit a head width of ", D);
  TFM_CHECK(start >= 0 && start + T <= cos.size(0), "rope", "positions [", start, ", ", start + T,
            ") exceed the table's ", cos.size(0));
  const Tensor x = contiguous_values(x_in);
  Tensor out = Tensor::empty(x.shape());
  rope_rotate(out.data(), x.data(), cos.data(), sin.data(), B, T, heads, D, start, 1.0f, false);
  record(out, "rope", {x_in}, [rx = grad_ref(x_in), cos, sin, B, T, heads, D, start](const Tensor& g) {
    if (!rx) return;
    const GradTarget gx = grad_target(rx);
    rope_rotate(gx.data, g.data(), cos.data(), sin.data(), B, T, heads, D, start, -1.0f, !gx.overwrite());
  });
  // Recomputable from its input: a layer may release the rotated queries (MultiHeadAttention).
  set_recompute(out, [x, cos, sin, B, T, heads, D, start](float* dst) {
    rope_rotate(dst, x.data(), cos.data(), sin.data(), B, T, heads, D, start, 1.0f, false);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Indexing and masking

Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& ids_shape) {
  TFM_CHECK(weight.dim() == 2, "embedding", "weight must be (V, C), got ", shape_str(weight.shape()));
  TFM_CHECK(static_cast<int64_t>(ids.size()) == shape_numel(ids_shape), "embedding", ids.size(),
            " ids for ids shape ", shape_str(ids_shape));
  const int64_t V = weight.size(0), C = weight.size(1);
  for (size_t i = 0; i < ids.size(); ++i)
    TFM_CHECK(ids[i] >= 0 && ids[i] < V, "embedding", "id ", ids[i], " at position ", i, " is outside [0, ",
              V, ") for weight ", shape_str(weight.shape()));
  const Tensor w = contiguous_values(weight);
  Shape out_shape = ids_shape;
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape);
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(out.data() + i * C, w.data() + static_cast<int64_t>(ids[i]) * C, sizeof(float) * C);
  record(out, "embedding", {weight}, [rw = grad_ref(weight), ids, C](const Tensor& g) {
    float* gw = grad_buffer(rw);
    const float* pg = g.data();
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = gw + static_cast<int64_t>(ids[i]) * C;
      const float* gi = pg + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) row[c] += gi[c];
    }
  });
  return out;
}

Tensor dropout(const Tensor& x, float p, bool training, Rng& rng) {
  TFM_CHECK(p >= 0.0f && p < 1.0f, "dropout", "probability ", p, " is outside [0, 1)");
  if (!training || p == 0.0f) return x;
  // One draw from `rng` seeds the whole mask (kernels::dropout): the mask is not stored, the
  // backward replays it from the seed.
  const uint64_t seed = rng.next_u64();
  const Tensor xc = contiguous_values(x);
  Tensor out = Tensor::empty(x.shape());
  kernels::dropout(out.data(), xc.data(), out.numel(), p, seed, false);
  record(out, "dropout", {x}, [rx = grad_ref(x), seed, p](const Tensor& g) {
    const GradTarget gx = grad_target(rx);
    kernels::dropout(gx.data, g.data(), g.numel(), p, seed, !gx.overwrite());
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, float value) {
  const Shape out_shape = broadcast_shape("masked_fill", x.shape(), mask.shape());
  TFM_CHECK(out_shape == x.shape(), "masked_fill", "mask ", shape_str(mask.shape()),
            " must broadcast to the input's shape ", shape_str(x.shape()));
  Tensor out = Tensor::empty(out_shape);
  const Shape so = out.strides();
  const Shape sx = x.strides();
  const Shape sm = strided::broadcast_strides(mask.shape(), mask.strides(), out_shape);
  strided::for_each<3>(out_shape, {so.data(), sx.data(), sm.data()}, {out.data(), x.data(), mask.data()},
                       [value](float** p) { *p[0] = *p[2] != 0.0f ? value : *p[1]; });
  record(out, "masked_fill", {x}, [rx = grad_ref(x), mask, out_shape](const Tensor& g) {
    const Shape sg = contiguous_strides(out_shape);
    const Shape sm = strided::broadcast_strides(mask.shape(), mask.strides(), out_shape);
    strided::for_each<3>(out_shape, {sg.data(), sg.data(), sm.data()},
                         {grad_buffer(rx), g.data(), mask.data()}, [](float** p) {
                           if (*p[2] == 0.0f) *p[0] += *p[1];
                         });
  });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape out_shape =
      broadcast_shape("where", broadcast_shape("where", cond.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(out_shape);
  const Shape so = out.strides();
  const Shape sc = strided::broadcast_strides(cond.shape(), cond.strides(), out_shape);
  const Shape sa = strided::broadcast_strides(a.shape(), a.strides(), out_shape);
  const Shape sb = strided::broadcast_strides(b.shape(), b.strides(), out_shape);
  strided::for_each<4>(out_shape, {so.data(), sc.data(), sa.data(), sb.data()},
                       {out.data(), cond.data(), a.data(), b.data()},
                       [](float** p) { *p[0] = *p[1] != 0.0f ? *p[2] : *p[3]; });
  record(out, "where", {a, b}, [cond, ra = grad_ref(a), rb = grad_ref(b), out_shape](const Tensor& g) {
    const Shape sg = contiguous_strides(out_shape);
    const Shape sc = strided::broadcast_strides(cond.shape(), cond.strides(), out_shape);
    for (int which = 0; which < 2; ++which) {
      const GradRef& r = which == 0 ? ra : rb;
      if (!r) continue;
      const Shape st = strided::broadcast_strides(r->shape, contiguous_strides(r->shape), out_shape);
      const bool want = which == 0;
      strided::for_each<3>(out_shape, {st.data(), sg.data(), sc.data()},
                           {grad_buffer(r), g.data(), cond.data()}, [want](float** p) {
                             if ((*p[2] != 0.0f) == want) *p[0] += *p[1];
                           });
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Shape ops. Views share storage; their backward adds the view's gradient into the matching
// positions of the base's gradient.

namespace {
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  return Tensor(std::move(impl));
}

Shape infer_shape(const char* op, const Shape& from, Shape to) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      TFM_CHECK(infer < 0, op, "only one -1 is allowed in ", shape_str(to));
      infer = static_cast<int64_t>(i);
    } else {
      TFM_CHECK(to[i] >= 0, op, "invalid size in ", shape_str(to));
      known *= to[i];
    }
  }
  const int64_t n = shape_numel(from);
  if (infer >= 0) {
    TFM_CHECK(known > 0 && n % known == 0, op, "cannot reshape ", shape_str(from), " into ", shape_str(to));
    to[infer] = n / known;
  }
  TFM_CHECK(shape_numel(to) == n, op, "cannot reshape ", shape_str(from), " (", n, " elements) into ",
            shape_str(to), " (", shape_numel(to), " elements)");
  return to;
}
}  // namespace

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = x.clone();
  record(out, "contiguous", {x}, [rx = grad_ref(x)](const Tensor& g) { accumulate_flat(rx, g); });
  return out;
}

Tensor view(const Tensor& x, Shape shape) {
  shape = infer_shape("view", x.shape(), std::move(shape));
  TFM_CHECK(x.is_contiguous(), "view", "input of shape ", shape_str(x.shape()),
            " is not contiguous; use reshape (which copies) or contiguous() first");
  Tensor out = make_view(x, shape, contiguous_strides(shape), x.offset());
  record(out, "view", {x}, [rx = grad_ref(x)](const Tensor& g) { accumulate_flat(rx, g); });
  return out;
}

Tensor reshape(const Tensor& x, Shape shape) {
  shape = infer_shape("reshape", x.shape(), std::move(shape));
  return view(contiguous(x), shape);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t rank = x.dim();
  TFM_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute", dims.size(), " dims given for shape ",
            shape_str(x.shape()));
  std::vector<int64_t> perm(dims.size());
  std::vector<bool> used(rank, false);
  for (int64_t i = 0; i < rank; ++i) {
    perm[i] = normalize_axis("permute", dims[i], x.shape());
    TFM_CHECK(!used[perm[i]], "permute", "dimension ", perm[i], " repeated for shape ", shape_str(x.shape()));
    used[perm[i]] = true;
  }
  Shape shape(rank), strides(rank);
  for (int64_t i = 0; i < rank; ++i) {
    shape[i] = x.shape()[perm[i]];
    strides[i] = x.strides()[perm[i]];
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  record(out, "permute", {x}, [rx = grad_ref(x), perm, shape](const Tensor& g) {
    // The base's gradient seen through the same permutation, plus g.
    const Shape base = contiguous_strides(rx->shape);
    Shape st(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) st[i] = base[perm[i]];
    const Shape sg = contiguous_strides(shape);
    strided::for_each<2>(shape, {st.data(), sg.data()}, {grad_buffer(rx), g.data()},
                         [](float** p) { *p[0] += *p[1]; });
  });
  return out;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int64_t rank = x.dim();
  d0 = normalize_axis("transpose", d0, x.shape());
  d1 = normalize_axis("transpose", d1, x.shape());
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(x, perm);
}

Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  axis = normalize_axis("narrow", axis, x.shape());
  TFM_CHECK(start >= 0 && length >= 0 && start + length <= x.size(axis), "narrow", "range [", start, ", ",
            start + length, ") out of bounds for dim ", axis, " of shape ", shape_str(x.shape()));
  Shape shape = x.shape();
  shape[axis] = length;
  Tensor out = make_view(x, shape, x.strides(), x.offset() + start * x.strides()[axis]);
  record(out, "narrow", {x}, [rx = grad_ref(x), axis, start, shape](const Tensor& g) {
    const Shape st = contiguous_strides(rx->shape);
    const Shape sg = contiguous_strides(shape);
    strided::for_each<2>(shape, {st.data(), sg.data()}, {grad_buffer(rx) + start * st[axis], g.data()},
                         [](float** p) { *p[0] += *p[1]; });
  });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  axis = normalize_axis("split", axis, x.shape());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  TFM_CHECK(total == x.size(axis), "split", "sizes add up to ", total, " but dim ", axis, " of ",
            shape_str(x.shape()), " has ", x.size(axis));
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(narrow(x, axis, start, s));
    start += s;
  }
  return parts;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  TFM_CHECK(!xs.empty(), "concat", "no tensors given");
  axis = normalize_axis("concat", axis, xs[0].shape());
  Shape shape = xs[0].shape();
  shape[axis] = 0;
  for (const Tensor& t : xs) {
    Shape a = t.shape(), b = xs[0].shape();
    TFM_CHECK(a.size() == b.size(), "concat", "ranks differ: ", shape_str(a), " and ", shape_str(b));
    a[axis] = b[axis] = 0;
    TFM_CHECK(a == b, "concat", "shapes ", shape_str(t.shape()), " and ", shape_str(xs[0].shape()),
              " differ outside dim ", axis);
    shape[axis] += t.size(axis);
  }
  Tensor out = Tensor::empty(shape);
  int64_t start = 0;
  for (const Tensor& t : xs) {
    Tensor dst = make_view(out, t.shape(), out.strides(), start * out.strides()[axis]);
    dst.copy_from(t);
    start += t.size(axis);
  }
  std::vector<std::pair<GradRef, Shape>> parts;  // each input's slot (null: no gradient) and shape
  for (const Tensor& t : xs) parts.emplace_back(grad_ref(t), t.shape());
  record(out, "concat", xs, [parts, axis, shape](const Tensor& g) {
    const Shape sg = contiguous_strides(shape);
    int64_t start = 0;
    for (const auto& [r, shape_t] : parts) {
      if (r) {
        const Shape st = contiguous_strides(shape_t);
        strided::for_each<2>(shape_t, {st.data(), sg.data()}, {grad_buffer(r), g.data() + start * sg[axis]},
                             [](float** p) { *p[0] += *p[1]; });
      }
      start += shape_t[axis];
    }
  });
  return out;
}

}  // namespace tfm
