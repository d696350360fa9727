// A language model as a llama.cpp GGUF file: its architecture, tokenizer keys and tensors (see
// gguf_export.h). Legend: C = d_model, H heads, Hkv kv heads, Dk = C / H, F = d_ff, L context, V vocabulary.
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
uint32_t file_type(GgmlType t) {
  return t == GgmlType::F32 ? 0 : t == GgmlType::F16 ? 1 : 32;
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

}  // namespace

const char* gguf_architecture_name(GgufArchitecture arch) {
  switch (arch) {
    case GgufArchitecture::Gpt2:
      return "gpt2";
    case GgufArchitecture::Llama:
      return "llama";
    case GgufArchitecture::Qwen3:
      return "qwen3";
  }
  return "?";
}

namespace {

// A rule for a key the graph takes with any value: `how` says where the value goes.
GgufKeyRule any_value(const std::string& key, const std::string& where) {
  return {key, {}, nullptr, where};
}

// A rule for an enum key: the allowed values by name, the config's by name_of.
template <class E>
GgufKeyRule only(const std::string& key, E ModelConfig::*member, std::vector<nlohmann::json> allowed,
                 const std::string& why) {
  return {key, std::move(allowed),
          [member](const ModelConfig& c) { return nlohmann::json(name_of(c.*member)); }, why};
}

GgufKeyRule only(const std::string& key, bool ModelConfig::*member, bool allowed, const std::string& why) {
  return {key, {allowed}, [member](const ModelConfig& c) { return nlohmann::json(c.*member); }, why};
}

// A rule for a number key whose 0 means "off": only off.
template <class V>
GgufKeyRule only_off(const std::string& key, V ModelConfig::*member, const std::string& why) {
  return {
      key, {nlohmann::json(V{0})}, [member](const ModelConfig& c) { return nlohmann::json(c.*member); }, why};
}

std::vector<GgufKeyRule> rules_spelled(GgufArchitecture arch) {
  const std::string graph = std::string("llama.cpp's ") + gguf_architecture_name(arch);
  std::vector<GgufKeyRule> r = {
      any_value("model.positional_encoding",
                "picks the architecture: learned or sinusoidal, gpt2's position table; rope, llama or qwen3"),
      any_value("model.d_model", "ARCH.embedding_length"),
      any_value("model.n_layers", "ARCH.block_count"),
      any_value("model.n_heads", "ARCH.attention.head_count"),
      any_value("model.n_kv_heads", "ARCH.attention.head_count_kv (grouped-query attention)"),
      any_value("model.d_ff", "ARCH.feed_forward_length"),
      any_value("model.max_seq_len", "ARCH.context_length"),
      any_value("model.norm_eps", "the norms' epsilon key"),
      any_value("model.tie_embeddings", "tied: output.weight left out (or E itself), untied: the head"),
      any_value("model.dropout", "training only: an exported model runs without dropout"),
      any_value("model.attention_dropout", "training only"),
      any_value("model.n_encoder_layers", "seq2seq only, whose export is refused by train.objective"),
      any_value("model.n_decoder_layers", "seq2seq only, whose export is refused by train.objective"),
      any_value("model.head_topk", "read only with model.head_gating, refused unless none"),
      any_value("model.head_balance_loss", "read only with model.head_gating, refused unless none"),
      any_value("model.head_groups", "read only with model.head_mixing, refused unless none"),
      only("model.causal", &ModelConfig::causal, true, graph + " attention is causal"),
      only("model.norm_position", &ModelConfig::norm_position, {"pre"},
           graph + " graph normalises before each sub-layer (pre-norm); a norm after the residual add has no "
                   "place "
                   "in it"),
      only("model.attention_score", &ModelConfig::attention_score, {"dot"},
           "llama.cpp scores attention by scaled dot products only"),
      only("model.head_gating", &ModelConfig::head_gating, {"none"},
           "llama.cpp has no per-token gate over attention heads"),
      only("model.head_mixing", &ModelConfig::head_mixing, {"none"},
           "llama.cpp's attention has no mixing across heads"),
      any_value("model.zero_init", "initialisation only: the trained weights are exported as they are"),
      only_off("model.logit_softcap", &ModelConfig::logit_softcap,
               graph + " has no logit soft-capping (llama.cpp's gemma2 has, but not this model's layers)"),
      only("model.x0_skip", &ModelConfig::x0_skip, false,
           graph + " feeds each block the previous block's output only, not a mix with the embeddings"),
      only("model.value_residual", &ModelConfig::value_residual, false,
           graph + " attention reads its own layer's values only"),
      only_off("model.bigram_buckets", &ModelConfig::bigram_buckets,
               graph + " embeds each token alone, with no table over token pairs"),
      any_value(
          "model.mtp_heads",
          "exported: training-only; the extra heads (mtp.*) are left out, the file's output head is the "
          "next-token head llama.cpp runs"),
  };
  if (arch == GgufArchitecture::Gpt2) {
    r.push_back(any_value("model.rope_theta", "not read: no RoPE"));
    r.push_back(any_value("model.bias", "the biases, or zeros where llama.cpp's gpt2 requires them"));
    r.push_back(
        only("model.activation", &ModelConfig::activation, {"gelu"},
             "llama.cpp's gpt2 feed-forward applies GELU, nothing else (its SwiGLU architectures, llama and "
             "qwen3, take model.positional_encoding = \"rope\")"));
    r.push_back(
        only("model.norm", &ModelConfig::norm, {"layernorm"},
             "llama.cpp's gpt2 graph uses LayerNorm (its RMSNorm architectures, llama and qwen3, take "
             "model.positional_encoding = \"rope\")"));
    r.push_back(
        only("model.qk_norm", &ModelConfig::qk_norm, false,
             "llama.cpp's gpt2 attention has no QK-norm (its qwen3 has, with model.positional_encoding = "
             "\"rope\")"));
    return r;
  }
  const bool qwen3 = arch == GgufArchitecture::Qwen3;
  const std::string modern = "with model.positional_encoding = \"rope\" the model is " + graph +
                             " (llama with RoPE, RMSNorm and SwiGLU; qwen3 with QK-norm too), which ";
  r.push_back(any_value("model.rope_theta", "ARCH.rope.freq_base"));
  r.push_back(only("model.norm", &ModelConfig::norm, {"rmsnorm"}, modern + "normalises with RMSNorm"));
  r.push_back(
      only("model.activation", &ModelConfig::activation, {"swiglu"}, modern + "has a SwiGLU feed-forward"));
  r.push_back(any_value("model.qk_norm", "picks the architecture: llama without QK-norm, qwen3 with it"));
  if (qwen3)
    r.push_back(
        only("model.bias", &ModelConfig::bias, false,
             "llama.cpp's qwen3 (the architecture with QK-norm) has no biases on its output projection or "
             "feed-forward"));
  else
    r.push_back(any_value("model.bias", "the biases, which llama.cpp's llama reads when present"));
  return r;
}

// The rules with ARCH spelled as the architecture's key prefix.
std::vector<GgufKeyRule> rules_of(GgufArchitecture arch) {
  std::vector<GgufKeyRule> r = rules_spelled(arch);
  for (GgufKeyRule& rule : r) {
    const size_t at = rule.note.find("ARCH");
    if (at != std::string::npos) rule.note.replace(at, 4, gguf_architecture_name(arch));
  }
  return r;
}

}  // namespace

