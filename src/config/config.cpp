#include "tfm/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
using nlohmann::json;

namespace {

// A fluent builder so that each row of the table reads as one line.
struct Key {
  KeySpec s;
  Key(const char* path, KeyType type, json default_value, const char* meaning) {
    s.path = path;
    s.type = type;
    s.default_value = std::move(default_value);
    s.meaning = meaning;
  }
  Key& min(double v, bool open = false) {
    s.min = v, s.has_min = true, s.min_open = open;
    return *this;
  }
  Key& max(double v, bool open = false) {
    s.max = v, s.has_max = true, s.max_open = open;
    return *this;
  }
  Key& one_of(std::vector<std::string> c) {
    s.choices = std::move(c);
    return *this;
  }
  Key& derived(const char* how) {
    s.derived = how;
    return *this;
  }
  Key& resumable() {
    s.resumable = true;
    return *this;
  }
  Key& only_for(std::vector<std::string> objectives) {
    s.objectives = std::move(objectives);
    return *this;
  }
};

using T = KeyType;
const std::vector<std::string> kLanguageModels = {"causal_lm", "masked_lm"};
const std::vector<std::string> kSeq2Seq = {"seq2seq"};

std::vector<KeySpec> build_table() {
  const json derived = nullptr;
  std::vector<Key> k = {
      Key("seed", T::Integer, 1337, "Seed of initialisation, dropout and batch sampling.").min(0),
      Key("data.path", T::String, "data/tinyshakespeare.txt",
          "Training text (or sentence pairs for seq2seq); a relative path is taken from the working directory."),
      Key("data.format", T::String, derived,
          "`text`: one UTF-8 text (causal_lm, masked_lm); `pairs`: `source<TAB>target[<TAB>...]` lines (seq2seq).")
          .derived("\"pairs\" for seq2seq, else \"text\"")
          .one_of({"text", "pairs"}),
      Key("data.tokenizer", T::String, "char",
          "`char`: Unicode code points of the UTF-8 file, vocabulary = its sorted distinct characters; "
          "`byte`: the 256 byte values; `bpe`: byte-level BPE from data.tokenizer_path; `word` (seq2seq): "
          "lowercased words with punctuation split off, rarer than data.min_freq -> `<unk>`.")
          .one_of({"char", "byte", "bpe", "word"}),
      Key("data.tokenizer_path", T::String, derived,
          "Tokenizer file for data.tokenizer = `bpe` (`tfm tokenizer train`); the checkpoint keeps a copy.")
          .derived("null (only bpe uses it)"),
      Key("data.cache_dir", T::String, derived,
          "Where a text corpus's token cache lives (tokenized once, memory-mapped by every later train, "
          "resume, eval, sample, heads and sweep point; rebuilt when the file or tokenizer changes). Beside the "
          "data by default, so every run of the file shares it and it goes with the data.")
          .derived("\".tfm-cache\" in data.path's directory")
          .resumable()
          .only_for(kLanguageModels),
      Key("data.val_fraction", T::Number, 0.1,
          "The first floor(N * (1 - f)) tokens train, the rest validate (pairs: the last f of the pairs "
          "after a shuffle by the seed).")
          .min(0, true)
          .max(1, true),
      Key("data.max_pairs", T::Integer, 0, "Read only the first N pairs of the file (0 = all).")
          .min(0)
          .only_for(kSeq2Seq),
      Key("data.min_freq", T::Integer, 1,
          "Word tokenizer: a word seen fewer times in the training pairs becomes `<unk>`.")
          .min(1)
          .only_for(kSeq2Seq),
      Key("data.max_source_len", T::Integer, derived, "Source tokens kept per sentence (then `<eos>`).")
          .derived("model.max_seq_len - 1")
          .min(1)
          .only_for(kSeq2Seq),
      Key("data.max_target_len", T::Integer, derived, "Target tokens kept per sentence (then `<eos>`).")
          .derived("model.max_seq_len - 1")
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.d_model", T::Integer, 128, "C: width of the residual stream.").min(1),
      Key("model.n_layers", T::Integer, 4, "Number of Transformer blocks.").min(1),
      Key("model.n_encoder_layers", T::Integer, derived, "seq2seq: encoder blocks.")
          .derived("model.n_layers")
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.n_decoder_layers", T::Integer, derived,
          "seq2seq: decoder blocks (self-attention, cross-attention, feed-forward).")
          .derived("model.n_layers")
          .min(1)
          .only_for(kSeq2Seq),
      Key("model.n_heads", T::Integer, 4, "H: attention (query) heads; must divide d_model.").min(1),
      Key("model.n_kv_heads", T::Integer, derived,
          "Key/value heads; must divide n_heads (fewer: grouped-query attention, 1: multi-query).")
          .derived("model.n_heads")
          .min(1),
      Key("model.d_ff", T::Integer, derived, "Hidden width of the feed-forward network.")
          .derived("4 * model.d_model")
          .min(1),
      Key("model.max_seq_len", T::Integer, 64, "Longest context (size of the position table).").min(1),
      Key("model.dropout", T::Number, 0.0, "Dropout on embeddings and residual branches.")
          .min(0)
          .max(1, true),
      Key("model.attention_dropout", T::Number, 0.0, "Dropout on the attention probabilities.")
          .min(0)
          .max(1, true),
      Key("model.activation", T::String, "gelu", "Feed-forward activation (GELU is the exact erf form).")
          .one_of({"gelu", "relu"}),
      Key("model.norm_position", T::String, "pre",
          "LayerNorm before (pre) or after (post) each residual add.")
          .one_of({"pre", "post"}),
      Key("model.positional_encoding", T::String, "sinusoidal",
          "Fixed sinusoidal table or learned positions.")
          .one_of({"sinusoidal", "learned"}),
      Key("model.causal", T::Boolean, true,
          "Mask future positions in attention: true for causal_lm, false for masked_lm (seq2seq's decoder is "
          "always causal, its encoder never).")
          .only_for(kLanguageModels),
      Key("model.tie_embeddings", T::Boolean, true, "Output projection shares the token embedding."),
      Key("model.bias", T::Boolean, true, "Biases in the attention and feed-forward projections."),
      Key("model.attention_score", T::String, "dot", "Scaled dot-product or additive (Bahdanau) scores.")
          .one_of({"dot", "additive"}),
      Key("model.head_gating", T::String, "none",
          "`topk`: a learned gate picks model.head_topk heads per token and weights them by the softmax of "
          "their gate logits (Mixture of Attention heads); the other heads' attention is not computed.")
          .one_of({"none", "topk"}),
      Key("model.head_topk", T::Integer, 2, "topk gating: heads each token uses (at most model.n_heads).").min(1),
      Key("model.head_balance_loss", T::Number, 0.01,
          "topk gating: weight of the load-balancing loss that keeps the gate from collapsing onto few heads.")
          .min(0),
      Key("model.head_mixing", T::String, "none",
          "Cross-head interaction: `talking_heads` mixes the heads' attention logits and probabilities with "
          "learned H x H matrices; `group_mlp` mixes them inside model.head_groups groups and replaces the "
          "output projection by a two-layer GELU MLP.")
          .one_of({"none", "talking_heads", "group_mlp"}),
      Key("model.head_groups", T::Integer, 2, "group_mlp: groups of heads (must divide model.n_heads).").min(1),
      Key("train.objective", T::String, "causal_lm",
          "`causal_lm`: next-token prediction (decoder-only); `masked_lm`: BERT's masked tokens "
          "(encoder-only); `seq2seq`: an encoder-decoder over sentence pairs (translation).")
          .one_of({"causal_lm", "masked_lm", "seq2seq"}),
      Key("train.mask_prob", T::Number, 0.15,
          "masked_lm: each position is chosen with this probability (then [MASK] 80%, random 10%, kept 10%).")
          .min(0, true)
          .max(1, true)
          .only_for({"masked_lm"}),
      Key("train.batch_size", T::Integer, 12, "B: sequences per micro-batch.").min(1),
      Key("train.seq_len", T::Integer, derived, "T: tokens per training sequence; at most model.max_seq_len.")
          .derived("model.max_seq_len")
          .min(1)
          .only_for(kLanguageModels),
      Key("train.grad_accum_steps", T::Integer, 1,
          "Micro-batches per optimizer step; the update equals one batch of B * grad_accum_steps.")
          .min(1),
      Key("train.max_steps", T::Integer, 2000, "Optimizer steps; the cosine schedule ends here.")
          .min(1)
          .resumable(),
      Key("train.grad_clip", T::Number, 1.0, "Clip the global gradient norm to this (0 = off).").min(0),
      Key("train.skip_nonfinite", T::Boolean, false,
          "On a NaN/Inf loss or gradient skip the batch (no update, a warning) instead of stopping; "
          "still stops after 100 in a row.")
          .resumable(),
      Key("train.optimizer.name", T::String, "adamw",
          "`adamw` (decoupled weight decay on matrices only) or `sgd` (momentum, L2 decay on matrices).")
          .one_of({"adamw", "sgd"}),
      Key("train.optimizer.lr", T::Number, 1e-3, "Peak learning rate.").min(0, true),
      Key("train.optimizer.betas", T::NumberPair, json::array({0.9, 0.99}), "AdamW's [beta1, beta2].")
          .min(0)
          .max(1, true),
      Key("train.optimizer.weight_decay", T::Number, 0.1, "Weight decay of rank >= 2 tensors.").min(0),
      Key("train.optimizer.momentum", T::Number, 0.9, "SGD momentum.").min(0).max(1, true),
      Key("train.lr_schedule.name", T::String, "cosine",
          "`cosine` (warmup, then cosine to min_lr at max_steps), `constant` (after warmup), "
          "`inverse_sqrt` (warmup, then lr * sqrt(warmup / (step + 1)), the original Transformer's).")
          .one_of({"cosine", "constant", "inverse_sqrt"}),
      Key("train.lr_schedule.warmup_steps", T::Integer, 100, "Linear warmup: lr * (step + 1) / warmup_steps.")
          .min(0),
      Key("train.lr_schedule.min_lr", T::Number, derived, "Final learning rate of the cosine schedule.")
          .derived("train.optimizer.lr / 10")
          .min(0),
      Key("train.eval_interval", T::Integer, 250,
          "Evaluate (and keep best.ckpt) every this many steps and at the end.")
          .min(1)
          .resumable(),
      Key("train.eval_steps", T::Integer, 20, "Validation batches per evaluation.").min(1).resumable(),
      Key("train.log_interval", T::Integer, 10,
          "Log a line and a metrics.jsonl record every this many steps.")
          .min(1)
          .resumable(),
      Key("train.checkpoint_interval", T::Integer, 250,
          "Write last.ckpt every this many steps (0 = only at the end or when interrupted).")
          .min(0)
          .resumable(),
      Key("train.threads", T::Integer, 0, "CPU threads for OpenBLAS and OpenMP (0 = all cores; under mpirun, each rank's share of its machine's cores).")
          .min(0)
          .resumable(),
      Key("train.data_parallel", T::Integer, derived,
          "Workers that each take a share of the micro-batch's rows through the whole forward and backward "
          "with one-thread kernels, their gradients summed at the end (data parallelism inside the process): "
          "1 = off (every kernel uses all train.threads), 0 = one per thread, N = N. Fewer OpenMP fork/joins: "
          "faster for small models on few cores; each extra worker holds a gradient buffer. At most "
          "train.batch_size.")
          .derived("0 when a micro-batch's feed-forward product (tokens x model.d_model x model.d_ff) is under "
                   "2^30 multiply-adds, else 1")
          .min(0)
          .resumable(),
      Key("train.precision", T::String, "fp32",
          "Matrix products: `fp32`, or `bf16` operands with float32 accumulation (as torch.autocast); "
          "weights, optimizer state, norms, softmax, loss and checkpoints stay float32.")
          .one_of({"fp32", "bf16"})
          .resumable(),
      Key("train.gemm_backend", T::String, "auto",
          "GEMM library: `openblas`, `onednn`, or `auto` (the TFM_GEMM_BACKEND environment variable if set, "
          "else onednn). OpenBLAS has no bf16 kernels: it emulates them (same numbers, no speed-up).")
          .one_of({"auto", "openblas", "onednn"}),
      Key("train.skip_memory_check", T::Boolean, false,
          "Build the model even when the memory estimate (`tfm info`) exceeds the memory available to the "
          "process (MemAvailable, cgroup limit); by default such a config is refused before anything large "
          "is allocated.")
          .resumable(),
      Key("output.dir", T::String, derived, "Run directory: checkpoints, logs, metrics, resolved config.")
          .derived("runs/<config file name>"),
  };
  std::vector<KeySpec> out;
  for (auto& key : k) out.push_back(std::move(key.s));
  return out;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream is(path);
  while (std::getline(is, part, '.')) parts.push_back(part);
  return parts;
}

