// llama.cpp's gpt2, llama and qwen3 graphs run from a GGUF file in double precision (see
// gguf_reference.h). Legend: C = d_model, H heads, Hkv kv heads, Dk = C / H, F = d_ff, L context,
// V vocabulary, T tokens.
#include "tfm/models/gguf_reference.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"

namespace tfm {
namespace {

struct Weights {
  const GgufFile& file;
  std::map<std::string, Tensor> cache;

  // The tensor `name` as float32, checked against the shape llama.cpp's loader asks for.
  const float* get(const std::string& name, const Shape& shape) {
    auto it = cache.find(name);
    if (it == cache.end()) {
      const GgufTensor& t = file.tensor(name);
      if (t.shape != shape)
        throw IoError(detail::concat(file.source, ": tensor \"", name, "\" has shape ", shape_str(t.shape),
                                     ", llama.cpp's ", file.at("general.architecture").str(), " expects ",
                                     shape_str(shape)));
      it = cache.emplace(name, gguf_tensor_values(t)).first;
    }
    return it->second.data();
  }
  // The same for a tensor llama.cpp loads when present (TENSOR_NOT_REQUIRED); nullptr without it.
  const float* optional(const std::string& name, const Shape& shape) {
    return file.find_tensor(name) ? get(name, shape) : nullptr;
  }
  int64_t key(const std::string& name) const {
    const GgufValue& v = file.at(name);
    if (v.type() != GgufType::UInt32)
      throw IoError(detail::concat(file.source, ": metadata \"", name, "\" is a ", gguf_type_name(v.type()),
                                   ", llama.cpp reads a uint32"));
    return static_cast<int64_t>(v.unsigned_value());
  }
  int64_t key_or(const std::string& name, int64_t fallback) const {
    return file.find(name) ? key(name) : fallback;
  }
};

// LayerNorm of one row, as ggml_norm then * weight + bias.
void layer_norm_row(const double* x, int64_t C, const float* w, const float* b, double eps, double* out) {
  double mean = 0, var = 0;
  for (int64_t c = 0; c < C; ++c) mean += x[c];
  mean /= static_cast<double>(C);
  for (int64_t c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
  const double inv = 1.0 / std::sqrt(var / static_cast<double>(C) + eps);
  for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - mean) * inv * w[c] + b[c];
}

// y (out) = W (out, in) x + b.
void affine(const float* W, const float* b, const double* x, int64_t in, int64_t out, double* y) {
  for (int64_t o = 0; o < out; ++o) {
    double s = b ? b[o] : 0.0;
    const float* w = W + o * in;
    for (int64_t i = 0; i < in; ++i) s += w[i] * x[i];
    y[o] = s;
  }
}

// RMSNorm of one row (Zhang & Sennrich 2019), as ggml_rms_norm then * weight.
void rms_norm_row(const double* x, int64_t C, const float* w, double eps, double* out) {
  double ms = 0;
  for (int64_t c = 0; c < C; ++c) ms += x[c] * x[c];
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
  for (int64_t c = 0; c < C; ++c) out[c] = x[c] * inv * w[c];
}

// RoPE (RoFormer, Su et al. 2021) of one head's Dk values at position p as ggml's rope computes it
// (ggml-cpu/ops.cpp: rotate_pairs): pair i turns by p * base^(-2i/Dk); LLAMA_ROPE_TYPE_NORM pairs dims
// (2i, 2i + 1), LLAMA_ROPE_TYPE_NEOX dims (i, i + Dk/2).
void rope_head(double* x, int64_t Dk, int64_t p, double base, bool neox) {
  const int64_t half = Dk / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle =
        static_cast<double>(p) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(Dk));
    double& x0 = x[neox ? i : 2 * i];
    double& x1 = x[neox ? i + half : 2 * i + 1];
    const double y0 = x0 * std::cos(angle) - x1 * std::sin(angle),
                 y1 = x0 * std::sin(angle) + x1 * std::cos(angle);
    x0 = y0;
    x1 = y1;
  }
}

