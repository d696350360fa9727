// A language model as a llama.cpp `gpt2` GGUF file, and llama.cpp's gpt2 graph run from such a file
// (see gguf_export.h). Legend: C = d_model, H heads, Hkv kv heads, Dk = C / H, F = d_ff, L context,
// V vocabulary, T tokens.
#include "tfm/models/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/ops.h"
#include "tfm/nn/layers.h"

namespace tfm {
namespace {

// llama.h: llama_ftype of the file's matrices.
uint32_t file_type(GgmlType t) { return t == GgmlType::F32 ? 0 : t == GgmlType::F16 ? 1 : 32; }

// The code point GPT-2's byte-to-unicode map gives byte b (gguf_export.h).
uint32_t gpt2_code_point(uint8_t b) {
  const auto printable = [](uint32_t c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  if (printable(b)) return b;
  uint32_t rank = 0;
  for (uint32_t c = 0; c < b; ++c) rank += printable(c) ? 0 : 1;
  return 256 + rank;
}

const Tensor& parameter(const LanguageModel& model, const std::string& name) {
  const NamedParameter* p = model.find_parameter(name);
  TFM_CHECK(p, "gguf_from_model", "the model has no parameter \"", name, "\"");
  return p->value;
}

// Rows of `parts` stacked: (sum of rows, cols), or (sum) for 1-D parts.
Tensor stack_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape);
  float* dst = out.data();
  for (const Tensor& p : parts) {
    const Tensor v = contiguous_values(p);
    std::memcpy(dst, v.data(), static_cast<size_t>(v.numel()) * sizeof(float));
    dst += v.numel();
  }
  return out;
}

// The rows of t (heads * Dk, ...) or (Dk) reordered within each head from RoPE's adjacent pairs to
// halves: row 2i goes to i, row 2i + 1 to i + Dk/2 (gguf_export.h: qwen3).
Tensor neox_order(const Tensor& t, int64_t heads) {
  const Tensor v = contiguous_values(t);
  const int64_t rows = v.size(0), cols = v.numel() / rows, Dk = rows / heads, half = Dk / 2;
  Tensor out = Tensor::empty(v.shape());
  const auto row_bytes = static_cast<size_t>(cols) * sizeof(float);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      const float* src = v.data() + (h * Dk + 2 * i) * cols;
      std::memcpy(out.data() + (h * Dk + i) * cols, src, row_bytes);
      std::memcpy(out.data() + (h * Dk + half + i) * cols, src + cols, row_bytes);
    }
  return out;
}