const json* lookup(const json& tree, const std::string& path) {
  const json* node = &tree;
  for (const auto& part : split_path(path)) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

void assign(json& tree, const std::string& path, json value) {
  json* node = &tree;
  for (const auto& part : split_path(path)) {
    if (!node->is_object()) *node = json::object();
    node = &(*node)[part];
  }
  *node = std::move(value);
}

std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool is_section(const std::string& path) {
  for (const auto& k : config_keys())
    if (k.path.size() > path.size() && k.path.compare(0, path.size(), path) == 0 &&
        k.path[path.size()] == '.')
      return true;
  return false;
}

std::string describe_range(const KeySpec& k) {
  if (k.has_min && k.has_max)
    return std::string("in ") + (k.min_open ? "(" : "[") + number_str(k.min) + ", " + number_str(k.max) +
           (k.max_open ? ")" : "]");
  if (k.has_min) return (k.min_open ? "> " : ">= ") + number_str(k.min);
  if (k.has_max) return (k.max_open ? "< " : "<= ") + number_str(k.max);
  return "";
}

std::string describe_choices(const KeySpec& k) {
  std::string s;
  for (size_t i = 0; i < k.choices.size(); ++i) s += (i ? ", \"" : "\"") + k.choices[i] + "\"";
  return s;
}

std::string describe_expected(const KeySpec& k) {
  const std::string range = describe_range(k);
  switch (k.type) {
    case T::Integer:
      return "an integer" + (range.empty() ? "" : " " + range);
    case T::Number:
      return "a number" + (range.empty() ? "" : " " + range);
    case T::Boolean:
      return "true or false";
    case T::String:
      return k.choices.empty() ? "a string" : "one of " + describe_choices(k);
    case T::NumberPair:
      return "two numbers [a, b], each " + range;
  }
  return "";
}

bool in_range(const KeySpec& k, double v) {
  if (!std::isfinite(v)) return false;
  if (k.has_min && (k.min_open ? v <= k.min : v < k.min)) return false;
  if (k.has_max && (k.max_open ? v >= k.max : v > k.max)) return false;
  return true;
}

// Checks one given value against its row; returns the normalised value or pushes an error.
bool check_value(const KeySpec& k, const json& v, json& out, std::vector<std::string>& errors) {
  auto fail = [&] {
    errors.push_back(k.path + ": expected " + describe_expected(k) + ", got " + shown(v));
    return false;
  };
  switch (k.type) {
    case T::Integer: {
      if (!v.is_number()) return fail();
      const double d = v.get<double>();
      // 2e3 is accepted as 2000; 2.5 is not an integer.
      if (!v.is_number_integer() && (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9e15))
        return fail();
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail();
      const int64_t i = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
      if (!in_range(k, static_cast<double>(i))) return fail();
      // Sizes beyond 2^31 would only ever be typos; keep every size in int range.
      if (i > (int64_t{1} << 31)) {
        errors.push_back(k.path + ": expected " + describe_expected(k) + " and at most 2^31, got " +
                         shown(v));
        return false;
      }
      out = i;
      return true;
    }
    case T::Number:
      if (!v.is_number() || !in_range(k, v.get<double>())) return fail();
      out = v.get<double>();
      return true;
    case T::Boolean:
      if (!v.is_boolean()) return fail();
      out = v;
      return true;
    case T::String:
      if (!v.is_string()) return fail();
      if (!k.choices.empty() &&
          std::find(k.choices.begin(), k.choices.end(), v.get<std::string>()) == k.choices.end())
        return fail();
      if (k.choices.empty() && v.get<std::string>().empty()) {
        errors.push_back(k.path + ": expected a non-empty string, got \"\"");
        return false;
      }
      out = v;
      return true;
    case T::NumberPair:
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number() ||
          !in_range(k, v[0].get<double>()) || !in_range(k, v[1].get<double>()))
        return fail();
      out = json::array({v[0].get<double>(), v[1].get<double>()});
      return true;
  }
  return fail();
}

