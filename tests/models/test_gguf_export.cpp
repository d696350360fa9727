// GGUF export (models/gguf_export.h): the file, read back by the GGUF reader and run through llama.cpp's
// gpt2, llama or qwen3 graph in double (gguf_reference_logits), gives the model's logits for every
// variant the mapping covers; names, shapes and metadata types are what llama.cpp's loader asks for; the
// tokenizer's tokens and merges; what cannot be exported is refused naming the key.
// Legend: T tokens, C = d_model, V vocabulary.
#include <catch2/catch.hpp>
#include <cmath>

#include "model_config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/gguf_reference.h"

using namespace tfm;
using Catch::Matchers::Contains;
using tfm_test::model_config_from;

namespace {

// A char vocabulary with two multi-byte characters (é: 2 bytes, — : 3 bytes).
Tokenizer char_vocab() {
  return Tokenizer::from_text(Tokenizer::Kind::Char, "ROMEO: a b;c\n\xc3\xa9t\xc3\xa9 \xe2\x80\x94 xyz!?",
                              "test");
}

const std::vector<std::string> kTiny = {"model.d_model=16",   "model.n_layers=2", "model.n_heads=4",
                                        "model.n_kv_heads=4", "model.d_ff=24",    "model.max_seq_len=12"};

ModelConfig tiny(int64_t V) {
  return model_config_from(kTiny, V);
}

// Weights large enough that every path moves the probabilities (the 0.02 init is near uniform).
void randomize(LanguageModel& model, uint64_t seed) {
  Rng rng(seed);
  Tensor values = model.flat_values();
  values.copy_from(Tensor::randn(values.shape(), rng, 0.0f, 0.35f));
  for (const NamedParameter& p : model.parameters())  // norm gains (QK-norm's too) near 1
    if ((p.name.find("ln") != std::string::npos || p.name.find("norm") != std::string::npos) &&
        p.name.find("weight") != std::string::npos) {
      Tensor gain = p.value;  // a view of the flat buffer
      gain.copy_from(Tensor::randn(p.value.shape(), rng, 1.0f, 0.2f));
    }
}

GgufFile round_trip(const GgufFile& f) {
  const std::string bytes = serialize_gguf(f);
  return parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "model.gguf");
}

std::vector<int32_t> probe(int64_t T, int64_t V) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) ids.push_back(static_cast<int32_t>((t * 5 + 3) % V));
  return ids;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// tiny() with the modern options: RoPE, RMSNorm, SwiGLU, no biases (llama.cpp's llama; qwen3 with qk_norm).
ModelConfig modern(int64_t V, bool qk_norm) {
  std::vector<std::string> sets = kTiny;
  sets.insert(sets.end(), {"model.positional_encoding=rope", "model.norm=rmsnorm", "model.activation=swiglu",
                           "model.bias=false", qk_norm ? "model.qk_norm=true" : "model.qk_norm=false"});
  return model_config_from(sets, V);
}

}  // namespace

TEST_CASE("gguf export: llama.cpp's gpt2 graph on the file gives the model's logits", "[gguf]") {
  const Tokenizer tok = char_vocab();
  const int64_t V = tok.size();
  struct Variant {
    const char* name;
    ModelConfig config;
  };
  std::vector<Variant> variants;
  variants.push_back({"sinusoidal, tied (the default)", tiny(V)});
  ModelConfig learned = tiny(V);
  learned.positional_encoding = PositionalEncoding::Learned;
  learned.tie_embeddings = false;
  variants.push_back({"learned, untied", learned});
  ModelConfig learned_tied = tiny(V);
  learned_tied.positional_encoding = PositionalEncoding::Learned;
  variants.push_back({"learned, tied (output left to token_embd)", learned_tied});
  ModelConfig gqa = tiny(V);
  gqa.n_kv_heads = 2;
  gqa.bias = false;
  variants.push_back({"GQA, no biases", gqa});
  ModelConfig mqa = tiny(V);
  mqa.n_kv_heads = 1;
  mqa.d_model = 12;  // sqrt(C) not a power of two
  mqa.n_heads = 3;
  variants.push_back({"MQA, C = 12", mqa});

  for (const Variant& v : variants) {
    INFO(v.name);
    LanguageModel model(v.config, 5);
    randomize(model, 9);
    const GgufFile f = round_trip(gguf_from_model(model, tok));
    const std::vector<int32_t> ids = probe(v.config.max_seq_len, V);
    NoGradGuard no_grad;
    const std::vector<float> ours = model.forward(ids, 1, static_cast<int64_t>(ids.size())).to_vector();
    const std::vector<float> ref = gguf_reference_logits(f, ids, GeluForm::Erf).to_vector();
    REQUIRE(ours.size() == ref.size());
    CHECK(max_abs_diff(ours, ref) < 2e-5);
    // llama.cpp's GELU (tanh form through a half table) moves the logits visibly, and only it.
    const double tanh_diff =
        max_abs_diff(ours, gguf_reference_logits(f, ids, GeluForm::LlamaCpp).to_vector());
    CHECK(tanh_diff > 1e-4);
    CHECK(tanh_diff < 0.1);
    CHECK(gguf_max_probability_diff(model, f, ids, GeluForm::Erf) < 1e-5);
  }
}

