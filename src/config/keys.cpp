// The config key table: every key a config may hold, in documentation order, with its type, default,
// allowed values, the rule of a derived default, and what it means. config.cpp validates, resolves and
// documents configs from it; the model.* rows are bound to their ModelConfig members (nn/model_config.h)
// and the train.* rows to their TrainConfig members (config/train_config.h), which hold the defaults and
// allowed values.
#include <array>
#include <charconv>
#include <functional>
#include <type_traits>
#include <utility>

#include "table.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"

namespace tfm {
using nlohmann::json;

namespace {

int64_t integer(const json& tree, const char* path) {
  return lookup(tree, path)->get<int64_t>();
}
double number(const json& tree, const char* path) {
  return lookup(tree, path)->get<double>();
}
std::string text(const json& tree, const char* path) {
  const json& v = *lookup(tree, path);
  // data.path's list: its JSON text, as Config::string reads it
  return v.is_array() ? v.dump() : v.get<std::string>();
}
bool seq2seq(const json& tree) {
  return *enum_from<ObjectiveKind>(text(tree, "train.objective")) == ObjectiveKind::Seq2Seq;
}

// A float default as the shortest decimal that reads back as the same float (0.01f is "0.01", not
// 0.009999999776), so the table and resolved configs show what the struct says.
json float_json(float v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return json(std::stod(std::string(buf, end)));
}

// How a value of each member type goes into a row and out of it: the key's type, its allowed values,
// and the conversions between the member and its JSON.
template <class V, class = void>
struct Codec;
template <>
struct Codec<int64_t> {
  static constexpr KeyType type = KeyType::Integer;
  static json put(int64_t v) { return v; }
  static int64_t take(const json& v) { return v.get<int64_t>(); }
};
template <>
struct Codec<float> {
  static constexpr KeyType type = KeyType::Number;
  static json put(float v) { return float_json(v); }
  static float take(const json& v) { return static_cast<float>(v.get<double>()); }
};
template <>
struct Codec<double> {
  static constexpr KeyType type = KeyType::Number;
  static json put(double v) { return v; }
  static double take(const json& v) { return v.get<double>(); }
};
template <>
struct Codec<bool> {
  static constexpr KeyType type = KeyType::Boolean;
  static json put(bool v) { return v; }
  static bool take(const json& v) { return v.get<bool>(); }
};
template <>
struct Codec<std::array<double, 2>> {
  static constexpr KeyType type = KeyType::NumberPair;
  static json put(const std::array<double, 2>& v) { return json::array({v[0], v[1]}); }
  static std::array<double, 2> take(const json& v) { return {v[0].get<double>(), v[1].get<double>()}; }
};
template <>
struct Codec<std::string> {  // a list_as_text key's list reads as its JSON text (Config::string)
  static constexpr KeyType type = KeyType::String;
  static json put(const std::string& v) { return v; }
  static std::string take(const json& v) { return v.is_array() ? v.dump() : v.get<std::string>(); }
};
template <class V>  // a key whose null means "unset" (data.tokenizer_path, data.document_separator)
struct Codec<std::optional<V>> {
  static constexpr KeyType type = Codec<V>::type;
  static json put(const std::optional<V>& v) { return v ? Codec<V>::put(*v) : json(); }
  static std::optional<V> take(const json& v) {
    return v.is_null() ? std::nullopt : std::optional<V>(Codec<V>::take(v));
  }
};
template <class E>  // an option enum, spelled by its enum_names
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr KeyType type = KeyType::String;
  static json put(E v) { return name_of(v); }
  static E take(const json& v) { return *enum_from<E>(v.get<std::string>()); }
};

// Binds a row to the member of an option struct S that `member(s)` refers to: the row's type, default
// (the member's in a default S), allowed values (an enum's names) and how a value goes into an S and
// comes out of one.
template <class S, class Member>
void bind(KeySpec& s, Member member) {
  using V = std::remove_cv_t<std::remove_reference_t<decltype(member(std::declval<S&>()))>>;
  using C = Codec<V>;
  s.type = C::type;
  const S defaults{};
  s.default_value = C::put(member(defaults));
  if constexpr (std::is_enum_v<V>) s.choices = enum_names<V>();
  s.binding<S>().set = [member](S& o, const json& v) { member(o) = C::take(v); };
  s.binding<S>().get = [member](const S& o) { return C::put(member(o)); };
}

// A fluent builder so that each row of the table reads as one line.
struct Key {
  KeySpec s;
  Key(const char* path, KeyType type, json default_value, const char* meaning) {
    s.path = path;
    s.type = type;
    s.default_value = std::move(default_value);
    s.meaning = meaning;
  }
  // A key bound to a member of its option struct: model.* to ModelConfig's, train.* to TrainConfig's,
  // data.* to DataConfig's.
  template <class S, class V>
  Key(const char* path, V S::*member, const char* meaning) {
    s.path = path;
    s.meaning = meaning;
    bind<S>(
        s, [member](auto& o) -> auto& { return o.*member; });
  }
  // ... to a member of one of its sub-structs (train.optimizer.lr: TrainConfig::optimizer's lr).
  template <class S, class Sub, class V>
  Key(const char* path, Sub S::*sub, V Sub::*member, const char* meaning) {
    s.path = path;
    s.meaning = meaning;
    bind<S>(
        s, [ sub, member ](auto& o) -> auto& { return (o.*sub).*member; });
  }
  Key& min(double v, bool open = false) {
    s.min = v, s.has_min = true, s.min_open = open;
    return *this;
  }
  Key& max(double v, bool open = false) {
    s.max = v, s.has_max = true, s.max_open = open;
    return *this;
  }
  Key& or_list() {
    s.list_as_text = true;
    return *this;
  }
  Key& one_of(std::vector<std::string> c) {
    s.choices = std::move(c);
    return *this;
  }
  // No fixed default: `rule` derives the value from the other keys of the tree ("how" says it in words).
  Key& derived(const char* how, std::function<json(const json& tree)> rule) {
    s.default_value = nullptr;
    s.derived = how;
    s.rule = std::move(rule);
    return *this;
  }
  // A model.* key whose member's default 0 means "derived": the value resolved() gives it
  // (nn/model_config.h holds the rule; "how" says it in words).
  Key& derived_in_model(const char* how) {
    // The member's own value in the tree is set aside: the rule says what it would be by default.
    s.rule = [get = s.model.get, set = s.model.set, unset = s.default_value](const json& tree) {
      ModelConfig m = from_tree<ModelConfig>(tree);
      set(m, unset);
      return get(resolved(m));
    };
    s.default_value = nullptr;
    s.derived = how;
    return *this;
  }
  Key& resumable() {
    s.resumable = true;
    return *this;
  }
  Key& weights_agnostic() {
    s.weights_agnostic = true;
    return *this;
  }
  Key& only_for(std::vector<ObjectiveKind> objectives) {
    s.objectives = std::move(objectives);
    return *this;
  }
  // Read only while the string key `key` holds one of `values` (Muon's keys under train.optimizer.name
  // "muon"): set to anything but its default otherwise, it would be ignored, and is refused.
  template <class E>
  Key& only_with(const char* key, std::vector<E> values) {
    s.only_with_key = key;
    for (const E v : values) s.only_with_values.push_back(name_of(v));
    return *this;
  }
  // Read only with those values too, but a value set under another is warned about, not refused.
  template <class E>
  Key& read_with(const char* key, std::vector<E> values) {
    s.only_with_warns = true;
    return only_with(key, std::move(values));
  }
  // Read only when `because(tree)` is "" (`when`, in words); a value set otherwise is warned about, naming
  // what `because` returns (KeySpec::unread_because).
  Key& read_when(const char* when, std::function<std::string(const json& tree)> because) {
    s.read_when = when;
    s.unread_because = std::move(because);
    return *this;
  }
  // The same for a key whose values are strings of its own (data.tokenizer's).
  Key& read_with(const char* key, std::vector<std::string> values) {
    s.only_with_warns = true;
    s.only_with_key = key;
    s.only_with_values = std::move(values);
    return *this;
  }
};

using T = KeyType;
const std::vector<ObjectiveKind> kLanguageModels = {ObjectiveKind::CausalLm, ObjectiveKind::MaskedLm};
const std::vector<ObjectiveKind> kSeq2Seq = {ObjectiveKind::Seq2Seq};

}  // namespace

