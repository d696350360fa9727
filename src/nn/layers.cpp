// The basic layers.
// Legend: B batch, T time, C = d_model, F = d_ff, V vocabulary.
#include "tfm/nn/layers.h"

#include <cmath>

#include "tfm/engine/ops.h"

namespace tfm {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  register_parameter("weight", &weight, {out, in});
  if (has_bias) register_parameter("bias", &bias, {out});
}
Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight, bias);
}

Embedding::Embedding(int64_t num, int64_t dim) {
  register_parameter("weight", &weight, {num, dim});
}
Tensor Embedding::forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const {
  return embedding(weight, ids, ids_shape);
}

PositionTables::PositionTables(int64_t max_len, Build build) : max_len_(max_len), build_(std::move(build)) {}

std::vector<Tensor> PositionTables::up_to(int64_t end) const {
  TFM_CHECK(end >= 0 && end <= max_len_, "PositionTables", "positions up to ", end, " exceed max_seq_len ",
            max_len_);
  const std::lock_guard<std::mutex> lock(mutex_);
  if (end > rows_ || tables_.empty()) {
    // Doubling: sampling token by token to max_len builds O(max_len) rows in all.
    rows_ = std::min(max_len_, std::max(end, 2 * rows_));
    tables_ = build_(rows_);
  }
  return tables_;
}

int64_t PositionTables::rows() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return rows_;
}

Tensor sinusoidal_table(int64_t rows, int64_t dim) {
  Tensor table = Tensor::zeros({rows, dim});  // (rows, C)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < dim; j += 2) {
      const double angle = static_cast<double>(i) / std::pow(10000.0, static_cast<double>(j) / dim);
      table.data()[i * dim + j] = static_cast<float>(std::sin(angle));
      if (j + 1 < dim) table.data()[i * dim + j + 1] = static_cast<float>(std::cos(angle));
    }
  return table;
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t max_len, int64_t dim)
    : table_(max_len, [dim](int64_t rows) { return std::vector<Tensor>{sinusoidal_table(rows, dim)}; }) {}
Tensor SinusoidalPositionalEncoding::forward(int64_t start, int64_t T) const {
  return narrow(table_.up_to(start + T)[0], 0, start, T);
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_len, int64_t dim) {
  register_parameter("weight", &weight, {max_len, dim});
}
Tensor LearnedPositionalEmbedding::forward(int64_t start, int64_t T) const {
  return narrow(weight, 0, start, T);
}

Tensor embed_with_positions(const Module& owner, const Embedding& emb,
                            const SinusoidalPositionalEncoding* sinusoidal,
                            const LearnedPositionalEmbedding* learned, int64_t max_len,
                            const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t start, float p,
                            const char* where) {
  TFM_CHECK(B >= 0 && T >= 0 && start >= 0, where,
            "expected B >= 0, T >= 0 and a first position >= 0, got B = ", B, ", T = ", T, ", position ",
            start);
  TFM_CHECK(static_cast<int64_t>(ids.size()) == B * T, where, ids.size(), " tokens for B = ", B, ", T = ", T);
  TFM_CHECK(start + T <= max_len, where, "positions up to ", start + T, " exceed max_seq_len ", max_len);
  const Tensor x = emb.forward(ids, {B, T});  // (B, T, C)
  const float scale = std::sqrt(static_cast<float>(emb.weight.size(1)));
  // (B, T, C); RoPE: the embeddings alone (positions turn the queries and keys inside attention)
  const Tensor h = sinusoidal ? x * scale + sinusoidal->forward(start, T)
                   : learned  ? x + learned->forward(start, T)
                              : x;
  const bool drop = owner.training() && p > 0.0f;
  TFM_CHECK(!drop || owner.rng(), where, "dropout needs set_rng()");
  return drop ? dropout(h, p, true, *owner.rng()) : h;
}

Norm::Norm(int64_t dim, NormKind kind_, float eps_) : kind(kind_), eps(eps_) {
  register_parameter("weight", &weight, {dim});
  if (kind == NormKind::LayerNorm) register_parameter("bias", &bias, {dim});
  weight.fill_(1.0f);
}
Tensor Norm::forward(const Tensor& x) const {
  return kind == NormKind::LayerNorm ? layer_norm(x, weight, bias, eps) : rms_norm(x, weight, eps);
}

Tensor output_logits(const Tensor& x, const Norm* ln_f, const Linear* head, const Tensor& embedding) {
  const Tensor h = ln_f ? ln_f->forward(x) : x;                                 // (B, T, C)
  const Tensor out = head ? head->forward(h) : linear(h, embedding, Tensor());  // (B, T, V): h E^T when tied
  if (ln_f) h.release_values();  // recomputed in the head's backward from ln_f's saved input
  return out;
}

FeedForward::FeedForward(int64_t dim, int64_t hidden, Activation activation_, bool bias)
    : fc1(dim, hidden, bias), fc2(hidden, dim, bias), activation(activation_) {
  register_module("fc1", &fc1);
  register_module("fc2", &fc2);
  if (activation == Activation::SwiGLU) {
    fc3 = std::make_unique<Linear>(dim, hidden, bias);  // (F, C), after fc2 as in the reference's names
    register_module("fc3", fc3.get());
  }
}

Cost FeedForward::cost(int64_t dim, int64_t hidden, Activation activation, bool bias, double rows) {
  const bool gated = activation == Activation::SwiGLU;
  Cost c = linear_cost(dim, hidden, bias, rows);
  c += linear_cost(hidden, dim, bias, rows);
  if (gated) c += linear_cost(dim, hidden, bias, rows);  // fc3
  c.activations = (gated ? 2.0 : 1.0) * rows * static_cast<double>(hidden);
  return c;
}
Tensor FeedForward::forward(const Tensor& x) const {
  // One fused op: fc1 -> activation -> fc2, keeping only fc1's output (..., F) for the backward.
  return feed_forward(x, fc1.weight, fc1.bias, fc2.weight, fc2.bias, activation, kFeedForwardChunkRows,
                      fc3 ? fc3->weight : Tensor(), fc3 ? fc3->bias : Tensor());
}

}  // namespace tfm