TEST_CASE("gguf export: llama.cpp's llama and qwen3 graphs on the file give the model's logits", "[gguf]") {
  const Tokenizer tok = char_vocab();
  const int64_t V = tok.size();
  struct Variant {
    const char* name;
    ModelConfig config;
    const char* arch;
  };
  std::vector<Variant> variants;
  ModelConfig gqa = modern(V, false);
  gqa.n_kv_heads = 2;
  gqa.tie_embeddings = false;
  variants.push_back({"llama: GQA, untied", gqa, "llama"});
  ModelConfig mqa = modern(V, false);
  mqa.n_kv_heads = 1;
  mqa.rope_theta = 500.0;  // turns fast enough over 12 positions to matter
  variants.push_back({"llama: MQA, tied, theta 500", mqa, "llama"});
  ModelConfig biased = modern(V, false);
  biased.bias = true;
  biased.d_model = 24;
  biased.n_heads = 2;  // Dk = 12
  biased.n_kv_heads = 2;
  variants.push_back({"llama: biases, Dk 12", biased, "llama"});
  ModelConfig q3 = modern(V, true);
  q3.n_kv_heads = 2;
  variants.push_back({"qwen3: GQA, tied", q3, "qwen3"});
  ModelConfig q3_untied = modern(V, true);
  q3_untied.tie_embeddings = false;
  q3_untied.rope_theta = 300.0;
  variants.push_back({"qwen3: MHA, untied, theta 300", q3_untied, "qwen3"});

  for (const Variant& v : variants) {
    INFO(v.name);
    LanguageModel model(v.config, 5);
    randomize(model, 9);
    const GgufFile f = round_trip(gguf_from_model(model, tok));
    REQUIRE(f.at("general.architecture").str() == v.arch);
    const std::vector<int32_t> ids = probe(v.config.max_seq_len, V);
    NoGradGuard no_grad;
    const std::vector<float> ours = model.forward(ids, 1, static_cast<int64_t>(ids.size())).to_vector();
    const std::vector<float> ref =
        gguf_reference_logits(f, ids, GeluForm::LlamaCpp).to_vector();  // no GELU here
    REQUIRE(ours.size() == ref.size());
    CHECK(max_abs_diff(ours, ref) < 2e-5);
    CHECK(gguf_max_probability_diff(model, f, ids, GeluForm::Erf) < 1e-5);
  }
}

