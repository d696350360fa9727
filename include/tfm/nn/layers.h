// The basic layers: linear, embeddings and positions, normalisation, feed-forward, the output head.
// Legend: B batch, T time (Tq queries, Tk keys), C = d_model, H heads, Hkv key/value heads,
// Dk = Dv = C / H per-head widths, F = d_ff, V vocabulary.
#pragma once
#include <cstdint>
#include <memory>
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

// P[i, 2j] = sin(i / 10000^(2j/C)), P[i, 2j+1] = cos(...), computed in double; not a parameter.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // rows [start, start + T): (T, C), a view
  Tensor table;                                    // (max_len, C)
};

// Learned absolute positions: a (max_len, C) table whose rows are added to the embeddings.
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim);
  Tensor forward(int64_t start, int64_t T) const;  // (T, C), differentiable
  Tensor weight;                                   // (max_len, C)
};

// The input of a Transformer stack (docs/architecture.md, the model's step 1) for positions [start, start + T):
// E[ids] * sqrt(C) + P[start:start+T] with the sinusoidal table, or E[ids] + W_pos[start:start+T]
// with learned positions (exactly one of `sinusoidal`, `learned` is given), then dropout p when
// `owner` is training (drawing from its rng). ids (B*T) -> (B, T, C). `where` names the caller in errors.
Tensor embed_with_positions(const Module& owner, const Embedding& emb, const SinusoidalPositionalEncoding* sinusoidal,
                            const LearnedPositionalEmbedding* learned, const std::vector<int32_t>& ids, int64_t B,
                            int64_t T, int64_t start, float p, const char* where);

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  // Gain and bias; it keeps each row's mean and 1/std (its output is recomputed in the backward).
  static Cost cost(int64_t dim, double rows) { return {2.0 * dim, 0.0, 2.0 * rows, 0.0}; }
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // (C), (C)
  float eps;
};

// A stack's output (docs/architecture.md, the model's step 5): h = ln_f(x) when ln_f is given, else x; logits = h E^T
// with the embedding E (V, C) when head is null (tied), else head(h). x (B, T, C) -> (B, T, V).
Tensor output_logits(const Tensor& x, const LayerNorm* ln_f, const Linear* head, const Tensor& embedding);

// FFN(x) = fc2(act(fc1(x))), act = exact GELU or ReLU.
class FeedForward : public Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, Activation activation, bool bias = true);
  // fc1 and fc2 over `rows` rows; the fused op keeps fc1's output (rows, F) for the backward.
  static Cost cost(int64_t dim, int64_t hidden, Activation activation, bool bias, double rows);
  Tensor forward(const Tensor& x) const;  // (..., C) -> (..., C)
  Linear fc1, fc2;
  Activation activation;
};

}  // namespace tfm