std::string suggestion(const std::string& path) {
  std::vector<std::string> candidates;
  for (const auto& k : config_keys()) {
    candidates.push_back(k.path);
    const auto parts = split_path(k.path);
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix += (i ? "." : "") + parts[i];
      candidates.push_back(prefix);
    }
  }
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(path, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best_d <= std::max<size_t>(2, path.size() / 4)) return best;
  // The right name in the wrong section ("lr" at the top level): suggest by the last component.
  const std::string last = split_path(path).back();
  for (const auto& k : config_keys())
    if (split_path(k.path).back() == last) return k.path;
  return "";
}

void check_unknown(const json& node, const std::string& prefix, std::vector<std::string>& errors) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string& name = it.key();
    if (!name.empty() && name[0] == '_') continue;  // "_comment" keys are comments
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (find_key(path)) continue;  // type-checked by its row
    if (is_section(path)) {
      if (it->is_object()) {
        check_unknown(*it, path, errors);
      } else {
        errors.push_back(path + ": expected an object (a section of keys), got " + shown(*it));
      }
      continue;
    }
    const std::string s = suggestion(path);
    errors.push_back(path + ": unknown key" + (s.empty() ? "" : "; did you mean " + s + "?") +
                     " (`tfm config --keys` lists every key)");
  }
}

