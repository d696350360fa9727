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

// ---- llama.cpp's gpt2 graph in double (gguf_reference_logits) ----

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
                                     ", llama.cpp's gpt2 expects ", shape_str(shape)));
      it = cache.emplace(name, gguf_tensor_values(t)).first;
    }
    return it->second.data();
  }
  int64_t key(const std::string& name) const {
    const GgufValue& v = file.at(name);
    if (v.type() != GgufType::UInt32)
      throw IoError(detail::concat(file.source, ": metadata \"", name, "\" is a ", gguf_type_name(v.type()),
                                   ", llama.cpp reads a uint32"));
    return static_cast<int64_t>(v.unsigned_value());
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

void check_gguf_exportable(const std::string& objective, const ModelConfig& c) {
  std::vector<std::string> problems;
  if (objective == "masked_lm")
    problems.push_back(
        "train.objective = \"masked_lm\": the encoder attends both ways (model.causal false) and predicts masked "
        "tokens; llama.cpp's gpt2 architecture is a causal next-token decoder (GGUF export takes causal_lm runs)");
  else if (objective == "seq2seq")
    problems.push_back(
        "train.objective = \"seq2seq\": llama.cpp runs encoder-decoders only as T5 (relative position buckets, "
        "RMSNorm, no biases), which tfm's encoder-decoder is not (GGUF export takes causal_lm runs)");
  else if (objective != "causal_lm")
    problems.push_back("train.objective = \"" + objective + "\": GGUF export takes causal_lm runs");
  if (objective == "causal_lm" && !c.causal)
    problems.push_back("model.causal = false: llama.cpp's gpt2 attention is causal");
  if (c.norm_position != NormPosition::Pre)
    problems.push_back("model.norm_position = \"" + name_of(c.norm_position) +
                       "\": llama.cpp's gpt2 graph normalises before each sub-layer (pre-norm); a LayerNorm after "
                       "the residual add has no place in it");
  if (c.activation != Activation::Gelu)
    problems.push_back("model.activation = \"" + name_of(c.activation) +
                       "\": llama.cpp's gpt2 feed-forward applies GELU, nothing else");
  if (c.attention_score != AttentionScore::Dot)
    problems.push_back("model.attention_score = \"" + name_of(c.attention_score) +
                       "\": llama.cpp scores attention by scaled dot products only");
  if (c.head_gating != HeadGating::None)
    problems.push_back("model.head_gating = \"" + name_of(c.head_gating) +
                       "\": llama.cpp has no per-token gate over attention heads");
  if (c.head_mixing != HeadMixing::None)
    problems.push_back("model.head_mixing = \"" + name_of(c.head_mixing) +
                       "\": llama.cpp's attention has no mixing across heads");
  if (c.norm != NormKind::LayerNorm)
    problems.push_back("model.norm = \"" + name_of(c.norm) + "\": llama.cpp's gpt2 graph uses LayerNorm");
  if (c.positional_encoding == PositionalEncoding::Rope)
    problems.push_back("model.positional_encoding = \"rope\": llama.cpp's gpt2 graph adds a position table");
  if (c.qk_norm) problems.push_back("model.qk_norm = true: llama.cpp's gpt2 attention has no QK-norm");
  if (problems.empty()) return;
  std::string msg = "GGUF export: llama.cpp cannot run this model:";
  for (const std::string& p : problems) msg += "\n" + p;
  throw ConfigError(msg);
}

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
  check_gguf_exportable(objective, c);
  TFM_CHECK(tok.size() == c.vocab_size, "gguf_from_model", "the tokenizer has ", tok.size(),
            " tokens, the model's vocabulary ", c.vocab_size);
  const int64_t C = c.d_model, L = c.max_seq_len, Dk = C / c.n_heads, Ckv = c.n_kv_heads * Dk;
  const bool sinusoidal = c.positional_encoding == PositionalEncoding::Sinusoidal;

  GgufFile f;
  f.set("general.architecture", GgufValue::string("gpt2"));
  if (!o.name.empty()) f.set("general.name", GgufValue::string(o.name));
  f.set("general.file_type", GgufValue::u32(file_type(o.dtype)));
  // llama.cpp reads these as uint32 and float32 (llama-model-loader.cpp checks the type).
  const auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  f.set("gpt2.context_length", u32(L));
  f.set("gpt2.embedding_length", u32(C));
  f.set("gpt2.block_count", u32(c.n_layers));
  f.set("gpt2.feed_forward_length", u32(c.d_ff));
  f.set("gpt2.attention.head_count", u32(c.n_heads));
  f.set("gpt2.attention.head_count_kv", u32(c.n_kv_heads));
  f.set("gpt2.attention.layer_norm_epsilon", GgufValue::f32(c.norm_eps));
  f.set("gpt2.vocab_size", u32(c.vocab_size));
  if (!o.config_json.empty()) f.set("tfm.config", GgufValue::string(o.config_json));
  add_gguf_tokenizer(f, tok);

  // Matrices and embeddings in the chosen type, 1-D tensors in F32.
  auto add = [&](const std::string& name, const Tensor& t) {
    f.tensors.push_back(gguf_tensor(name, t, t.dim() >= 2 ? o.dtype : GgmlType::F32));
  };
  auto bias_or_zeros = [&](const std::string& name, int64_t n) {
    const NamedParameter* p = model.find_parameter(name);
    return p ? p->value : Tensor::zeros({n});  // model.bias = false: llama.cpp adds zeros
  };
  NoGradGuard no_grad;
  const Tensor& E = parameter(model, "emb.weight");  // (V, C)
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

Tensor gguf_reference_logits(const GgufFile& file, const std::vector<int32_t>& ids, GeluForm gelu) {
  Weights w{file, {}};
  const std::string& src = file.source;
  if (file.at("general.architecture").str() != "gpt2")
    throw IoError(src + ": general.architecture is \"" + file.at("general.architecture").str() + "\", not gpt2");
  const int64_t C = w.key("gpt2.embedding_length"), L = w.key("gpt2.context_length"),
                n_layers = w.key("gpt2.block_count"), H = w.key("gpt2.attention.head_count"),
                Hkv = w.key("gpt2.attention.head_count_kv"), F = w.key("gpt2.feed_forward_length");
  const double eps = file.at("gpt2.attention.layer_norm_epsilon").number();
  const auto V = static_cast<int64_t>(file.at("tokenizer.ggml.tokens").items().size());
  const auto T = static_cast<int64_t>(ids.size());
  TFM_CHECK(T >= 1 && T <= L, "gguf_reference_logits", T, " tokens for a context of ", L);
  const int64_t Dk = C / H, Ckv = Hkv * Dk, group = H / Hkv;

  const float* tok = w.get("token_embd.weight", {V, C});
  const float* pos = w.get("position_embd.weight", {L, C});
  std::vector<double> x(T * C), h(T * C), qkv(T * (C + 2 * Ckv)), att(T * C), up(T * F), tmp(std::max(C, F));
  for (int64_t t = 0; t < T; ++t) {
    TFM_CHECK(ids[t] >= 0 && ids[t] < V, "gguf_reference_logits", "token id ", ids[t], " outside [0, ", V, ")");
    for (int64_t k = 0; k < C; ++k) x[t * C + k] = static_cast<double>(tok[ids[t] * C + k]) + pos[t * C + k];
  }
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
    // Causal attention per head: q at [0, C), k at [C, C + Ckv), v after (build_qkv's views).
    const int64_t ld = C + 2 * Ckv;
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
  const float* out = file.find_tensor("output.weight") ? w.get("output.weight", {V, C}) : tok;  // tied: token_embd
  Tensor logits = Tensor::empty({T, V});
  std::vector<double> row(V);
  for (int64_t t = 0; t < T; ++t) {
    layer_norm_row(&x[t * C], C, lnf_w, lnf_b, eps, &h[t * C]);
    affine(out, nullptr, &h[t * C], C, V, row.data());
    for (int64_t v = 0; v < V; ++v) logits.data()[t * V + v] = static_cast<float>(row[v]);
  }
  return logits;
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