TEST_CASE("gguf export: qwen3's RoPE turns halves, so the export reorders Wq and Wk within each head",
          "[gguf]") {
  const Tokenizer tok = char_vocab();
  ModelConfig c = modern(tok.size(), true);
  c.n_kv_heads = 2;
  c.rope_theta = 100.0;
  LanguageModel model(c, 2);
  randomize(model, 3);
  const GgufFile f = gguf_from_model(model, tok);
  // Row 2i of a head goes to i, row 2i + 1 to i + Dk/2 (Dk = 4): rows 0 2 1 3 of each head, in order.
  const std::vector<float> wk = model.find_parameter("blocks.1.attn.wk.weight")->value.to_vector();
  const std::vector<float> ak = gguf_tensor_values(f.tensor("blk.1.attn_k.weight")).to_vector();
  const int64_t C = c.d_model;
  const int64_t from[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t k = 0; k < C; ++k) REQUIRE(ak[r * C + k] == wk[from[r] * C + k]);
  const std::vector<float> gain = model.find_parameter("blocks.0.attn.q_norm.weight")->value.to_vector();
  CHECK(gguf_tensor_values(f.tensor("blk.0.attn_q_norm.weight")).to_vector() ==
        std::vector<float>{gain[0], gain[2], gain[1], gain[3]});
  // V is not turned: as it is.
  CHECK(gguf_tensor_values(f.tensor("blk.0.attn_v.weight")).to_vector() ==
        model.find_parameter("blocks.0.attn.wv.weight")->value.to_vector());

  // Without the reordering llama.cpp's qwen3 would turn the wrong pairs: the reference sees it.
  GgufFile unordered = f;
  for (GgufTensor& t : unordered.tensors)
    for (int l = 0; l < 2; ++l)
      for (const char* w : {"q", "k"}) {
        const std::string layer = std::to_string(l);
        if (t.name == "blk." + layer + ".attn_" + w + ".weight")
          t = gguf_tensor(t.name, model.find_parameter("blocks." + layer + ".attn.w" + w + ".weight")->value);
      }
  const std::vector<int32_t> ids = probe(c.max_seq_len, tok.size());
  CHECK(gguf_max_probability_diff(model, f, ids, GeluForm::Erf) < 1e-5);
  CHECK(gguf_max_probability_diff(model, unordered, ids, GeluForm::Erf) > 1e-3);
}