// Causal attention per head from rows of qkv (T, C + 2 Ckv): q at [0, C), k at [C, C + Ckv), v after
// (build_qkv's views), query head h reading kv head h / (H / Hkv), scores scaled by 1/sqrt(Dk) -> att (T, C).
void causal_attention(const std::vector<double>& qkv, int64_t T, int64_t H, int64_t Hkv, int64_t Dk,
                      std::vector<double>& att) {
  const int64_t C = H * Dk, Ckv = Hkv * Dk, ld = C + 2 * Ckv, group = H / Hkv;
  std::vector<double> p(T);
  for (int64_t head = 0; head < H; ++head) {
    const int64_t kv = head / group;
    for (int64_t t = 0; t < T; ++t) {
      const double* q = &qkv[t * ld + head * Dk];
      double mx = -INFINITY, sum = 0;
      for (int64_t s = 0; s <= t; ++s) {
        const double* k = &qkv[s * ld + C + kv * Dk];
        double dot = 0;
        for (int64_t d = 0; d < Dk; ++d) dot += q[d] * k[d];
        p[s] = dot / std::sqrt(static_cast<double>(Dk));
        mx = std::max(mx, p[s]);
      }
      for (int64_t s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
      for (int64_t d = 0; d < Dk; ++d) {
        double o = 0;
        for (int64_t s = 0; s <= t; ++s) o += p[s] * qkv[s * ld + C + Ckv + kv * Dk + d];
        att[t * C + head * Dk + d] = o / sum;
      }
    }
  }
}

// The logits (T, V) of the final hidden states x (T, C), normalised row by row by `norm`, through
// output.weight or, without it, token_embd (llama.cpp's TENSOR_DUPLICATED fallback).
template <class Norm>
Tensor reference_head_logits(Weights& w, const std::vector<double>& x, int64_t T, int64_t C, int64_t V,
                             Norm&& norm) {
  const float* out =
      w.get(w.file.find_tensor("output.weight") ? "output.weight" : "token_embd.weight", {V, C});
  Tensor logits = Tensor::empty({T, V});
  std::vector<double> h(C), row(V);
  for (int64_t t = 0; t < T; ++t) {
    norm(&x[t * C], h.data());
    affine(out, nullptr, h.data(), C, V, row.data());
    for (int64_t v = 0; v < V; ++v) logits.data()[t * V + v] = static_cast<float>(row[v]);
  }
  return logits;
}

std::vector<double> softmax_rows(const std::vector<float>& logits, int64_t V) {
  std::vector<double> p(logits.begin(), logits.end());
  for (size_t r = 0; r < p.size(); r += static_cast<size_t>(V)) {
    const double mx = *std::max_element(p.begin() + static_cast<std::ptrdiff_t>(r),
                                        p.begin() + static_cast<std::ptrdiff_t>(r + V));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += (p[r + v] = std::exp(p[r + v] - mx));
    for (int64_t v = 0; v < V; ++v) p[r + v] /= sum;
  }
  return p;
}

}  // namespace

double gelu_of(GeluForm form, double x) {
  switch (form) {
    case GeluForm::Erf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case GeluForm::Tanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case GeluForm::LlamaCpp: {  // ggml-cpu/vec.h: ggml_vec_gelu_f32 under GGML_GELU_FP16
      const auto xf = static_cast<float>(x);
      if (xf <= -10.0f) return 0.0;
      if (xf >= 10.0f) return xf;
      const float h = from_f16(to_f16(xf));
      const float g =
          0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
      return from_f16(to_f16(g));
    }
  }
  return 0.0;
}