json derive(const std::string& path, const json& tree) {
  if (path == "model.n_kv_heads") return *lookup(tree, "model.n_heads");
  if (path == "model.d_ff") return 4 * lookup(tree, "model.d_model")->get<int64_t>();
  if (path == "train.seq_len") return *lookup(tree, "model.max_seq_len");
  if (path == "train.lr_schedule.min_lr") return lookup(tree, "train.optimizer.lr")->get<double>() / 10.0;
  if (path == "output.dir") return "runs/run";
  if (path == "data.tokenizer_path") return nullptr;  // unset: only bpe reads it
  if (path == "data.cache_dir") {  // as default_cache_dir (data/token_cache.h)
    const std::filesystem::path parent = std::filesystem::path(lookup(tree, "data.path")->get<std::string>()).parent_path();
    return (parent.empty() ? std::filesystem::path(".tfm-cache") : parent / ".tfm-cache").string();
  }
  if (path == "data.format") return lookup(tree, "train.objective")->get<std::string>() == "seq2seq" ? "pairs" : "text";
  if (path == "data.max_source_len" || path == "data.max_target_len")
    return lookup(tree, "model.max_seq_len")->get<int64_t>() - 1;
  if (path == "model.n_encoder_layers" || path == "model.n_decoder_layers") return *lookup(tree, "model.n_layers");
  if (path == "train.data_parallel") {
    // Small products (the shipped small configs: ~5e7 multiply-adds in fc1) spend much of a step in
    // OpenMP fork/joins, and one worker per thread runs 0.71-0.90x the time; the large model gains
    // 2-7% at 6e8-1.2e9, nothing at 2.4e9, 2% at its config's 1e10 for a fifth more memory (README,
    // "Scale out").
    auto i = [&](const char* p) { return lookup(tree, p)->get<int64_t>(); };
    const bool pairs = lookup(tree, "train.objective")->get<std::string>() == "seq2seq";
    const double tokens = static_cast<double>(i("train.batch_size")) *
                          static_cast<double>(pairs ? i("data.max_source_len") + i("data.max_target_len") + 2
                                                    : i("train.seq_len"));
    const double macs = tokens * static_cast<double>(i("model.d_model")) * static_cast<double>(i("model.d_ff"));
    return macs < static_cast<double>(int64_t{1} << 30) ? 0 : 1;
  }
  throw Error("config: no rule derives " + path);
}