TEST_CASE("gguf export: llama and qwen3 names, shapes and metadata as llama.cpp's loaders read them",
          "[gguf]") {
  const Tokenizer tok = char_vocab();
  const int64_t V = tok.size(), C = 16, F = 24, L = 12, Dk = 4, Ckv = 2 * Dk;
  for (const bool qk_norm : {false, true}) {
    const std::string a = qk_norm ? "qwen3" : "llama";
    INFO(a);
    ModelConfig c = modern(V, qk_norm);
    c.n_kv_heads = 2;
    c.tie_embeddings = qk_norm;  // qwen3 tied: output left to token_embd
    c.rope_theta = 50000.0;
    c.norm_eps = 1e-6f;
    LanguageModel model(c, 1);
    const GgufFile f = round_trip(gguf_from_model(model, tok, {GgmlType::BF16, "tiny", "{}"}));
    REQUIRE(f.at("general.architecture").str() == a);
    REQUIRE(f.at("general.file_type").unsigned_value() == 32);  // MOSTLY_BF16
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, int64_t>>{{".context_length", L},
                                                      {".embedding_length", C},
                                                      {".block_count", 2},
                                                      {".feed_forward_length", F},
                                                      {".attention.head_count", 4},
                                                      {".attention.head_count_kv", 2},
                                                      {".attention.key_length", Dk},
                                                      {".attention.value_length", Dk},
                                                      {".rope.dimension_count", Dk},
                                                      {".vocab_size", V}}) {
      INFO(key);
      REQUIRE(f.at(a + key).type() == GgufType::UInt32);
      REQUIRE(static_cast<int64_t>(f.at(a + key).unsigned_value()) == value);
    }
    REQUIRE(f.at(a + ".attention.layer_norm_rms_epsilon").type() == GgufType::Float32);
    REQUIRE(f.at(a + ".attention.layer_norm_rms_epsilon").number() == static_cast<double>(1e-6f));
    REQUIRE(f.at(a + ".rope.freq_base").type() == GgufType::Float32);
    REQUIRE(f.at(a + ".rope.freq_base").number() == 50000.0);
    REQUIRE(f.find(a + ".attention.layer_norm_epsilon") == nullptr);

    // Every tensor llama.cpp's loader creates, and no other (it refuses a file with unused tensors).
    std::vector<std::pair<std::string, Shape>> expected = {{"token_embd.weight", {V, C}}};
    for (int l = 0; l < 2; ++l) {
      const std::string g = "blk." + std::to_string(l) + ".";
      std::vector<std::pair<std::string, Shape>> layer = {{"attn_norm.weight", {C}},
                                                          {"attn_q.weight", {C, C}},
                                                          {"attn_k.weight", {Ckv, C}},
                                                          {"attn_v.weight", {Ckv, C}}};
      if (qk_norm) {
        layer.push_back({"attn_q_norm.weight", {Dk}});
        layer.push_back({"attn_k_norm.weight", {Dk}});
      }
      for (const auto& e : std::vector<std::pair<std::string, Shape>>{{"attn_output.weight", {C, C}},
                                                                      {"ffn_norm.weight", {C}},
                                                                      {"ffn_gate.weight", {F, C}},
                                                                      {"ffn_up.weight", {F, C}},
                                                                      {"ffn_down.weight", {C, F}}})
        layer.push_back(e);
      for (const auto& e : layer) expected.emplace_back(g + e.first, e.second);
    }
    expected.push_back({"output_norm.weight", {C}});
    if (!qk_norm) expected.push_back({"output.weight", {V, C}});
    REQUIRE(f.tensors.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO(expected[i].first);
      REQUIRE(f.tensors[i].name == expected[i].first);
      REQUIRE(f.tensors[i].shape == expected[i].second);
      REQUIRE(f.tensors[i].type == (expected[i].second.size() == 2 ? GgmlType::BF16 : GgmlType::F32));
    }
    // The reference reads what llama.cpp reads, and says which key or tensor does not fit.
    GgufFile bad = f;
    bad.set(a + ".attention.head_count_kv", GgufValue::u32(3));
    REQUIRE_THROWS_WITH(gguf_reference_logits(bad, {1, 2}, GeluForm::Erf),
                        Contains("4 heads and 3 key/value heads: expected heads dividing"));
    bad = f;
    bad.set(a + ".rope.dimension_count", GgufValue::u32(2));
    REQUIRE_THROWS_WITH(gguf_reference_logits(bad, {1, 2}, GeluForm::Erf),
                        Contains(a + ".rope.dimension_count is 2, tfm's reading of llama.cpp's " + a +
                                 " takes the head width 4"));
    bad = f;
    for (GgufTensor& t : bad.tensors)
      if (t.name == "blk.0.attn_k.weight") t = gguf_tensor(t.name, Tensor::zeros({4, C}));
    REQUIRE_THROWS_WITH(
        gguf_reference_logits(bad, {1, 2}, GeluForm::Erf),
        Contains("tensor \"blk.0.attn_k.weight\" has shape [4, 16], llama.cpp's " + a + " expects [8, 16]"));
    // SwiGLU's gate is fc1 (silu applied to it), its up projection fc3.
    REQUIRE(gguf_tensor_values(f.tensor("blk.0.ffn_gate.weight")).to_vector() ==
            gguf_tensor_values(
                gguf_tensor("x", model.find_parameter("blocks.0.fc1.weight")->value, GgmlType::BF16))
                .to_vector());
    REQUIRE(gguf_tensor_values(f.tensor("blk.0.ffn_up.weight")).to_vector() ==
            gguf_tensor_values(
                gguf_tensor("x", model.find_parameter("blocks.0.fc3.weight")->value, GgmlType::BF16))
                .to_vector());
  }
}

