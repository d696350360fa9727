// A trained language model and its tokenizer as a GGUF file llama.cpp runs (docs/llama_cpp.md).
// Legend: C = d_model, H heads, Hkv key/value heads, Dk = C / H, F = d_ff, L = max_seq_len,
// V vocabulary.
//
// Which llama.cpp architecture a model is follows from its positions (gguf_architecture):
//   gpt2   sinusoidal or learned positions, pre-norm LayerNorm, GELU, biases (llama.cpp src/models/gpt2.cpp)
//   llama  RoPE, RMSNorm, SwiGLU, biases or none (llama.cpp src/models/llama.cpp)
//   qwen3  the same plus QK-norm, no biases (llama.cpp src/models/qwen3.cpp)
//
// gpt2, tensor by tensor:
//   token_embd.weight            (V, C)      E, times sqrt(C) with the sinusoidal table (below)
//   position_embd.weight         (L, C)      the learned table, or the sinusoidal one
//   blk.N.attn_norm.{weight,bias}            blocks.N.ln1
//   blk.N.attn_qkv.{weight,bias} (C + 2 Hkv Dk, C)  wq, wk, wv stacked by rows (llama.cpp splits them
//                                            at C and C + Hkv Dk; GQA's query head h reads kv head
//                                            h / (H / Hkv) in both)
//   blk.N.attn_output.{weight,bias}          wo
//   blk.N.ffn_norm.{weight,bias}             blocks.N.ln2
//   blk.N.ffn_up.{weight,bias}   (F, C)      fc1
//   blk.N.ffn_down.{weight,bias} (C, F)      fc2
//   output_norm.{weight,bias}                ln_f
//   output.weight                (V, C)      head, or E itself when tied (left out when token_embd is
//                                            E unscaled: llama.cpp then reuses token_embd)
// Biases llama.cpp requires but a model.bias = false model lacks are written as zeros (exact).
// The sinusoidal model's input is fl(E[id] * fl(sqrt C)) + P[t] (layers.h: embed_with_positions); the
// file stores the product fl(E * fl(sqrt C)) as token_embd, so llama.cpp's get_rows + add computes
// the same floats, bit for bit in F32.
//
// llama and qwen3 (a RoPE model's embedding is not scaled, so a tied head is token_embd itself and
// output.weight is left out; llama.cpp loads token_embd in its place):
//   token_embd.weight            (V, C)      E
//   blk.N.attn_norm.weight       (C)         blocks.N.ln1 (RMSNorm)
//   blk.N.attn_{q,k,v}.weight    (H Dk, C), (Hkv Dk, C), (Hkv Dk, C)   wq, wk, wv (+ .bias, llama only)
//   blk.N.attn_q_norm.weight     (Dk)        qwen3: blocks.N.attn.q_norm (RMSNorm per head, before RoPE)
//   blk.N.attn_k_norm.weight     (Dk)        qwen3: blocks.N.attn.k_norm
//   blk.N.attn_output.weight     (C, H Dk)   wo (+ .bias, llama only)
//   blk.N.ffn_norm.weight        (C)         blocks.N.ln2
//   blk.N.ffn_gate.weight        (F, C)      fc1: SwiGLU's gate, silu(x W1^T) (Shazeer 2020)
//   blk.N.ffn_up.weight          (F, C)      fc3: its up projection
//   blk.N.ffn_down.weight        (C, F)      fc2 (+ .bias each, llama only)
//   output_norm.weight           (C)         ln_f
//   output.weight                (V, C)      head (untied only)
// RoPE (RoFormer, Su et al. 2021) in tfm turns each head's adjacent dims (2i, 2i + 1) by p * theta^(-2i/Dk)
// over the whole head (ops.h: rope). llama's rope type is LLAMA_ROPE_TYPE_NORM, the same pairs and
// angles (ggml-cpu/ops.cpp: rotate_pairs), so its rows go as they are. qwen3's is
// LLAMA_ROPE_TYPE_NEOX, pairs (i, i + Dk/2) with the same angles: the export moves row 2i of each
// query and key head to i and row 2i + 1 to i + Dk/2 (the QK-norm gains with them). Queries and keys
// are then permuted alike, so every dot product, and the attention, is unchanged.

