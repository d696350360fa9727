// Differentiable ops. Each op in ops.cpp computes its result and records, beside it, the closure
// that adds its inputs' gradients. Inputs may be non-contiguous views; results are contiguous
// unless the op is a view (reshape/view, transpose, permute, narrow, split).
//
// Errors throw tfm::Error with a message starting with the op's name and stating the shapes.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "tfm/engine/enum_names.h"
#include "tfm/engine/tensor.h"

namespace tfm {

// ---- elementwise, NumPy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// scalar variants
Tensor add(const Tensor& a, float s);
Tensor sub(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor div(const Tensor& a, float s);
Tensor rsub(float s, const Tensor& a);  // s - a
Tensor rdiv(float s, const Tensor& a);  // s / a

// ---- elementwise, unary ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, float p);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact: x * Phi(x)

// ---- matrix products (all through gemm()) ----
// a (..., M, K), b (..., K, N) -> (..., M, N); with trans_a a is (..., K, M), with trans_b b is
// (..., N, K). Leading batch dims must match, or one side may be 2-D and shared by every batch.
// Transposed views are passed to BLAS as transposed operands, without a copy.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x (..., in) times w (out, in) transposed, plus bias (out) when defined: nn.Linear's layout.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);

// The transformer's feed-forward sublayer as one op: linear(act(linear(x, w1, b1)), w2, b2) with
// x (..., C), w1 (F, C), b1 (F), w2 (C, F), b2 (C) -> (..., C); biases may be undefined. Its
// backward keeps x and fc1's output h (N, F) only: act(h) and its gradient are recomputed in
// chunks of `chunk_rows` rows, so neither (N, F) tensor exists whole, in the forward or backward.
// SwiGLU is the gated form (Shazeer 2020, "GLU Variants Improve Transformer"): linear(silu(linear(x,
// w1, b1)) * linear(x, w3, b3), w2, b2), w1 the gate and w3 the "up" projection, both (F, C); its
// backward keeps both (N, F) products.
// act: GELU (exact erf form), ReLU, or SwiGLU's gate; the model.activation option (nn/model_config.h).
enum class Activation { Gelu, Relu, SwiGLU };
template <>
const std::vector<std::string>& enum_names<Activation>();  // "gelu", "relu", "swiglu"
constexpr int64_t kFeedForwardChunkRows = 1024;
Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    Activation act, int64_t chunk_rows = kFeedForwardChunkRows, const Tensor& w3 = {},
                    const Tensor& b3 = {});

// ---- reductions ----
Tensor sum(const Tensor& x);  // all elements -> 0-dim
Tensor mean(const Tensor& x);
Tensor sum(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor max(const Tensor& x, int64_t axis, bool keepdim = false);  // gradient goes to the first max

// ---- normalisation and losses (fused) ----
Tensor softmax(const Tensor& x);      // over the last dim
Tensor log_softmax(const Tensor& x);  // over the last dim
// Mean cross-entropy of logits (..., V) against one target per row; rows whose target equals
// ignore_index count neither in the sum nor in the mean (0 when every row is ignored).
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets, int32_t ignore_index = -100);
// LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * w + b, biased variance as in PyTorch.
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps = 1e-5f);
// RMSNorm over the last dim (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * w.
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps = 1e-5f);
// Rotary position embedding (Su et al. 2021, RoFormer) of x (B, T, heads * D) at positions
// [start, start + T): in every head, the adjacent pair of dims (2i, 2i + 1) of position p turns by the
// angle p * theta^(-2i/D). cos and sin (max_len, D/2) hold the angles' cosines and sines (rope_table).
Tensor rope(const Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin, int64_t start);
// cos and sin (max_len, D/2) of the angles p * theta^(-2i/D), computed in double.
std::pair<Tensor, Tensor> rope_table(int64_t max_len, int64_t D, double theta);

// ---- indexing and masking ----
// weight (V, C), ids of ids_shape -> (ids_shape..., C). Backward scatter-adds into weight's gradient.
Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& ids_shape);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity unless training.
Tensor dropout(const Tensor& x, float p, bool training, Rng& rng);
// Masks are float tensors broadcastable to x: an entry != 0 is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- shape ----
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);  // views
Tensor reshape(const Tensor& x, Shape shape);  // a view when strides allow, else a copy; one -1 allowed
Tensor view(const Tensor& x, Shape shape);     // a view or an error
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length);
Tensor contiguous(const Tensor& x);

// Operators for readable composed math.
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, float s) {
  return add(a, s);
}
inline Tensor operator-(const Tensor& a, float s) {
  return sub(a, s);
}
inline Tensor operator*(const Tensor& a, float s) {
  return mul(a, s);
}
inline Tensor operator/(const Tensor& a, float s) {
  return div(a, s);
}
inline Tensor operator*(float s, const Tensor& a) {
  return mul(a, s);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}

}  // namespace tfm