TEST_CASE("gguf export: names, shapes, types and metadata as llama.cpp's gpt2 loader reads them", "[gguf]") {
  const Tokenizer tok = char_vocab();
  const int64_t V = tok.size(), C = 16, F = 24, L = 12;
  ModelConfig c = tiny(V);
  c.n_kv_heads = 2;
  LanguageModel model(c, 1);
  const GgufFile f = round_trip(gguf_from_model(model, tok, {GgmlType::F16, "tiny", "{}"}));
  REQUIRE(f.at("general.architecture").str() == "gpt2");
  REQUIRE(f.at("general.name").str() == "tiny");
  REQUIRE(f.at("general.file_type").unsigned_value() == 1);  // MOSTLY_F16
  REQUIRE(f.at("tfm.config").str() == "{}");
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, int64_t>>{{"gpt2.context_length", L},
                                                    {"gpt2.embedding_length", C},
                                                    {"gpt2.block_count", 2},
                                                    {"gpt2.feed_forward_length", F},
                                                    {"gpt2.attention.head_count", 4},
                                                    {"gpt2.attention.head_count_kv", 2},
                                                    {"gpt2.vocab_size", V}}) {
    INFO(key);
    REQUIRE(f.at(key).type() == GgufType::UInt32);  // llama.cpp's loader checks the type
    REQUIRE(static_cast<int64_t>(f.at(key).unsigned_value()) == value);
  }
  REQUIRE(f.at("gpt2.attention.layer_norm_epsilon").type() == GgufType::Float32);
  REQUIRE(f.at("gpt2.attention.layer_norm_epsilon").number() == static_cast<double>(1e-5f));

  // Every tensor llama.cpp's gpt2 creates, and no other (it refuses a file with unused tensors).
  std::vector<std::pair<std::string, Shape>> expected = {{"token_embd.weight", {V, C}},
                                                         {"position_embd.weight", {L, C}}};
  for (int l = 0; l < 2; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    for (const auto& e : std::vector<std::pair<std::string, Shape>>{{"attn_norm.weight", {C}},
                                                                    {"attn_norm.bias", {C}},
                                                                    {"attn_qkv.weight", {C + 2 * 8, C}},
                                                                    {"attn_qkv.bias", {C + 2 * 8}},
                                                                    {"attn_output.weight", {C, C}},
                                                                    {"attn_output.bias", {C}},
                                                                    {"ffn_norm.weight", {C}},
                                                                    {"ffn_norm.bias", {C}},
                                                                    {"ffn_up.weight", {F, C}},
                                                                    {"ffn_up.bias", {F}},
                                                                    {"ffn_down.weight", {C, F}},
                                                                    {"ffn_down.bias", {C}}})
      expected.emplace_back(g + e.first, e.second);
  }
  expected.push_back({"output_norm.weight", {C}});
  expected.push_back({"output_norm.bias", {C}});
  expected.push_back({"output.weight", {V, C}});  // tied but scaled: the head's E written apart
  REQUIRE(f.tensors.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO(expected[i].first);
    REQUIRE(f.tensors[i].name == expected[i].first);
    REQUIRE(f.tensors[i].shape == expected[i].second);
    REQUIRE(f.tensors[i].type == (expected[i].second.size() == 2 ? GgmlType::F16 : GgmlType::F32));
  }
}

TEST_CASE("gguf export: the sinusoidal model's scaled embedding and table are folded exactly", "[gguf]") {
  const Tokenizer tok = char_vocab();
  ModelConfig c = tiny(tok.size());
  c.d_model = 12;
  c.n_heads = 3;
  c.n_kv_heads = 3;
  LanguageModel model(c, 3);
  randomize(model, 4);
  const GgufFile f = gguf_from_model(model, tok);
  const std::vector<float> E = model.find_parameter("emb.weight")->value.to_vector();
  const std::vector<float> embd = gguf_tensor_values(f.tensor("token_embd.weight")).to_vector();
  const float scale = std::sqrt(12.0f);
  for (size_t i = 0; i < E.size(); ++i) REQUIRE(embd[i] == E[i] * scale);  // bit for bit, float product
  REQUIRE(gguf_tensor_values(f.tensor("output.weight")).to_vector() == E);
  // The first hidden state is exact: tfm's embed_with_positions and llama.cpp's get_rows + add agree.
  const std::vector<float> pos = gguf_tensor_values(f.tensor("position_embd.weight")).to_vector();
  REQUIRE(pos[0] == 0.0f);  // sin(0)
  REQUIRE(pos[1] == 1.0f);  // cos(0)
  REQUIRE(pos[12] == static_cast<float>(std::sin(1.0)));
}