void cross_checks(const json& t, std::vector<std::string>& errors) {
  auto i = [&](const char* p) { return lookup(t, p)->get<int64_t>(); };
  if (lookup(t, "data.tokenizer")->get<std::string>() == "bpe" && lookup(t, "data.tokenizer_path")->is_null())
    errors.push_back("data.tokenizer_path: required when data.tokenizer = \"bpe\" (make one with tfm tokenizer train)");
  const int64_t C = i("model.d_model"), H = i("model.n_heads"), Hkv = i("model.n_kv_heads");
  if (C % H != 0)
    errors.push_back("model.d_model: expected a multiple of model.n_heads = " + std::to_string(H) + ", got " +
                     std::to_string(C));
  if (H % Hkv != 0)
    errors.push_back("model.n_kv_heads: expected a divisor of model.n_heads = " + std::to_string(H) +
                     ", got " + std::to_string(Hkv));
  const std::string gating = lookup(t, "model.head_gating")->get<std::string>();
  const std::string mixing = lookup(t, "model.head_mixing")->get<std::string>();
  if (gating == "topk" && i("model.head_topk") > H)
    errors.push_back("model.head_topk: expected at most model.n_heads = " + std::to_string(H) + ", got " +
                     std::to_string(i("model.head_topk")));
  if (gating == "topk" && lookup(t, "model.attention_score")->get<std::string>() != "dot")
    errors.push_back("model.head_gating: \"topk\" needs model.attention_score = \"dot\" (the fused kernel skips "
                     "the unselected heads' rows)");
  if (gating == "topk" && mixing != "none")
    errors.push_back("model.head_gating: \"topk\" cannot be combined with model.head_mixing = \"" + mixing +
                     "\" (mixing reads every head's logits, gating skips most of them)");
  if (mixing == "group_mlp" && H % i("model.head_groups") != 0)
    errors.push_back("model.head_groups: expected a divisor of model.n_heads = " + std::to_string(H) + ", got " +
                     std::to_string(i("model.head_groups")));
  if (i("train.seq_len") > i("model.max_seq_len"))
    errors.push_back("train.seq_len: expected at most model.max_seq_len = " +
                     std::to_string(i("model.max_seq_len")) + ", got " + std::to_string(i("train.seq_len")));
  if (i("train.data_parallel") > i("train.batch_size"))
    errors.push_back("train.data_parallel: expected at most train.batch_size = " +
                     std::to_string(i("train.batch_size")) + " workers (each takes whole rows), got " +
                     std::to_string(i("train.data_parallel")));
  // What the objectives need of the model and the data (ARCHITECTURE.md, "Objectives").
  const std::string objective = lookup(t, "train.objective")->get<std::string>();
  const bool causal = lookup(t, "model.causal")->get<bool>();
  if (objective == "causal_lm" && !causal)
    errors.push_back("model.causal: train.objective \"causal_lm\" needs model.causal = true (a bidirectional "
                     "model trained on the next token reads the answer through attention; for an encoder use "
                     "train.objective \"masked_lm\")");
  if (objective == "masked_lm" && causal)
    errors.push_back("model.causal: train.objective \"masked_lm\" needs model.causal = false (a causal model "
                     "cannot see the tokens after a [MASK])");
  const std::string format = lookup(t, "data.format")->get<std::string>();
  if ((objective == "seq2seq") != (format == "pairs"))
    errors.push_back("data.format: train.objective \"" + objective + "\" reads " +
                     (objective == "seq2seq" ? "\"pairs\"" : "\"text\"") + ", got \"" + format + "\"");
  if (objective != "seq2seq" && lookup(t, "data.tokenizer")->get<std::string>() == "word")
    errors.push_back("data.tokenizer: \"word\" is for train.objective \"seq2seq\" (sentence pairs); a text "
                     "objective uses \"char\", \"byte\" or \"bpe\"");
  if (objective == "seq2seq")
    for (const char* side : {"data.max_source_len", "data.max_target_len"})
      if (i(side) + 1 > i("model.max_seq_len"))
        errors.push_back(std::string(side) + ": expected at most model.max_seq_len - 1 = " +
                         std::to_string(i("model.max_seq_len") - 1) + " (room for <bos>/<eos>), got " +
                         std::to_string(i(side)));
  const double lr = lookup(t, "train.optimizer.lr")->get<double>();
  const double min_lr = lookup(t, "train.lr_schedule.min_lr")->get<double>();
  if (lookup(t, "train.lr_schedule.name")->get<std::string>() == "cosine" && min_lr > lr)
    errors.push_back("train.lr_schedule.min_lr: expected at most train.optimizer.lr = " + number_str(lr) +
                     ", got " + number_str(min_lr));
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (size_t n = 0; n < lines.size(); ++n) s += (n ? "\n" : "") + lines[n];
  return s;
}

}  // namespace