// ---- llama.cpp's graphs in double (gguf_reference_logits) ----

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
  int64_t key_or(const std::string& name, int64_t fallback) const { return file.find(name) ? key(name) : fallback; }
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
    const double y0 = x0 * std::cos(angle) - x1 * std::sin(angle), y1 = x0 * std::sin(angle) + x1 * std::cos(angle);
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
Tensor reference_head_logits(Weights& w, const std::vector<double>& x, int64_t T, int64_t C, int64_t V, Norm&& norm) {
  const float* out = w.get(w.file.find_tensor("output.weight") ? "output.weight" : "token_embd.weight", {V, C});
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

const char* gguf_architecture_name(GgufArchitecture arch) {
  switch (arch) {
    case GgufArchitecture::Gpt2: return "gpt2";
    case GgufArchitecture::Llama: return "llama";
    case GgufArchitecture::Qwen3: return "qwen3";
  }
  return "?";
}

GgufArchitecture gguf_architecture(const std::string& objective, const ModelConfig& c) {
  // RoPE picks the family: llama.cpp's gpt2 adds a position table, its llama and qwen3 turn queries
  // and keys (qwen3: after a per-head RMSNorm of each, QK-norm).
  const bool rope = c.positional_encoding == PositionalEncoding::Rope;
  const GgufArchitecture arch =
      !rope ? GgufArchitecture::Gpt2 : c.qk_norm ? GgufArchitecture::Qwen3 : GgufArchitecture::Llama;
  const std::string graph = std::string("llama.cpp's ") + gguf_architecture_name(arch);
  std::vector<std::string> problems;
  if (objective == "masked_lm")
    problems.push_back(
        "train.objective = \"masked_lm\": the encoder attends both ways (model.causal false) and predicts masked "
        "tokens; llama.cpp's gpt2, llama and qwen3 are causal next-token decoders (GGUF export takes causal_lm "
        "runs)");
  else if (objective == "seq2seq")
    problems.push_back(
        "train.objective = \"seq2seq\": llama.cpp runs encoder-decoders only as T5 (relative position buckets, "
        "RMSNorm, no biases), which tfm's encoder-decoder is not (GGUF export takes causal_lm runs)");
  else if (objective != "causal_lm")
    problems.push_back("train.objective = \"" + objective + "\": GGUF export takes causal_lm runs");
  if (objective == "causal_lm" && !c.causal)
    problems.push_back("model.causal = false: " + graph + " attention is causal");
  if (c.norm_position != NormPosition::Pre)
    problems.push_back("model.norm_position = \"" + name_of(c.norm_position) + "\": " + graph +
                       " graph normalises before each sub-layer (pre-norm); a norm after the residual add has no "
                       "place in it");
  if (c.attention_score != AttentionScore::Dot)
    problems.push_back("model.attention_score = \"" + name_of(c.attention_score) +
                       "\": llama.cpp scores attention by scaled dot products only");
  if (c.head_gating != HeadGating::None)
    problems.push_back("model.head_gating = \"" + name_of(c.head_gating) +
                       "\": llama.cpp has no per-token gate over attention heads");
  if (c.head_mixing != HeadMixing::None)
    problems.push_back("model.head_mixing = \"" + name_of(c.head_mixing) +
                       "\": llama.cpp's attention has no mixing across heads");
  if (!rope) {
    if (c.activation != Activation::Gelu)
      problems.push_back("model.activation = \"" + name_of(c.activation) +
                         "\": llama.cpp's gpt2 feed-forward applies GELU, nothing else (its SwiGLU architectures, "
                         "llama and qwen3, take model.positional_encoding = \"rope\")");
    if (c.norm != NormKind::LayerNorm)
      problems.push_back("model.norm = \"" + name_of(c.norm) +
                         "\": llama.cpp's gpt2 graph uses LayerNorm (its RMSNorm architectures, llama and qwen3, "
                         "take model.positional_encoding = \"rope\")");
    if (c.qk_norm)
      problems.push_back("model.qk_norm = true: llama.cpp's gpt2 attention has no QK-norm (its qwen3 has, with "
                         "model.positional_encoding = \"rope\")");
  } else {
    const std::string modern = "with model.positional_encoding = \"rope\" the model is " + graph +
                               " (llama with RoPE, RMSNorm and SwiGLU; qwen3 with QK-norm too), which ";
    if (c.norm != NormKind::RMSNorm)
      problems.push_back("model.norm = \"" + name_of(c.norm) + "\": " + modern + "normalises with RMSNorm");
    if (c.activation != Activation::SwiGLU)
      problems.push_back("model.activation = \"" + name_of(c.activation) + "\": " + modern +
                         "has a SwiGLU feed-forward");
    if (arch == GgufArchitecture::Qwen3 && c.bias)
      problems.push_back("model.bias = true: llama.cpp's qwen3 (the architecture with QK-norm) has no biases on "
                         "its output projection or feed-forward");
  }
  if (problems.empty()) return arch;
  std::string msg = "GGUF export: llama.cpp cannot run this model:";
  for (const std::string& p : problems) msg += "\n" + p;
  throw ConfigError(msg);
}

void check_gguf_exportable(const std::string& objective, const ModelConfig& c) { gguf_architecture(objective, c); }

std::string gpt2_token_text(const std::string& bytes) {
  std::string out;
  for (char b : bytes) append_utf8(out, gpt2_code_point(static_cast<uint8_t>(b)));
  return out;
}

GgufEndOfText gguf_end_of_text(const Tokenizer& tok) {
  const int32_t S = static_cast<int32_t>(tok.specials().size());
  if (tok.kind() == Tokenizer::Kind::Bpe || tok.kind() == Tokenizer::Kind::Byte)
    return {S + 0xFF, "byte 0xFF, which UTF-8 text never contains, so generation ends only at its length"};
  const int64_t id = tok.size() > 11 ? 11 : -1;
  std::string note = "none: a char vocabulary has no free id";
  if (id >= 0) {
    std::string text = tok.decode(static_cast<int32_t>(id));
    if (text == "\n") text = "\\n";
    note += "; llama.cpp's gpt2 tokenizer takes id 11 (\"" + text +
            "\") as end of generation, so give llama.cpp --ignore-eos";
  }
  return {id, note};
}

void add_gguf_tokenizer(GgufFile& f, const Tokenizer& tok) {
  TFM_CHECK(tok.kind() != Tokenizer::Kind::Word, "add_gguf_tokenizer",
            "a word vocabulary (data.tokenizer = \"word\") has no byte-level form llama.cpp's gpt2 tokenizer reads");
  const auto V = static_cast<int32_t>(tok.size());
  std::vector<std::string> tokens(static_cast<size_t>(V));
  std::vector<int32_t> types(static_cast<size_t>(V), 1);  // LLAMA_TOKEN_TYPE_NORMAL
  std::vector<std::string> merges;
  std::set<std::string> seen_merges;
  for (int32_t id = 0; id < V; ++id) {
    if (tok.is_special(id)) {  // "<pad>" etc. as written, control tokens
      tokens[id] = tok.specials()[id];
      types[id] = 3;  // LLAMA_TOKEN_TYPE_CONTROL
      continue;
    }
    const std::string bytes = tok.decode(id);
    tokens[id] = gpt2_token_text(bytes);
    if (tok.kind() != Tokenizer::Kind::Char || bytes.size() < 2) continue;
    // A multi-byte character: merges joining its bytes left to right (lead byte first).
    std::string left = gpt2_token_text(bytes.substr(0, 1));
    for (size_t k = 1; k < bytes.size(); ++k) {
      const std::string right = gpt2_token_text(bytes.substr(k, 1));
      const std::string merge = left + " " + right;
      if (seen_merges.insert(merge).second) merges.push_back(merge);
      left += right;
    }
  }
  if (const BpeTokenizer* bpe = tok.bpe())
    for (const auto& [a, b] : bpe->merges())
      merges.push_back(gpt2_token_text(bpe->token_bytes(a)) + " " + gpt2_token_text(bpe->token_bytes(b)));
  // llama.cpp keys its vocabulary by token text (llama-vocab.cpp asserts id_to_token.size() ==
  // token_to_id.size()): two ids with the same bytes cannot be told apart.
  std::map<std::string, int32_t> by_text;
  for (int32_t id = 0; id < V; ++id) {
    const auto [it, inserted] = by_text.emplace(tokens[id], id);
    if (!inserted)
      throw ConfigError(detail::concat(
          tok.kind() == Tokenizer::Kind::Bpe ? "data.tokenizer_path" : "data.tokenizer", ": tokens ", it->second,
          " and ", id, " have the same bytes (\"", tok.decode(id),
          "\"); llama.cpp looks tokens up by their text and cannot keep both"));
  }

  f.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  f.set("tokenizer.ggml.pre", GgufValue::string("gpt-2"));
  f.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  f.set("tokenizer.ggml.token_type", GgufValue::int32s(types));
  f.set("tokenizer.ggml.scores", GgufValue::float32s(std::vector<float>(static_cast<size_t>(V), 0.0f)));
  f.set("tokenizer.ggml.merges", GgufValue::strings(merges));  // llama.cpp requires the key, even empty
  const GgufEndOfText eot = gguf_end_of_text(tok);
  if (eot.id >= 0 && eot.id != 11) {  // 11 is llama.cpp's own default: written only when chosen
    f.set("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(eot.id)));
    f.set("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(eot.id)));
  }
  f.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));  // tfm's models never saw one
  f.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
}

GgufFile gguf_from_model(const LanguageModel& model, const Tokenizer& tok, const std::string& objective,
                         const GgufExportOptions& o) {
  const ModelConfig& c = model.config();
  const GgufArchitecture arch = gguf_architecture(objective, c);
  TFM_CHECK(tok.size() == c.vocab_size, "gguf_from_model", "the tokenizer has ", tok.size(),
            " tokens, the model's vocabulary ", c.vocab_size);
  const int64_t C = c.d_model, L = c.max_seq_len, Dk = c.head_dim(), Ckv = c.n_kv_heads * Dk;
  const std::string a = gguf_architecture_name(arch);

  GgufFile f;
  f.set("general.architecture", GgufValue::string(a));
  if (!o.name.empty()) f.set("general.name", GgufValue::string(o.name));
  f.set("general.file_type", GgufValue::u32(file_type(o.dtype)));
  // llama.cpp reads these as uint32 and float32 (llama-model-loader.cpp checks the type).
  const auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  f.set(a + ".context_length", u32(L));
  f.set(a + ".embedding_length", u32(C));
  f.set(a + ".block_count", u32(c.n_layers));
  f.set(a + ".feed_forward_length", u32(c.d_ff));
  f.set(a + ".attention.head_count", u32(c.n_heads));
  f.set(a + ".attention.head_count_kv", u32(c.n_kv_heads));
  if (arch == GgufArchitecture::Gpt2) {
    f.set(a + ".attention.layer_norm_epsilon", GgufValue::f32(c.norm_eps));
  } else {
    f.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(c.norm_eps));  // QK-norm's too
    f.set(a + ".attention.key_length", u32(Dk));
    f.set(a + ".attention.value_length", u32(Dk));
    f.set(a + ".rope.dimension_count", u32(Dk));  // tfm turns the whole head
    f.set(a + ".rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
  }
  f.set(a + ".vocab_size", u32(c.vocab_size));
  if (!o.config_json.empty()) f.set("tfm.config", GgufValue::string(o.config_json));
  add_gguf_tokenizer(f, tok);

  // Matrices and embeddings in the chosen type, 1-D tensors in F32.
  auto add = [&](const std::string& name, const Tensor& t) {
    f.tensors.push_back(gguf_tensor(name, t, t.dim() >= 2 ? o.dtype : GgmlType::F32));
  };
  NoGradGuard no_grad;
  const Tensor& E = parameter(model, "emb.weight");  // (V, C)
  if (arch != GgufArchitecture::Gpt2) {
    // qwen3 turns the halves of a head (LLAMA_ROPE_TYPE_NEOX), tfm adjacent pairs: its query and key
    // rows (and QK-norm gains) go in half order (gguf_export.h).
    const bool neox = arch == GgufArchitecture::Qwen3;
    const auto rope_rows = [&](const Tensor& t, int64_t heads) { return neox && heads > 0 ? neox_order(t, heads) : t; };
    // Where a model.bias = true llama has biases, llama.cpp's llama reads them as optional tensors.
    const auto add_linear = [&](const std::string& g, const std::string& b, int64_t heads) {
      add(g + ".weight", rope_rows(parameter(model, b + ".weight"), heads));
      if (const NamedParameter* p = model.find_parameter(b + ".bias")) add(g + ".bias", rope_rows(p->value, heads));
    };
    add("token_embd.weight", E);
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
      add(g + "attn_norm.weight", parameter(model, b + "ln1.weight"));
      add_linear(g + "attn_q", b + "attn.wq", c.n_heads);     // (H Dk, C)
      add_linear(g + "attn_k", b + "attn.wk", c.n_kv_heads);  // (Hkv Dk, C)
      add_linear(g + "attn_v", b + "attn.wv", 0);             // (Hkv Dk, C), not turned: as it is
      if (c.qk_norm) {
        add(g + "attn_q_norm.weight", rope_rows(parameter(model, b + "attn.q_norm.weight"), 1));  // (Dk)
        add(g + "attn_k_norm.weight", rope_rows(parameter(model, b + "attn.k_norm.weight"), 1));
      }
      add_linear(g + "attn_output", b + "attn.wo", 0);  // (C, H Dk)
      add(g + "ffn_norm.weight", parameter(model, b + "ln2.weight"));
      add_linear(g + "ffn_gate", b + "fc1", 0);  // (F, C): silu(x W1^T) * (x W3^T), then W2
      add_linear(g + "ffn_up", b + "fc3", 0);    // (F, C)
      add_linear(g + "ffn_down", b + "fc2", 0);  // (C, F)
    }
    add("output_norm.weight", parameter(model, "ln_f.weight"));
    if (!c.tie_embeddings) add("output.weight", parameter(model, "head.weight"));  // tied: token_embd
    return f;
  }

  const bool sinusoidal = c.positional_encoding == PositionalEncoding::Sinusoidal;
  auto bias_or_zeros = [&](const std::string& name, int64_t n) {
    const NamedParameter* p = model.find_parameter(name);
    return p ? p->value : Tensor::zeros({n});  // model.bias = false: llama.cpp adds zeros
  };
  // The product tfm computes in embed_with_positions, with the same float scale and op.
  add("token_embd.weight", sinusoidal ? E * std::sqrt(static_cast<float>(C)) : E);
  add("position_embd.weight",
      sinusoidal ? SinusoidalPositionalEncoding(L, C).table : parameter(model, "pos.weight"));  // (L, C)
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    add(g + "attn_norm.weight", parameter(model, b + "ln1.weight"));
    add(g + "attn_norm.bias", parameter(model, b + "ln1.bias"));
    add(g + "attn_qkv.weight", stack_rows({parameter(model, b + "attn.wq.weight"), parameter(model, b + "attn.wk.weight"),
                                           parameter(model, b + "attn.wv.weight")}));  // (C + 2 Ckv, C)
    add(g + "attn_qkv.bias", stack_rows({bias_or_zeros(b + "attn.wq.bias", C), bias_or_zeros(b + "attn.wk.bias", Ckv),
                                         bias_or_zeros(b + "attn.wv.bias", Ckv)}));
    add(g + "attn_output.weight", parameter(model, b + "attn.wo.weight"));
    add(g + "attn_output.bias", bias_or_zeros(b + "attn.wo.bias", C));
    add(g + "ffn_norm.weight", parameter(model, b + "ln2.weight"));
    add(g + "ffn_norm.bias", parameter(model, b + "ln2.bias"));
    add(g + "ffn_up.weight", parameter(model, b + "fc1.weight"));  // (F, C)
    add(g + "ffn_up.bias", bias_or_zeros(b + "fc1.bias", c.d_ff));
    add(g + "ffn_down.weight", parameter(model, b + "fc2.weight"));  // (C, F)
    add(g + "ffn_down.bias", bias_or_zeros(b + "fc2.bias", C));
  }
  add("output_norm.weight", parameter(model, "ln_f.weight"));
  add("output_norm.bias", parameter(model, "ln_f.bias"));
  if (!c.tie_embeddings)
    add("output.weight", parameter(model, "head.weight"));
  else if (sinusoidal)
    add("output.weight", E);  // the head reads E unscaled, token_embd holds it scaled
  return f;
}