namespace {

// Head counts a graph can be built from (a file may say anything): C = H Dk, H = G Hkv.
void check_heads(const GgufFile& file, int64_t C, int64_t H, int64_t Hkv) {
  if (C < 1 || H < 1 || Hkv < 1 || C % H != 0 || H % Hkv != 0)
    throw IoError(
        detail::concat(file.source, ": embedding length ", C, ", ", H, " heads and ", Hkv,
                       " key/value heads: expected heads dividing the embedding and kv heads the heads"));
}

// Tokens in range and within the context of L.
void check_ids(const std::vector<int32_t>& ids, int64_t V, int64_t L) {
  const auto T = static_cast<int64_t>(ids.size());
  TFM_CHECK(T >= 1 && T <= L, "gguf_reference_logits", T, " tokens for a context of ", L);
  for (const int32_t id : ids)
    TFM_CHECK(id >= 0 && id < V, "gguf_reference_logits", "token id ", id, " outside [0, ", V, ")");
}

// llama.cpp src/models/gpt2.cpp.
Tensor gpt2_reference_logits(Weights& w, const std::vector<int32_t>& ids, GeluForm gelu) {
  const int64_t C = w.key("gpt2.embedding_length"), L = w.key("gpt2.context_length"),
                n_layers = w.key("gpt2.block_count"), H = w.key("gpt2.attention.head_count"),
                Hkv = w.key("gpt2.attention.head_count_kv"), F = w.key("gpt2.feed_forward_length");
  const double eps = w.file.at("gpt2.attention.layer_norm_epsilon").number();
  const auto V = static_cast<int64_t>(w.file.at("tokenizer.ggml.tokens").items().size());
  const auto T = static_cast<int64_t>(ids.size());
  check_ids(ids, V, L);
  check_heads(w.file, C, H, Hkv);
  const int64_t Dk = C / H, Ckv = Hkv * Dk;

  const float* tok = w.get("token_embd.weight", {V, C});
  const float* pos = w.get("position_embd.weight", {L, C});
  std::vector<double> x(T * C), h(T * C), qkv(T * (C + 2 * Ckv)), att(T * C), up(T * F), tmp(std::max(C, F));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < C; ++k) x[t * C + k] = static_cast<double>(tok[ids[t] * C + k]) + pos[t * C + k];
  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const float* ln1_w = w.get(g + "attn_norm.weight", {C});
    const float* ln1_b = w.get(g + "attn_norm.bias", {C});
    const float* wqkv = w.get(g + "attn_qkv.weight", {C + 2 * Ckv, C});
    const float* bqkv = w.get(g + "attn_qkv.bias", {C + 2 * Ckv});
    const float* wo = w.get(g + "attn_output.weight", {C, C});
    const float* bo = w.get(g + "attn_output.bias", {C});
    for (int64_t t = 0; t < T; ++t) {
      layer_norm_row(&x[t * C], C, ln1_w, ln1_b, eps, &h[t * C]);
      affine(wqkv, bqkv, &h[t * C], C, C + 2 * Ckv, &qkv[t * (C + 2 * Ckv)]);
    }
    causal_attention(qkv, T, H, Hkv, Dk, att);
    const float* ln2_w = w.get(g + "ffn_norm.weight", {C});
    const float* ln2_b = w.get(g + "ffn_norm.bias", {C});
    const float* wup = w.get(g + "ffn_up.weight", {F, C});
    const float* bup = w.get(g + "ffn_up.bias", {F});
    const float* wdown = w.get(g + "ffn_down.weight", {C, F});
    const float* bdown = w.get(g + "ffn_down.bias", {C});
    for (int64_t t = 0; t < T; ++t) {
      affine(wo, bo, &att[t * C], C, C, tmp.data());
      for (int64_t k = 0; k < C; ++k) x[t * C + k] += tmp[k];
      layer_norm_row(&x[t * C], C, ln2_w, ln2_b, eps, &h[t * C]);
      affine(wup, bup, &h[t * C], C, F, &up[t * F]);
      for (int64_t k = 0; k < F; ++k) up[t * F + k] = gelu_of(gelu, up[t * F + k]);
      affine(wdown, bdown, &up[t * F], F, C, tmp.data());
      for (int64_t k = 0; k < C; ++k) x[t * C + k] += tmp[k];
    }
  }
  const float* lnf_w = w.get("output_norm.weight", {C});
  const float* lnf_b = w.get("output_norm.bias", {C});
  return reference_head_logits(
      w, x, T, C, V, [&](const double* in, double* out) { layer_norm_row(in, C, lnf_w, lnf_b, eps, out); });
}