TEST_CASE("gguf export: tokens in GPT-2's byte form, merges for multi-byte characters and BPE", "[gguf]") {
  REQUIRE(gpt2_token_text(" ") == "\xc4\xa0");   // U+0120 'Ġ'
  REQUIRE(gpt2_token_text("\n") == "\xc4\x8a");  // U+010A 'Ċ'
  REQUIRE(gpt2_token_text("a!~") == "a!~");
  REQUIRE(gpt2_token_text("\xc3\xa9") == "\xc3\x83\xc2\xa9");  // é's bytes C3 A9 -> "Ã©"
  REQUIRE(gpt2_token_text("\xad") == "\xc5\x83");              // 0xAD, the last unprintable: U+0143
  REQUIRE(gpt2_token_text("\xff") == "\xc3\xbf");              // ÿ stands for itself

  GgufFile f;
  const Tokenizer chars = char_vocab();
  add_gguf_tokenizer(f, chars);
  REQUIRE(f.at("tokenizer.ggml.model").str() == "gpt2");
  REQUIRE(f.at("tokenizer.ggml.pre").str() == "gpt-2");
  const auto& tokens = f.at("tokenizer.ggml.tokens").items();
  REQUIRE(static_cast<int64_t>(tokens.size()) == chars.size());
  REQUIRE(tokens[0].str() == "\xc4\x8a");  // '\n' sorts first
  REQUIRE(f.at("tokenizer.ggml.token_type").items().size() == tokens.size());
  REQUIRE(f.at("tokenizer.ggml.scores").items().size() == tokens.size());
  std::vector<std::string> merges;
  for (const GgufValue& m : f.at("tokenizer.ggml.merges").items()) merges.push_back(m.str());
  // é = C3 A9; — = E2 80 94: its bytes joined left to right.
  // (0x80 and 0x94 are unprintable: U+0122 'Ģ' and U+0136 'Ķ'.)
  REQUIRE(merges ==
          std::vector<std::string>{"\xc3\x83 \xc2\xa9", "\xc3\xa2 \xc4\xa2", "\xc3\xa2\xc4\xa2 \xc4\xb6"});
  REQUIRE(f.find("tokenizer.ggml.eos_token_id") == nullptr);  // llama.cpp's default 11 stands
  REQUIRE(gguf_end_of_text(chars).id == 11);

  // A multi-document corpus's separator (the last id) is the end of generation, a control token.
  GgufFile fe;
  const Tokenizer chars_eot = chars.with_end_of_text();
  add_gguf_tokenizer(fe, chars_eot);
  const int64_t sep = chars_eot.end_of_text_id();
  REQUIRE(sep == chars.size());
  REQUIRE(fe.at("tokenizer.ggml.tokens").items().size() == static_cast<size_t>(chars_eot.size()));
  REQUIRE(fe.at("tokenizer.ggml.tokens").items()[sep].str() == "<|endoftext|>");
  REQUIRE(fe.at("tokenizer.ggml.token_type").items()[sep].signed_value() == 3);
  REQUIRE(fe.at("tokenizer.ggml.eos_token_id").unsigned_value() == static_cast<uint64_t>(sep));
  REQUIRE(fe.at("tokenizer.ggml.bos_token_id").unsigned_value() == static_cast<uint64_t>(sep));
  REQUIRE(gguf_end_of_text(chars_eot).id == sep);

  GgufFile b;
  const Tokenizer bytes = Tokenizer::from_text(Tokenizer::Kind::Byte, "x", "test");
  add_gguf_tokenizer(b, bytes);
  REQUIRE(b.at("tokenizer.ggml.tokens").items().size() == 256);
  REQUIRE(b.at("tokenizer.ggml.tokens").items()[32].str() == "\xc4\xa0");
  REQUIRE(b.at("tokenizer.ggml.merges").items().empty());
  REQUIRE(b.at("tokenizer.ggml.eos_token_id").unsigned_value() == 255);

  GgufFile p;
  const Tokenizer bpe(BpeTokenizer({{'a', 'b'}, {256, 'c'}, {' ', 256}}));
  add_gguf_tokenizer(p, bpe);
  const auto& ptok = p.at("tokenizer.ggml.tokens").items();
  REQUIRE(ptok.size() == 259);
  REQUIRE(ptok[256].str() == "ab");
  REQUIRE(ptok[257].str() == "abc");
  REQUIRE(ptok[258].str() ==
          "\xc4\xa0"
          "ab");
  std::vector<std::string> pm;
  for (const GgufValue& m : p.at("tokenizer.ggml.merges").items()) pm.push_back(m.str());
  REQUIRE(pm == std::vector<std::string>{"a b", "ab c", "\xc4\xa0 ab"});
  REQUIRE(p.at("tokenizer.ggml.eos_token_id").unsigned_value() == 255);
  GgufFile pe;
  add_gguf_tokenizer(pe, bpe.with_end_of_text());
  REQUIRE(pe.at("tokenizer.ggml.eos_token_id").unsigned_value() == 259);
  REQUIRE(pe.at("tokenizer.ggml.tokens").items()[259].str() == "<|endoftext|>");

  // Two ids with the same bytes cannot both live in llama.cpp's text-keyed vocabulary.
  GgufFile d;
  const Tokenizer dup(BpeTokenizer({{'a', 'b'}, {'b', 'c'}, {256, 'c'}, {'a', 257}}));
  REQUIRE_THROWS_WITH(add_gguf_tokenizer(d, dup),
                      Contains("data.tokenizer_path: tokens 258 and 259 have the same "
                               "bytes (\"abc\")"));
}