const std::vector<KeySpec>& config_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(const std::string& path) {
  for (const auto& k : config_keys())
    if (k.path == path) return &k;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// ---- Config accessors ----

const json& Config::at(const std::string& path) const {
  const json* v = lookup(tree, path);
  if (!v || !find_key(path)) throw Error("config: no key " + path + " in the resolved config");
  return *v;
}
int64_t Config::integer(const std::string& path) const {
  return at(path).get<int64_t>();
}
double Config::number(const std::string& path) const {
  return at(path).get<double>();
}
bool Config::boolean(const std::string& path) const {
  return at(path).get<bool>();
}
std::string Config::string(const std::string& path) const {
  return at(path).get<std::string>();
}

ModelConfig Config::model(int64_t vocab_size) const {
  ModelConfig m;
  m.vocab_size = vocab_size;
  m.d_model = integer("model.d_model");
  m.n_layers = integer("model.n_layers");
  m.n_heads = integer("model.n_heads");
  m.n_kv_heads = integer("model.n_kv_heads");
  m.d_ff = integer("model.d_ff");
  m.max_seq_len = integer("model.max_seq_len");
  m.dropout = static_cast<float>(number("model.dropout"));
  m.attention_dropout = static_cast<float>(number("model.attention_dropout"));
  m.activation = string("model.activation");
  m.norm_position = string("model.norm_position");
  m.positional_encoding = string("model.positional_encoding");
  m.attention_score = string("model.attention_score");
  m.head_gating = string("model.head_gating");
  m.head_topk = integer("model.head_topk");
  m.head_balance_loss = static_cast<float>(number("model.head_balance_loss"));
  m.head_mixing = string("model.head_mixing");
  m.head_groups = integer("model.head_groups");
  m.causal = boolean("model.causal");
  m.tie_embeddings = boolean("model.tie_embeddings");
  m.bias = boolean("model.bias");
  m.n_encoder_layers = integer("model.n_encoder_layers");
  m.n_decoder_layers = integer("model.n_decoder_layers");
  return m;
}

// ---- parsing ----

json parse_json(const std::string& text, const std::string& source) {
  try {
    const json syntax_only = json::parse(text);  // syntax first, for its position
    (void)syntax_only;
  } catch (const json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    const size_t pos = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < pos; ++i)
      if (text[i] == '\n') ++line, line_start = i + 1;
    const size_t column = pos - line_start + 1;
    std::string what = e.what();
    const size_t c = what.find("column ");
    const size_t colon = what.find(": ", c == std::string::npos ? 0 : c);
    if (colon != std::string::npos) what = what.substr(colon + 2);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) what = "the file is empty";
    throw ConfigError(source + ":" + std::to_string(line) + ":" + std::to_string(column) +
                      ": malformed JSON: " + what);
  } catch (const json::exception& e) {
    // Not a syntax error but a value nlohmann cannot hold (406: a number like 1e999 overflows).
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw ConfigError(source + ": malformed JSON: " + what);
  }
  // Then what nlohmann lets through: duplicate keys (it keeps the last silently) and deep nesting.
  try {
    return parse_json_strict(text.data(), text.size(), source);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
}