// llama.cpp src/models/llama.cpp and, with QK-norm and NEOX RoPE, src/models/qwen3.cpp.
Tensor llama_reference_logits(Weights& w, const std::vector<int32_t>& ids, bool qwen3) {
  const std::string a = qwen3 ? "qwen3" : "llama";
  const int64_t C = w.key(a + ".embedding_length"), L = w.key(a + ".context_length"),
                n_layers = w.key(a + ".block_count"), H = w.key(a + ".attention.head_count"),
                Hkv = w.key_or(a + ".attention.head_count_kv", H), F = w.key(a + ".feed_forward_length");
  check_heads(w.file, C, H, Hkv);
  const int64_t Dk = C / H, Ckv = Hkv * Dk, ld = C + 2 * Ckv;
  // llama.cpp's defaults for the optional keys; it asserts n_rot == head width (llama.cpp, qwen3.cpp).
  for (const char* k : {".attention.key_length", ".attention.value_length", ".rope.dimension_count"})
    if (w.key_or(a + k, Dk) != Dk)
      throw IoError(detail::concat(w.file.source, ": ", a, k, " is ", w.key(a + k),
                                   ", tfm's reading of llama.cpp's ", a, " takes the head width ", Dk));
  const double eps = w.file.at(a + ".attention.layer_norm_rms_epsilon").number();
  const double base =
      w.file.find(a + ".rope.freq_base") ? w.file.at(a + ".rope.freq_base").number() : 10000.0;
  const auto V = static_cast<int64_t>(w.file.at("tokenizer.ggml.tokens").items().size());
  const auto T = static_cast<int64_t>(ids.size());
  check_ids(ids, V, L);

  const float* tok = w.get("token_embd.weight", {V, C});
  std::vector<double> x(T * C), h(T * C), qkv(T * ld), att(T * C), gate(F), up(F), tmp(std::max(C, F)),
      head(Dk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < C; ++k) x[t * C + k] = tok[ids[t] * C + k];
  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const float* attn_norm = w.get(g + "attn_norm.weight", {C});
    const float* wq = w.get(g + "attn_q.weight", {C, C});
    const float* wk = w.get(g + "attn_k.weight", {Ckv, C});
    const float* wv = w.get(g + "attn_v.weight", {Ckv, C});
    const float* bq = w.optional(g + "attn_q.bias", {C});
    const float* bk = w.optional(g + "attn_k.bias", {Ckv});
    const float* bv = w.optional(g + "attn_v.bias", {Ckv});
    const float* q_norm = qwen3 ? w.get(g + "attn_q_norm.weight", {Dk}) : nullptr;
    const float* k_norm = qwen3 ? w.get(g + "attn_k_norm.weight", {Dk}) : nullptr;
    const float* wo = w.get(g + "attn_output.weight", {C, C});
    const float* bo = w.optional(g + "attn_output.bias", {C});
    for (int64_t t = 0; t < T; ++t) {
      rms_norm_row(&x[t * C], C, attn_norm, eps, &h[t * C]);
      double* row = &qkv[t * ld];
      affine(wq, bq, &h[t * C], C, C, row);
      affine(wk, bk, &h[t * C], C, Ckv, row + C);
      affine(wv, bv, &h[t * C], C, Ckv, row + C + Ckv);
      // qwen3: each head's RMSNorm, then RoPE; llama: RoPE alone. Queries' heads, then the keys'.
      for (int64_t j = 0; j < H + Hkv; ++j) {
        double* x_head = row + j * Dk;
        if (qwen3) {
          rms_norm_row(x_head, Dk, j < H ? q_norm : k_norm, eps, head.data());
          std::copy(head.begin(), head.end(), x_head);
        }
        rope_head(x_head, Dk, t, base, qwen3);
      }
    }
    causal_attention(qkv, T, H, Hkv, Dk, att);
    const float* ffn_norm = w.get(g + "ffn_norm.weight", {C});
    const float* wgate = w.get(g + "ffn_gate.weight", {F, C});
    const float* wup = w.get(g + "ffn_up.weight", {F, C});
    const float* wdown = w.get(g + "ffn_down.weight", {C, F});
    const float* bgate = w.optional(g + "ffn_gate.bias", {F});
    const float* bup = w.optional(g + "ffn_up.bias", {F});
    const float* bdown = w.optional(g + "ffn_down.bias", {C});
    for (int64_t t = 0; t < T; ++t) {
      affine(wo, bo, &att[t * C], C, C, tmp.data());
      for (int64_t k = 0; k < C; ++k) x[t * C + k] += tmp[k];
      rms_norm_row(&x[t * C], C, ffn_norm, eps, &h[t * C]);
      affine(wgate, bgate, &h[t * C], C, F, gate.data());
      affine(wup, bup, &h[t * C], C, F, up.data());
      // SwiGLU (Shazeer 2020): silu(gate) * up, llama.cpp's LLM_FFN_SILU with LLM_FFN_PAR.
      for (int64_t k = 0; k < F; ++k) gate[k] = gate[k] / (1.0 + std::exp(-gate[k])) * up[k];
      affine(wdown, bdown, gate.data(), F, C, tmp.data());
      for (int64_t k = 0; k < C; ++k) x[t * C + k] += tmp[k];
    }
  }
  const float* output_norm = w.get("output_norm.weight", {C});
  return reference_head_logits(
      w, x, T, C, V, [&](const double* in, double* out) { rms_norm_row(in, C, output_norm, eps, out); });
}

}  // namespace

Tensor gguf_reference_logits(const GgufFile& file, const std::vector<int32_t>& ids, GeluForm gelu) {
  Weights w{file, {}};
  const std::string& arch = file.at("general.architecture").str();
  if (arch == "gpt2") return gpt2_reference_logits(w, ids, gelu);
  if (arch == "llama" || arch == "qwen3") return llama_reference_logits(w, ids, arch == "qwen3");
  throw IoError(file.source + ": general.architecture is \"" + arch + "\", not gpt2, llama or qwen3");
}

double gguf_max_probability_diff(LanguageModel& model, const GgufFile& file, const std::vector<int32_t>& ids,
                                 GeluForm gelu) {
  const bool was_training = model.training();
  model.set_training(false);
  std::vector<float> ours;
  {
    NoGradGuard no_grad;
    ours = model.forward(ids, 1, static_cast<int64_t>(ids.size())).to_vector();
  }
  model.set_training(was_training);
  const int64_t V = model.config().vocab_size;
  const std::vector<double> p = softmax_rows(ours, V);
  const std::vector<double> q = softmax_rows(gguf_reference_logits(file, ids, gelu).to_vector(), V);
  double worst = 0;
  for (size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(p[i] - q[i]));
  return worst;
}

}  // namespace tfm