std::vector<KeySpec> build_table() {
  std::vector<Key> k = {
      Key("seed", T::Integer, 1337, "Seed of initialisation, dropout and batch sampling.").min(0),
      Key("data.path", &DataConfig::path,
          "Training text (or sentence pairs for seq2seq); a relative path is taken from the working "
          "directory, and a run records it absolute (so do data.tokenizer_path and data.cache_dir), so that "
          "its eval, sample and resume find the files from anywhere. Text: a file, a directory (walked "
          "recursively, sorted, hidden entries skipped), a glob "
          "(`data/*.txt`) or a list of these (`[\"a\", \"b/*.jsonl.gz\"]`, or that list's JSON text as "
          "a string); a directory's files `.txt`, `.text` (one document) and `.jsonl` (one document per "
          "record), either optionally `.gz` or `.zst`, in any case (a walk says what other names, Markdown's "
          "included, it left out); a file named alone, in a list or by a glob is read whatever its name.")
          .or_list(),
      Key("data.format", &DataConfig::format,
          "`text`: one UTF-8 text (causal_lm, masked_lm); `pairs`: `source<TAB>target[<TAB>...]` lines "
          "(seq2seq).")
          .derived("\"pairs\" for seq2seq, else \"text\"",
                   [](const json& t) { return json(seq2seq(t) ? "pairs" : "text"); }),
      Key("data.tokenizer", &DataConfig::tokenizer,
          "`char`: Unicode code points of the UTF-8 file, vocabulary = its sorted distinct characters; "
          "`byte`: the 256 byte values; `bpe`: byte-level BPE from data.tokenizer_path; `word` (seq2seq): "
          "lowercased words with punctuation split off, rarer than data.min_freq -> `<unk>`; `gpt2`: GPT-2's "
          "tokenizer exactly (50,257 ids, `<|endoftext|>` = 50256, shipped with tfm), or another byte-level "
          "BPE from data.tokenizer_path."),
      Key("data.tokenizer_path", &DataConfig::tokenizer_path,
          "data.tokenizer = `bpe`: the file of `tfm tokenizer train`; `gpt2`: a byte-level BPE's "
          "encoder.json + vocab.bpe, vocab.json + merges.txt or Hugging Face tokenizer.json (a directory "
          "holding them, or one of the files), GPT-2's own when unset. The checkpoint keeps a copy.")
          .derived("null (bpe needs one; gpt2 without one is GPT-2's)", [](const json&) { return json(); })
          .read_with("data.tokenizer",
                     std::vector<Tokenizer::Kind>{Tokenizer::Kind::Bpe, Tokenizer::Kind::Gpt2}),
      Key("data.cache_dir", &DataConfig::cache_dir,
          "Where a text corpus's token cache lives (tokenized once, memory-mapped by every later train, "
          "resume, eval, sample, heads and sweep point; rebuilt when the file or tokenizer changes). Beside "
          "the "
          "data by default, so every run of the file shares it and it goes with the data.")
          .derived("\".tfm-cache\" in data.path's directory (inside it for a folder)",
                   [](const json& t) { return json(default_cache_dir(text(t, "data.path"))); })
          .resumable()
          .only_for(kLanguageModels),
      Key("data.val_fraction", &DataConfig::val_fraction,
          "The first floor(N * (1 - f)) tokens train, the rest validate; a corpus of D >= 2 documents "
          "splits whole documents: the first floor(D * (1 - f)) in corpus order train (pairs: the last f "
          "of the pairs after a shuffle by the seed).")
          .min(0, true)
          .max(1, true),
      Key("data.text_field", &DataConfig::text_field,
          "JSON Lines corpora: the field of each record that holds its text.")
          .only_for(kLanguageModels),
      Key("data.document_separator", &DataConfig::document_separator,
          "Join the corpus's documents with a reserved end-of-text token (the vocabulary's last id, never "
          "produced by encoding text; docs/data.md); false concatenates them.")
          .derived("true when the corpus has more than one document (resolved from the data)",
                   [](const json&) { return json(); })
          .only_for(kLanguageModels),
      Key("data.on_bad_record", &DataConfig::on_bad_record,
          "A JSON Lines line that is not JSON, lacks data.text_field or holds a non-string there: `error` "
          "stops with FILE:LINE; `skip` skips it and logs the count and the first few.")
          .only_for(kLanguageModels),
      Key("data.max_pairs", &DataConfig::max_pairs, "Read only the first N pairs of the file (0 = all).")
          .min(0)
          .only_for(kSeq2Seq),
      Key("data.min_freq", &DataConfig::min_freq,
          "Word tokenizer: a word seen fewer times in the training pairs becomes `<unk>`.")
          .min(1)
          .only_for(kSeq2Seq),
      Key("data.max_source_len", &DataConfig::max_source_len,
          "Source tokens kept per sentence (then `<eos>`).")
          .derived("model.max_seq_len - 1",
                   [](const json& t) { return json(integer(t, "model.max_seq_len") - 1); })
          .min(1)
          .only_for(kSeq2Seq),
      Key("data.max_target_len", &DataConfig::max_target_len,
          "Target tokens kept per sentence (then `<eos>`).")
          .derived("model.max_seq_len - 1",
                   [](const json& t) { return json(integer(t, "model.max_seq_len") - 1); })
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.d_model", &ModelConfig::d_model, "C: width of the residual stream.").min(1),
      Key("model.n_layers", &ModelConfig::n_layers, "Number of Transformer blocks.").min(1),
      Key("model.n_encoder_layers", &ModelConfig::n_encoder_layers, "seq2seq: encoder blocks.")
          .derived_in_model("model.n_layers")
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.n_decoder_layers", &ModelConfig::n_decoder_layers,
          "seq2seq: decoder blocks (self-attention, cross-attention, feed-forward).")
          .derived_in_model("model.n_layers")
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.n_heads", &ModelConfig::n_heads, "H: attention (query) heads; must divide d_model.").min(1),
      Key("model.n_kv_heads", &ModelConfig::n_kv_heads,
          "Key/value heads; must divide n_heads (fewer: grouped-query attention, 1: multi-query).")
          .derived_in_model("model.n_heads")
          .min(1),
      Key("model.d_ff", &ModelConfig::d_ff, "Hidden width of the feed-forward network.")
          .derived_in_model("4 * model.d_model")
          .min(1),
      Key("model.max_seq_len", &ModelConfig::max_seq_len,
          "Longest context (size of the position table). A fixed table (sinusoidal, RoPE's) and sampling's "
          "KV cache are built only as far as the positions used (train.seq_len in training), so a long "
          "context costs nothing until used. A learned table from `--init-from` is cut to it, or keeps "
          "its fresh rows past the file's positions (the log says so).")
          .min(1)
          .weights_agnostic(),  // --init-from copies the positions a learned table of either length has
      Key("model.dropout", &ModelConfig::dropout, "Dropout on embeddings and residual branches.")
          .min(0)
          .max(1, true)
          .weights_agnostic(),
      Key("model.attention_dropout", &ModelConfig::attention_dropout,
          "Dropout on the attention probabilities.")
          .min(0)
          .max(1, true)
          .weights_agnostic(),
      Key("model.activation", &ModelConfig::activation,
          "Feed-forward activation: GELU (the exact erf form), ReLU, or SwiGLU (fc2(silu(fc1 x) * fc3 x): a "
          "third "
          "d_ff x d_model matrix, so set d_ff to about 8/3 d_model for the same parameters)."),
      Key("model.norm", &ModelConfig::norm,
          "Every norm of the model: LayerNorm, or RMSNorm (x / rms(x) * gain: no mean, no bias)."),
      Key("model.norm_eps", &ModelConfig::norm_eps, "Epsilon of every norm (QK-norm's too).").min(0, true),
      Key("model.norm_position", &ModelConfig::norm_position,
          "The norm before (pre) or after (post) each residual add."),
      Key("model.positional_encoding", &ModelConfig::positional_encoding,
          "Fixed sinusoidal table, learned positions, or `rope`: no table, every self-attention turns its "
          "queries and keys by their positions (rotary, Su et al. 2021; pairs of adjacent dims as "
          "llama.cpp)."),
      Key("model.rope_theta", &ModelConfig::rope_theta,
          "rope: the base of the rotation frequencies (pair i of a head turns by position * theta^(-2i/head "
          "width)).")
          .min(0, true)
          .read_with("model.positional_encoding", std::vector{PositionalEncoding::Rope}),
      Key("model.qk_norm", &ModelConfig::qk_norm,
          "RMSNorm of each head's queries and keys (before RoPE), one gain per head width for each, shared "
          "by "
          "the heads: keeps the attention logits in range at higher learning rates."),
      Key("model.causal", &ModelConfig::causal,
          "Mask future positions in attention: true for causal_lm, false for masked_lm (seq2seq's decoder is "
          "always causal, its encoder never).")
          .only_for(kLanguageModels),
      Key("model.tie_embeddings", &ModelConfig::tie_embeddings,
          "Output projection shares the token embedding."),
      Key("model.bias", &ModelConfig::bias, "Biases in the attention and feed-forward projections."),
      Key("model.attention_score", &ModelConfig::attention_score,
          "Scaled dot-product or additive (Bahdanau) scores."),
      Key("model.head_gating", &ModelConfig::head_gating,
          "`topk`: a learned gate picks model.head_topk heads per token and weights them by the softmax of "
          "their gate logits (Mixture of Attention heads); the other heads' attention is not computed."),
      Key("model.head_topk", &ModelConfig::head_topk,
          "topk gating: heads each token uses (at most model.n_heads).")
          .min(1)
          .read_with("model.head_gating", std::vector{HeadGating::TopK}),
      Key("model.head_balance_loss", &ModelConfig::head_balance_loss,
          "topk gating: weight of the load-balancing loss that keeps the gate from collapsing onto few "
          "heads.")
          .min(0)
          .weights_agnostic()
          .read_with("model.head_gating", std::vector{HeadGating::TopK}),
      Key("model.head_mixing", &ModelConfig::head_mixing,
          "Cross-head interaction: `talking_heads` mixes the heads' attention logits and probabilities with "
          "learned H x H matrices; `group_mlp` mixes them inside model.head_groups groups and replaces the "
          "output projection by a two-layer GELU MLP."),
      Key("model.head_groups", &ModelConfig::head_groups,
          "group_mlp: groups of heads (must divide model.n_heads).")
          .min(1)
          .read_with("model.head_mixing", std::vector{HeadMixing::GroupMlp}),
      Key("model.zero_init", &ModelConfig::zero_init,
          "The residual branches' output projections (attention wo, feed-forward fc2) and the output head "
          "start at zero, so every block starts as the identity (needs model.tie_embeddings = false).")
          .only_for(kLanguageModels)
          .weights_agnostic(),
      Key("model.logit_softcap", &ModelConfig::logit_softcap,
          "c > 0: logits = c tanh(logits / c), every logit within (-c, c) (Gemma 2; modded-nanogpt uses 15 "
          "to 30); 0 = off.")
          .min(0)
          .only_for(kLanguageModels),
      Key("model.x0_skip", &ModelConfig::x0_skip,
          "Each block's input becomes a x + b x0, x0 the embedding output, with learned scalars (a, b) per "
          "block starting at (1, 0).")
          .only_for(kLanguageModels),
      Key("model.value_residual", &ModelConfig::value_residual,
          "Value residual learning (Zhou et al. 2024): every layer after the first attends to lambda V + (1 "
          "- lambda) V_1, V_1 the first layer's values, a learned lambda per layer starting at 0.5.")
          .only_for(kLanguageModels),
      Key("model.bigram_buckets", &ModelConfig::bigram_buckets,
          "N > 0: a zero-initialised table of N bigram embeddings; each token after the first of a sequence "
          "adds row (previous * V + token) mod N to its embedding (exact, no two pairs sharing a row, when "
          "N >= V^2: 4225 for tiny Shakespeare's 65 characters); 0 = off.")
          .min(0)
          .only_for(kLanguageModels),
      Key("model.mtp_heads", &ModelConfig::mtp_heads,
          "K > 0: multi-token prediction (Gloeckle et al. 2024) as an auxiliary training loss: K extra heads "
          "predict tokens t+2 .. t+1+K from the last block's output, each a pre-norm residual linear branch "
          "(mtp.k.norm, mtp.k.proj, C x C) before the shared final norm and output head; training only "
          "(sampling, evaluation and the GGUF export use the next-token head); 0 = off.")
          .min(0)
          .only_for({ObjectiveKind::CausalLm}),
      Key("train.objective", &TrainConfig::objective,
          "`causal_lm`: next-token prediction (decoder-only); `masked_lm`: BERT's masked tokens "
          "(encoder-only); `seq2seq`: an encoder-decoder over sentence pairs (translation)."),
      Key("train.mask_prob", &TrainConfig::mask_prob,
          "masked_lm: each position is chosen with this probability (then [MASK] 80%, random 10%, kept 10%).")
          .min(0, true)
          .max(1, true)
          .only_for({ObjectiveKind::MaskedLm}),
      Key("train.batch_size", &TrainConfig::batch_size, "B: sequences per micro-batch.").min(1),
      Key("train.seq_len", &TrainConfig::seq_len,
          "T: tokens per training sequence; at most model.max_seq_len.")
          .derived("model.max_seq_len", [](const json& t) { return *lookup(t, "model.max_seq_len"); })
          .min(1)
          .only_for(kLanguageModels),
      Key("train.grad_accum_steps", &TrainConfig::grad_accum_steps,
          "Micro-batches per optimizer step; the update equals one batch of B * grad_accum_steps (each "
          "micro-batch weighted by the target tokens it counts: seq2seq's real ones, masked_lm's masked "
          "ones).")
          .min(1),
      Key("train.max_steps", &TrainConfig::max_steps,
          "Optimizer steps; the cosine and wsd schedules end here.")
          .min(1)
          .resumable(),
      Key("train.grad_clip", &TrainConfig::grad_clip, "Clip the global gradient norm to this (0 = off).")
          .min(0),
      Key("train.skip_nonfinite", &TrainConfig::skip_nonfinite,
          "On a NaN/Inf loss or gradient skip the batch (no update, a warning) instead of stopping; "
          "still stops after 100 in a row.")
          .resumable(),
      Key("train.mtp_weight", &TrainConfig::mtp_weight,
          "model.mtp_heads > 0: weight of the extra heads' loss (the mean over the heads of each one's mean "
          "cross-entropy over the positions that have its target) at step 0, decaying linearly to 0 at "
          "train.max_steps; the logged train loss and every val loss stay the next-token loss, the extra "
          "heads' loss is logged apart (train_mtp_loss).")
          .min(0)
          .only_for({ObjectiveKind::CausalLm}),
      Key("train.optimizer.name", &TrainConfig::optimizer, &OptimizerConfig::name,
          "`adamw` (decoupled weight decay on matrices only), `sgd` (momentum, L2 decay on matrices) or "
          "`muon` (Muon on the blocks' weight matrices, AdamW with the keys below on everything else; "
          "docs/architecture.md, \"Modern options\")."),
      Key("train.optimizer.lr", &TrainConfig::optimizer, &OptimizerConfig::lr, "Peak learning rate.")
          .min(0, true),
      Key("train.optimizer.betas", &TrainConfig::optimizer, &OptimizerConfig::betas,
          "AdamW's [beta1, beta2].")
          .min(0)
          .max(1, true)
          .read_with("train.optimizer.name", std::vector{OptimizerKind::AdamW, OptimizerKind::Muon}),
      Key("train.optimizer.weight_decay", &TrainConfig::optimizer, &OptimizerConfig::weight_decay,
          "Weight decay of rank >= 2 tensors.")
          .min(0),
      Key("train.optimizer.momentum", &TrainConfig::optimizer, &OptimizerConfig::momentum, "SGD momentum.")
          .min(0)
          .max(1, true)
          .read_with("train.optimizer.name", std::vector{OptimizerKind::Sgd}),
      Key("train.optimizer.muon_lr", &TrainConfig::optimizer, &OptimizerConfig::muon_lr,
          "Muon's peak learning rate (the schedule scales it by the same factor as train.optimizer.lr).")
          .min(0, true)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_momentum", &TrainConfig::optimizer, &OptimizerConfig::muon_momentum,
          "Muon's (Nesterov) momentum.")
          .min(0)
          .max(1, true)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_weight_decay", &TrainConfig::optimizer, &OptimizerConfig::muon_weight_decay,
          "Muon's decoupled weight decay: W *= 1 - lr_muon * muon_weight_decay.")
          .min(0)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_cautious_weight_decay", &TrainConfig::optimizer,
          &OptimizerConfig::muon_cautious_weight_decay,
          "Cautious weight decay (Chen et al. 2025): Muon's decay (muon_weight_decay, scheduled with the lr) "
          "only on the entries whose update and weight have the same sign, i.e. where the step already "
          "moves the weight towards 0.")
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_momentum_warmup_steps", &TrainConfig::optimizer,
          &OptimizerConfig::muon_momentum_warmup_steps,
          "Muon's momentum rises linearly from muon_momentum_min to muon_momentum over these first steps "
          "(0 = off: muon_momentum throughout).")
          .min(0)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_momentum_cooldown_steps", &TrainConfig::optimizer,
          &OptimizerConfig::muon_momentum_cooldown_steps,
          "Muon's momentum falls linearly back to muon_momentum_min over the last these many of "
          "train.max_steps (0 = off).")
          .min(0)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon}),
      Key("train.optimizer.muon_momentum_min", &TrainConfig::optimizer, &OptimizerConfig::muon_momentum_min,
          "Muon's momentum at the start of its warmup and the end of its cooldown; at most muon_momentum "
          "(modded-nanogpt's rises from 0.85 to 0.95).")
          .min(0)
          .max(1, true)
          .only_with("train.optimizer.name", std::vector{OptimizerKind::Muon})
          .read_when(
              "train.optimizer.muon_momentum_warmup_steps or muon_momentum_cooldown_steps > 0",
              [](const json& t) {
                if (integer(t, "train.optimizer.muon_momentum_warmup_steps") > 0 ||
                    integer(t, "train.optimizer.muon_momentum_cooldown_steps") > 0)
                  return std::string();
                return "this config has 0 for both: Muon's momentum stays train.optimizer.muon_momentum = " +
                       lookup(t, "train.optimizer.muon_momentum")->dump();
              }),
      Key("train.lr_schedule.name", &TrainConfig::lr_schedule, &LrScheduleConfig::name,
          "`cosine` (warmup, then cosine to min_lr at max_steps), `constant` (after warmup), "
          "`inverse_sqrt` (warmup, then lr * sqrt(warmup / (step + 1)), the original Transformer's), `wsd` "
          "(warmup-stable-decay: warmup, lr, then linear to min_lr over the last decay_fraction of "
          "max_steps)."),
      Key("train.lr_schedule.warmup_steps", &TrainConfig::lr_schedule, &LrScheduleConfig::warmup_steps,
          "Linear warmup: lr * (step + 1) / warmup_steps.")
          .min(0),
      Key("train.lr_schedule.decay_fraction", &TrainConfig::lr_schedule, &LrScheduleConfig::decay_fraction,
          "wsd: the last floor(decay_fraction * max_steps) steps decay linearly to min_lr.")
          .min(0)
          .max(1)
          .only_with("train.lr_schedule.name", std::vector{ScheduleKind::Wsd}),
      Key("train.lr_schedule.min_lr", &TrainConfig::lr_schedule, &LrScheduleConfig::min_lr,
          "Final learning rate of the cosine and wsd schedules.")
          .derived("train.optimizer.lr / 10",
                   [](const json& t) { return json(number(t, "train.optimizer.lr") / 10.0); })
          .min(0)
          .read_with("train.lr_schedule.name", std::vector{ScheduleKind::Cosine, ScheduleKind::Wsd}),
      Key("train.ema_decay", &TrainConfig::optimizer, &OptimizerConfig::ema_decay,
          "An exponential moving average of the weights, E = d E + (1 - d) W after every step from E = W "
          "at the start (0 = off): evaluations, best.ckpt (its model) and target_loss use E while the raw "
          "weights keep training; checkpoints keep E (last.ckpt's model is the raw weights).")
          .min(0)
          .max(1, true),
      Key("train.eval_interval", &TrainConfig::eval_interval,
          "Evaluate (and keep best.ckpt) every this many steps and at the end.")
          .min(1)
          .resumable(),
      Key("train.eval_steps", &TrainConfig::eval_steps,
          "Validation batches per evaluation, drawn at random from a fixed seed; 0 = the whole validation "
          "split once, every token scored exactly once (text: non-overlapping windows of train.seq_len, "
          "the tail a shorter window; seq2seq: every pair): no sampling noise, the same value at every "
          "call.")
          .min(0)
          .resumable(),
      Key("train.target_loss", &TrainConfig::target_loss,
          "Time to quality: stop at the first evaluation whose val loss is at most this (best.ckpt holds "
          "that "
          "model), and report the wall time it took, evaluations included (0 = off: train to max_steps).")
          .min(0)
          .resumable(),
      Key("train.max_seconds", &TrainConfig::max_seconds,
          "Time budget of the training loop (its steps, evaluations and checkpoints: the clock of "
          "target_loss; not the set-up before the first step, reading the data and building the model): "
          "the run stops, evaluates and saves after the step past which one more step and the closing "
          "evaluation, at the speed measured so far, would end beyond this many seconds, so the closing "
          "evaluation falls within it (0 = off). The clock counts every process of the run: a resume with "
          "the budget spent, or stopped by it, has nothing to do until a --set raises it. The "
          "learning-rate schedule still runs over max_steps: fit max_steps to the budget to finish its "
          "decay.")
          .min(0)
          .resumable(),
      Key("train.log_interval", &TrainConfig::log_interval,
          "Log a line and a metrics.jsonl record every this many steps.")
          .min(1)
          .resumable(),
      Key("train.checkpoint_interval", &TrainConfig::checkpoint_interval,
          "Write last.ckpt every this many steps (0 = only at the end or when interrupted).")
          .min(0)
          .resumable(),
      Key("train.threads", &TrainConfig::threads,
          "CPU threads for OpenBLAS and OpenMP (0 = all cores; under mpirun, each rank's share of its "
          "machine's cores).")
          .min(0)
          .max(1024)
          .resumable(),
      Key("train.data_parallel", &TrainConfig::data_parallel,
          "Workers that each take a share of the micro-batch's rows through the whole forward and backward "
          "with one-thread kernels, their gradients summed at the end (data parallelism inside the process): "
          "1 = off (every kernel uses all train.threads), 0 = one per thread, N = N. Fewer OpenMP "
          "fork/joins: "
          "faster for small models on few cores; each extra worker holds a gradient buffer. At most "
          "train.batch_size.")
          .derived(
              "0 when a micro-batch's feed-forward product (tokens x model.d_model x model.d_ff) is under "
              "2^30 multiply-adds, else 1",
              // Small products (the shipped small configs: ~5e7 multiply-adds in fc1) spend much of a
              // step in OpenMP fork/joins, and one worker per thread runs 0.71-0.90x the time; the large
              // model gains 2-7% at 6e8-1.2e9, nothing at 2.4e9, 2% at its config's 1e10 for a fifth
              // more memory (README, "Scale out").
              [](const json& t) {
                const bool pairs = seq2seq(t);
                const double tokens = static_cast<double>(integer(t, "train.batch_size")) *
                                      static_cast<double>(pairs ? integer(t, "data.max_source_len") +
                                                                      integer(t, "data.max_target_len") + 2
                                                                : integer(t, "train.seq_len"));
                const double macs = tokens * static_cast<double>(integer(t, "model.d_model")) *
                                    static_cast<double>(integer(t, "model.d_ff"));
                return json(macs < static_cast<double>(int64_t{1} << 30) ? 0 : 1);
              })
          .min(0)
          .resumable(),
      Key("train.precision", &TrainConfig::precision,
          "Matrix products: `fp32`, or `bf16` operands with float32 accumulation (as torch.autocast); "
          "weights, optimizer state, norms, softmax, loss and checkpoints stay float32. `auto`: bf16 where "
          "oneDNN runs bf16 matmuls natively (a CPU with AVX512_BF16 or AMX-BF16), else fp32, decided at "
          "start-up and logged; the run's config and checkpoints record the resolved value, which a "
          "resumed run keeps.")
          .resumable(),
      Key("train.gemm_backend", &TrainConfig::gemm_backend,
          "GEMM library: `openblas`, `onednn`, or `auto` (the TFM_GEMM_BACKEND environment variable if set, "
          "else onednn). OpenBLAS has no bf16 kernels: it emulates them (same numbers, no speed-up)."),
      Key("train.skip_memory_check", &TrainConfig::skip_memory_check,
          "Build the model even when the memory estimate (`tfm info`) exceeds the memory available to the "
          "process (MemAvailable, cgroup limit); by default such a config is refused before anything large "
          "is allocated.")
          .resumable(),
      Key("output.dir", T::String, nullptr, "Run directory: checkpoints, logs, metrics, resolved config.")
          .derived("runs/<config file name>", [](const json&) { return json("runs/run"); }),
  };
  std::vector<KeySpec> out;
  for (auto& key : k) out.push_back(std::move(key.s));
  return out;
}

template <class S>
S from_tree(const json& tree) {
  S options;
  for (const KeySpec& k : config_keys())
    if (const auto& bound = k.binding<S>(); bound.set)
      if (const json* v = lookup(tree, k.path); v && !v->is_null()) bound.set(options, *v);
  return options;
}
template ModelConfig from_tree<ModelConfig>(const json& tree);
template TrainConfig from_tree<TrainConfig>(const json& tree);
template DataConfig from_tree<DataConfig>(const json& tree);

}  // namespace tfm