const std::vector<GgufKeyRule>& gguf_key_rules(GgufArchitecture arch) {
  static const std::vector<GgufKeyRule> gpt2 = rules_of(GgufArchitecture::Gpt2),
                                        llama = rules_of(GgufArchitecture::Llama),
                                        qwen3 = rules_of(GgufArchitecture::Qwen3);
  return arch == GgufArchitecture::Gpt2 ? gpt2 : arch == GgufArchitecture::Llama ? llama : qwen3;
}

GgufArchitecture gguf_architecture(const ModelConfig& c) {
  // RoPE picks the family: llama.cpp's gpt2 adds a position table, its llama and qwen3 turn queries
  // and keys (qwen3: after a per-head RMSNorm of each, QK-norm).
  const bool rope = c.positional_encoding == PositionalEncoding::Rope;
  const GgufArchitecture arch = !rope       ? GgufArchitecture::Gpt2
                                : c.qk_norm ? GgufArchitecture::Qwen3
                                            : GgufArchitecture::Llama;
  std::vector<std::string> problems;
  for (const GgufKeyRule& rule : gguf_key_rules(arch)) {
    if (rule.allowed.empty()) continue;
    const nlohmann::json value = rule.value(c);
    if (std::find(rule.allowed.begin(), rule.allowed.end(), value) == rule.allowed.end())
      problems.push_back(rule.key + " = " + value.dump() + ": " + rule.note);
  }
  if (problems.empty()) return arch;
  std::string msg = "GGUF export: llama.cpp cannot run this model:";
  for (const std::string& p : problems) msg += "\n" + p;
  throw ConfigError(msg);
}