json read_json_file(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;
  return parse_json(read_file(path, kMaxConfigBytes), path);
}

void apply_override(json& tree, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set: expected key.path=value, got \"" + assignment + "\"");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;  // a bare word: data.path=file.txt, model.activation=relu
  }
  json* node = &tree;
  std::string so_far;
  const auto parts = split_path(path);
  if (value.is_null()) {  // KEY=null removes the key: its default (or the value it derives from) applies
    for (size_t i = 0; i + 1 < parts.size() && node->is_object() && node->contains(parts[i]); ++i)
      node = &(*node)[parts[i]];
    if (node->is_object() && !parts.empty()) node->erase(parts.back());
    return;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) throw ConfigError("--set: \"" + path + "\" is not a key path (empty component)");
    if (node->is_null()) *node = json::object();
    if (!node->is_object())
      throw ConfigError(so_far + ": --set " + path + " needs an object here, but the config has " +
                        shown(*node));
    so_far += (i ? "." : "") + parts[i];
    node = &(*node)[parts[i]];
  }
  *node = std::move(value);
}

Config resolve_config(json user, const std::vector<std::string>& overrides) {
  if (!user.is_object())
    throw ConfigError("config: expected a JSON object at the top level, got " + shown(user));
  for (const auto& o : overrides) apply_override(user, o);
  std::vector<std::string> errors;
  check_unknown(user, "", errors);
  json tree = json::object();
  bool all_valid = true;
  std::vector<const KeySpec*> to_derive;
  for (const auto& k : config_keys()) {
    const json* given = lookup(user, k.path);
    json value;
    if (given && !(given->is_null() && !k.derived.empty())) {
      if (!check_value(k, *given, value, errors)) {
        all_valid = false;
        continue;
      }
      assign(tree, k.path, value);
    } else if (!k.default_value.is_null()) {
      assign(tree, k.path, k.default_value);
    } else {
      to_derive.push_back(&k);
    }
  }
  if (all_valid) {
    for (const KeySpec* k : to_derive) assign(tree, k->path, derive(k->path, tree));
    cross_checks(tree, errors);
    // A key another objective reads, set to something other than its default, would be ignored: say so.
    const std::string objective = lookup(tree, "train.objective")->get<std::string>();
    for (const auto& k : config_keys()) {
      if (k.objectives.empty() ||
          std::find(k.objectives.begin(), k.objectives.end(), objective) != k.objectives.end())
        continue;
      const json* given = lookup(user, k.path);
      if (!given || given->is_null()) continue;
      const json fallback = k.default_value.is_null() ? derive(k.path, tree) : k.default_value;
      if (*lookup(tree, k.path) == fallback) continue;
      std::string owners;
      for (const auto& o : k.objectives) owners += (owners.empty() ? "\"" : " or \"") + o + "\"";
      errors.push_back(k.path + ": belongs to train.objective " + owners + "; this config's objective is \"" +
                       objective + "\" (remove the key or change train.objective)");
    }
  }
  if (!errors.empty()) throw ConfigError(join_lines(errors));
  return Config{tree};
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json user = read_json_file(path);
  if (!user.is_object())
    throw ConfigError(path + ": expected a JSON object at the top level, got " + shown(user));
  for (const auto& o : overrides) apply_override(user, o);
  const json* dir = lookup(user, "output.dir");
  if (!dir || dir->is_null())
    assign(user, "output.dir", "runs/" + std::filesystem::path(path).stem().string());
  return resolve_config(std::move(user));
}