#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/data/gpt2_tokenizer.h"  // gpt2_token_text: the form llama.cpp keeps tokens in
#include "tfm/data/tokenizer.h"
#include "tfm/engine/gguf.h"
#include "tfm/models/language_model.h"

namespace tfm {

struct GgufExportOptions {
  // Type of the matrices and embeddings; 1-D tensors (norms, biases) stay F32, as llama.cpp's
  // converters keep them (llama.h: "MOSTLY_F16 ... except 1d tensors").
  GgmlType dtype = GgmlType::F32;
  std::string name;         // general.name
  std::string config_json;  // kept as tfm.config (provenance; llama.cpp ignores it)
};

enum class GgufArchitecture { Gpt2, Llama, Qwen3 };
const char* gguf_architecture_name(GgufArchitecture arch);  // general.architecture: "gpt2", "llama", "qwen3"

// What an architecture expresses of one model.* key of the key table (config_keys()): an allow-list.
// `allowed` holds the values its graph runs, spelled as the key table spells them ("rmsnorm", true),
// and `value` reads the config's; an empty `allowed` takes every value (a size or rate the file
// carries, or a key that changes nothing the file holds, as dropout), and `note` says where it goes.
// Any other value is refused as "KEY = VALUE: note". Every model.* key has a rule (a test walks the
// key table), so a new key is refused by name until the export expresses it.
struct GgufKeyRule {
  std::string key;                                          // "model.norm"
  std::vector<nlohmann::json> allowed;                      // {"layernorm"}; empty: every value
  std::function<nlohmann::json(const ModelConfig&)> value;  // null when every value is allowed
  std::string note;                                         // why only those, or where the value goes
};
const std::vector<GgufKeyRule>& gguf_key_rules(GgufArchitecture arch);

// The llama.cpp architecture that runs the model exactly, or ConfigError naming every config key whose
// value llama.cpp cannot run, and why. The model only: whether a run's objective exports at all is the
// objective's answer (Objective::gguf_architecture).
GgufArchitecture gguf_architecture(const ModelConfig& config);
void check_gguf_exportable(const ModelConfig& config);  // the same, no result

// The model and tokenizer as a GGUF file of its architecture (after gguf_architecture).
GgufFile gguf_from_model(const LanguageModel& model, const Tokenizer& tokenizer,
                         const GgufExportOptions& options = {});

// The tokenizer keys of llama.cpp's gpt2 BPE tokenizer (tokenizer.ggml.*), so that llama.cpp's
// tokenize gives tfm's ids:
//   bpe   the token bytes in GPT-2's form and the merges ("left right"), rank = tfm's merge order;
//         pre-tokenizer "gpt-2", whose split is tfm's pretokenize on ASCII text (bpe.h)
//   byte  the 256 byte tokens, no merges: text encodes to its bytes, as tfm's
//   char  the characters in GPT-2's form; a multi-byte UTF-8 character gets the merges that join its
//         bytes (they never cross characters: every left side starts with a lead byte, every right
//         side is a continuation byte), so text of the vocabulary's characters encodes to tfm's ids
// Token types are normal (1), specials and the document separator control (3); scores are 0 (llama.cpp's
// BPE does not use them).
// ConfigError when two tokens have the same bytes (llama.cpp looks tokens up by text).
void add_gguf_tokenizer(GgufFile& file, const Tokenizer& tokenizer);

// llama.cpp's end-of-generation token for the exported vocabulary and how it was chosen, for the
// export's report: the document separator of a multi-document corpus (Tokenizer::end_of_text_id, a control
// token "<|endoftext|>"; a gpt2 vocabulary's own); without one, byte and BPE vocabularies end at byte 0xFF
// (never part of UTF-8 text) and a char vocabulary has no free id, so llama.cpp's default for gpt2
// tokenizers, id 11, stands.
struct GgufEndOfText {
  int64_t id = -1;
  std::string note;
};
GgufEndOfText gguf_end_of_text(const Tokenizer& tokenizer);

}  // namespace tfm