void check_gguf_exportable(const ModelConfig& c) {
  gguf_architecture(c);
}

GgufEndOfText gguf_end_of_text(const Tokenizer& tok) {
  const int32_t S = static_cast<int32_t>(tok.specials().size());
  if (tok.has_end_of_text() && !tok.gpt2())
    return {tok.end_of_text_id(), "<|endoftext|>, the corpus's document separator"};
  if (tok.gpt2() && tok.gpt2()->end_of_text() >= 0)
    return {S + tok.gpt2()->end_of_text(), "<|endoftext|>, the vocabulary's own (GPT-2's 50256)"};
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
            "a word vocabulary (data.tokenizer = \"word\") has no byte-level form llama.cpp's gpt2 tokenizer "
            "reads");
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
    const int32_t own = id - static_cast<int32_t>(tok.specials().size());
    // A gpt2 vocabulary: the file's own tokens, already in this form.
    if (const Gpt2Bpe* gpt2 = tok.gpt2(); gpt2 && own < gpt2->vocab_size()) {
      tokens[id] = gpt2->tokens()[own];
      if (gpt2->is_control(own)) types[id] = 3;  // "<|endoftext|>": never produced by encoding
      continue;
    }
    if (id == tok.end_of_text_id()) {  // the document separator: never produced by encoding either
      tokens[id] = kEndOfText;
      types[id] = 3;
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
  if (const Gpt2Bpe* gpt2 = tok.gpt2())
    for (const auto& [a, b] : gpt2->merges()) merges.push_back(a + " " + b);
  if (const BpeTokenizer* bpe = tok.bpe())
    for (const auto& [a, b] : bpe->merges())
      merges.push_back(gpt2_token_text(bpe->token_bytes(a)) + " " + gpt2_token_text(bpe->token_bytes(b)));
  // llama.cpp keys its vocabulary by token text (llama-vocab.cpp asserts id_to_token.size() ==
  // token_to_id.size()): two ids with the same bytes cannot be told apart.
  std::map<std::string, int32_t> by_text;
  for (int32_t id = 0; id < V; ++id) {
    const auto [it, inserted] = by_text.emplace(tokens[id], id);
    if (!inserted)
      throw ConfigError(
          detail::concat(tok.kind() == Tokenizer::Kind::Bpe ? "data.tokenizer_path" : "data.tokenizer",
                         ": tokens ", it->second, " and ", id, " have the same bytes (\"", tok.decode(id),
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

GgufFile gguf_from_model(const LanguageModel& model, const Tokenizer& tok, const GgufExportOptions& o) {
  const ModelConfig& c = model.config();
  const GgufArchitecture arch = gguf_architecture(c);
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
    const auto rope_rows = [&](const Tensor& t, int64_t heads) {
      return neox && heads > 0 ? neox_order(t, heads) : t;
    };
    // Where a model.bias = true llama has biases, llama.cpp's llama reads them as optional tensors.
    const auto add_linear = [&](const std::string& g, const std::string& b, int64_t heads) {
      add(g + ".weight", rope_rows(parameter(model, b + ".weight"), heads));
      if (const NamedParameter* p = model.find_parameter(b + ".bias"))
        add(g + ".bias", rope_rows(p->value, heads));
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
      sinusoidal ? sinusoidal_table(L, C) : parameter(model, "pos.weight"));  // (L, C)
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    add(g + "attn_norm.weight", parameter(model, b + "ln1.weight"));
    add(g + "attn_norm.bias", parameter(model, b + "ln1.bias"));
    add(g + "attn_qkv.weight",
        stack_rows({parameter(model, b + "attn.wq.weight"), parameter(model, b + "attn.wk.weight"),
                    parameter(model, b + "attn.wv.weight")}));  // (C + 2 Ckv, C)
    add(g + "attn_qkv.bias",
        stack_rows({bias_or_zeros(b + "attn.wq.bias", C), bias_or_zeros(b + "attn.wk.bias", Ckv),
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

}  // namespace tfm