TEST_CASE("gguf export: what llama.cpp cannot run is refused naming every key and why", "[gguf]") {
  ModelConfig c = tiny(10);
  REQUIRE_NOTHROW(check_gguf_exportable(c));
  c.norm_position = NormPosition::Post;
  c.activation = Activation::Relu;
  c.attention_score = AttentionScore::Additive;
  c.head_gating = HeadGating::TopK;
  c.head_mixing = HeadMixing::TalkingHeads;
  try {
    check_gguf_exportable(c);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    CHECK_THAT(
        m,
        Contains("model.norm_position = \"post\": llama.cpp's gpt2 graph normalises before each sub-layer"));
    CHECK_THAT(m, Contains("model.activation = \"relu\": llama.cpp's gpt2 feed-forward applies GELU"));
    CHECK_THAT(m, Contains("model.attention_score = \"additive\""));
    CHECK_THAT(m, Contains("model.head_gating = \"topk\""));
    CHECK_THAT(m, Contains("model.head_mixing = \"talking_heads\""));
  }
  ModelConfig bidirectional = tiny(10);  // masked_lm's encoder; the objective itself is refused above it
  bidirectional.causal = false;
  REQUIRE_THROWS_WITH(check_gguf_exportable(bidirectional), Contains("model.causal = false"));

  // The architecture follows from the positions: RoPE models are llama's or qwen3's, the rest gpt2's.
  REQUIRE(gguf_architecture(tiny(10)) == GgufArchitecture::Gpt2);
  REQUIRE(gguf_architecture(modern(10, false)) == GgufArchitecture::Llama);
  REQUIRE(gguf_architecture(modern(10, true)) == GgufArchitecture::Qwen3);
  ModelConfig rope_only = tiny(10);  // RoPE with LayerNorm and GELU: no architecture of llama.cpp's
  rope_only.positional_encoding = PositionalEncoding::Rope;
  try {
    check_gguf_exportable(rope_only);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    CHECK_THAT(m,
               Contains("model.norm = \"layernorm\": with model.positional_encoding = \"rope\" the model is "
                        "llama.cpp's llama") &&
                   Contains("which normalises with RMSNorm"));
    CHECK_THAT(m, Contains("model.activation = \"gelu\": with model.positional_encoding = \"rope\"") &&
                      Contains("which has a SwiGLU feed-forward"));
  }
  ModelConfig no_rope = modern(10, true);  // RMSNorm, SwiGLU and QK-norm with sinusoidal positions
  no_rope.positional_encoding = PositionalEncoding::Sinusoidal;
  try {
    check_gguf_exportable(no_rope);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("model.norm = \"rmsnorm\": llama.cpp's gpt2 graph uses LayerNorm"));
    CHECK_THAT(m, Contains("model.activation = \"swiglu\": llama.cpp's gpt2 feed-forward applies GELU"));
    CHECK_THAT(m, Contains("model.qk_norm = true: llama.cpp's gpt2 attention has no QK-norm"));
  }
  ModelConfig qwen3_bias = modern(10, true);
  qwen3_bias.bias = true;
  REQUIRE_THROWS_WITH(
      check_gguf_exportable(qwen3_bias),
      Contains("model.bias = true: llama.cpp's qwen3 (the architecture with QK-norm) has no biases"));
  ModelConfig llama_bias = modern(10, false);
  llama_bias.bias = true;
  REQUIRE_NOTHROW(check_gguf_exportable(llama_bias));  // llama.cpp's llama reads them
}
