// The basic layers: linear, embeddings and positions, normalisation, feed-forward, the output head.
// Legend: B batch, T time (Tq queries, Tk keys), C = d_model, H heads, Hkv key/value heads,
// Dk = Dv = C / H per-head widths, F = d_ff, V vocabulary.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tfm/nn/model_config.h"
#include "tfm/nn/module.h"

namespace tfm {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor weight;                          // (out, in), as nn.Linear
  Tensor bias;                            // (out), undefined without bias
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  // ids of shape ids_shape -> (ids_shape..., dim)
  Tensor forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const;
  Tensor weight;  // (num, dim)
};

// Tables a layer computes per position rather than learns (row p: position p), the sinusoidal table and
// RoPE's cosines and sines: built on first use only as far as the positions used so far (training:
// train.seq_len), grown (at least doubled) when a later call reaches further, up to max_len
// (model.max_seq_len), so a context of 10^8 positions costs nothing until they are used. A row does not
// depend on how far the table reaches: a grown table holds the same rows, bit for bit.
class PositionTables {
 public:
  using Build = std::function<std::vector<Tensor>(int64_t rows)>;  // each table's first `rows` rows
  PositionTables(int64_t max_len, Build build);
  // The tables holding at least rows [0, end), end <= max_len; tensors handed out before stay valid.
  std::vector<Tensor> up_to(int64_t end) const;
  int64_t rows() const;  // built so far

 private:
  const int64_t max_len_;
  const Build build_;
  mutable std::mutex mutex_;  // a model may be read by several threads at once
  mutable std::vector<Tensor> tables_;
  mutable int64_t rows_ = 0;
};

// The first `rows` rows of the sinusoidal table: P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] =
// cos(...), computed in double. (rows, C)
Tensor sinusoidal_table(int64_t rows, int64_t dim);

// The sinusoidal table (max_len, C) as positions use it (PositionTables); not a parameter.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // rows [start, start + T): (T, C), a view
  int64_t rows_built() const { return table_.rows(); }

 private:
  PositionTables table_;
};

// Learned absolute positions: a (max_len, C) table whose rows are added to the embeddings.
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // (T, C), differentiable
  Tensor weight;                                   // (max_len, C)
};

// The input of a Transformer stack (docs/architecture.md, the model's step 1) for positions
// [start, start + T) of at most max_len: E[ids] * sqrt(C) + P[start:start+T] with the sinusoidal table,
// E[ids] + W_pos[start:start+T] with learned positions, E[ids] alone with neither (RoPE: positions enter
// inside attention), then dropout p when `owner` is training (drawing from its rng). ids (B*T) ->
// (B, T, C). `where` names the caller in errors.
Tensor embed_with_positions(const Module& owner, const Embedding& emb,
                            const SinusoidalPositionalEncoding* sinusoidal,
                            const LearnedPositionalEmbedding* learned, int64_t max_len,
                            const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t start, float p,
                            const char* where);

// Normalisation over the last dim, the kind model.norm names: LayerNorm (Ba et al. 2016)
// (x - mean) / sqrt(var + eps) * g + b, or RMSNorm (Zhang & Sennrich 2019) x / sqrt(mean(x^2) + eps) * g,
// which has no bias. Parameter names: weight (the gain, 1 at initialisation), bias (LayerNorm only).
class Norm : public Module {
 public:
  explicit Norm(int64_t dim, NormKind kind = NormKind::LayerNorm, float eps = 1e-5f);
  Norm(int64_t dim, const ModelConfig& c) : Norm(dim, c.norm, c.norm_eps) {}
  // Gain (and bias); it keeps each row's mean (LayerNorm) and 1/std: its output is recomputed in the
  // backward.
  static Cost cost(int64_t dim, NormKind kind, double rows) {
    const bool ln = kind == NormKind::LayerNorm;
    return {(ln ? 2.0 : 1.0) * static_cast<double>(dim), 0.0, (ln ? 2.0 : 1.0) * rows, 0.0};
  }
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // (C), (C) (undefined for RMSNorm)
  NormKind kind;
  float eps;
};

// A stack's output (docs/architecture.md, the model's step 5): h = ln_f(x) when ln_f is given, else x; logits
// = h E^T with the embedding E (V, C) when head is null (tied), else head(h). x (B, T, C) -> (B, T, V).
Tensor output_logits(const Tensor& x, const Norm* ln_f, const Linear* head, const Tensor& embedding);

// FFN(x) = fc2(act(fc1(x))), act = exact GELU or ReLU; SwiGLU (Shazeer 2020): fc2(silu(fc1(x)) *
// fc3(x)), fc1 the gate and fc3 the up projection, both (F, C). Names: fc1, fc2, fc3 (SwiGLU only).
class FeedForward : public Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, Activation activation, bool bias = true);
  // fc1, fc2 (and fc3) over `rows` rows; the fused op keeps fc1's output (rows, F) for the backward
  // (SwiGLU: fc3's too).
  static Cost cost(int64_t dim, int64_t hidden, Activation activation, bool bias, double rows);
  Tensor forward(const Tensor& x) const;  // (..., C) -> (..., C)
  Linear fc1, fc2;
  std::unique_ptr<Linear> fc3;  // SwiGLU only
  Activation activation;
};

}  // namespace tfm