Config resume_config(const Config& run, const std::vector<std::string>& overrides) {
  // Keys of other objectives hold their (derived) defaults in a resolved tree: drop them, so they are
  // derived afresh and only an override naming one is refused.
  json tree = run.tree;
  const std::string objective = run.string("train.objective");
  for (const auto& k : config_keys())
    if (!k.objectives.empty() && std::find(k.objectives.begin(), k.objectives.end(), objective) == k.objectives.end()) {
      const auto parts = split_path(k.path);
      json* node = &tree;
      for (size_t p = 0; p + 1 < parts.size() && node; ++p) node = node->contains(parts[p]) ? &(*node)[parts[p]] : nullptr;
      if (node) node->erase(parts.back());
    }
  Config next = resolve_config(std::move(tree), overrides);
  std::vector<std::string> errors;
  for (const auto& path : differing_keys(run, next)) {
    const KeySpec* k = find_key(path);
    const bool foreign = !k->objectives.empty() &&
                         std::find(k->objectives.begin(), k->objectives.end(), objective) == k->objectives.end();
    if (k->resumable || foreign) continue;
    std::string allowed;
    for (const auto& k : config_keys())
      if (k.resumable) allowed += (allowed.empty() ? "" : ", ") + k.path;
    errors.push_back(path + ": cannot change when resuming (the run has " + shown(run.at(path)) + ", got " +
                     shown(next.at(path)) + "); only " + allowed + " may change");
  }
  if (!errors.empty()) throw ConfigError(join_lines(errors));
  return next;
}

std::vector<std::string> differing_keys(const Config& a, const Config& b, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& k : config_keys()) {
    if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
    const json* va = lookup(a.tree, k.path);
    const json* vb = lookup(b.tree, k.path);
    if (!va || !vb || *va != *vb) out.push_back(k.path);
  }
  return out;
}

std::string keys_markdown() {
  std::ostringstream os;
  os << "| Key | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : config_keys()) {
    static const char* names[] = {"integer", "number", "boolean", "string", "[number, number]"};
    std::string def = k.default_value.is_null() ? "= " + k.derived : k.default_value.dump();
    std::string allowed = k.type == T::String && !k.choices.empty() ? describe_choices(k) : describe_range(k);
    if (k.type == T::Boolean) allowed = "true, false";
    if (k.type == T::NumberPair) allowed = "each " + allowed;
    std::string meaning = k.meaning;
    if (k.resumable) meaning += " May change on `--resume`.";
    if (!k.objectives.empty()) {
      std::string owners;
      for (const auto& o : k.objectives) owners += (owners.empty() ? "`" : ", `") + o + "`";
      meaning += " Only " + owners + ".";
    }
    os << "| `" << k.path << "` | " << names[static_cast<int>(k.type)] << " | `" << def << "` | " << allowed
       << " | " << meaning << " |\n";
  }
  return os.str();
}

}  // namespace tfm