double gelu_of(GeluForm form, double x) {
  switch (form) {
    case GeluForm::Erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case GeluForm::Tanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case GeluForm::LlamaCpp: {  // ggml-cpu/vec.h: ggml_vec_gelu_f32 under GGML_GELU_FP16
      const auto xf = static_cast<float>(x);
      if (xf <= -10.0f) return 0.0;
      if (xf >= 10.0f) return xf;
      const float h = from_f16(to_f16(xf));
      const float g = 0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
      return from_f16(to_f16(g));
    }
  }
  return 0.0;
}

namespace {

// Head counts a graph can be built from (a file may say anything): C = H Dk, H = G Hkv.
void check_heads(const GgufFile& file, int64_t C, int64_t H, int64_t Hkv) {
  if (C < 1 || H < 1 || Hkv < 1 || C % H != 0 || H % Hkv != 0)
    throw IoError(detail::concat(file.source, ": embedding length ", C, ", ", H, " heads and ", Hkv,
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
  return reference_head_logits(w, x, T, C, V, [&](const double* in, double* out) {
    layer_norm_row(in, C, lnf_w, lnf_b, eps, out);
  });
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
      throw IoError(detail::concat(w.file.source, ": ", a, k, " is ", w.key(a + k), ", tfm's reading of llama.cpp's ",
                                   a, " takes the head width ", Dk));
  const double eps = w.file.at(a + ".attention.layer_norm_rms_epsilon").number();
  const double base = w.file.find(a + ".rope.freq_base") ? w.file.at(a + ".rope.freq_base").number() : 10000.0;
  const auto V = static_cast<int64_t>(w.file.at("tokenizer.ggml.tokens").items().size());
  const auto T = static_cast<int64_t>(ids.size());
  check_ids(ids, V, L);

  const float* tok = w.get("token_embd.weight", {V, C});
  std::vector<double> x(T * C), h(T * C), qkv(T * ld), att(T * C), gate(F), up(F), tmp(std::max(C, F)), head(Dk);
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
  return reference_head_logits(w, x, T, C, V, [&](const double* in, double* out) {
    rms_norm_row(in, C, output_norm, eps, out);
  });
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
