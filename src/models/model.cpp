// The reference language model (ARCHITECTURE.md) from the layers of nn.h, with every parameter in
// one flat value buffer and one flat gradient buffer.
// Legend: B batch, T time, C = d_model, H heads, Hkv kv heads, Dk = C / H, F = d_ff, V vocabulary.
#include "tfm/models/model.h"

#include <algorithm>
#include <cmath>

#include "tfm/nn/blocks.h"
#include "tfm/engine/ops.h"

namespace tfm {
namespace {

ModelConfig checked(ModelConfig c) {
  c = checked_common(c, "LanguageModel");
  TFM_CHECK(c.vocab_size > 0, "LanguageModel", "vocab_size must be positive, got ", c.vocab_size);
  TFM_CHECK(c.n_layers >= 0, "LanguageModel", "n_layers must be >= 0, got ", c.n_layers);
  return c;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The module tree, registered in the reference's order: emb, pos, blocks.i, ln_f, head.
struct Network : Module {
  explicit Network(const ModelConfig& c) : config(c), emb(c.vocab_size, c.d_model) {
    register_module("emb", &emb);
    if (c.positional_encoding == "learned") {
      pos = std::make_unique<LearnedPositionalEmbedding>(c.max_seq_len, c.d_model);
      register_module("pos", pos.get());
    } else {
      pe = std::make_unique<SinusoidalPositionalEncoding>(c.max_seq_len, c.d_model);
    }
    for (int64_t i = 0; i < c.n_layers; ++i) {
      blocks.push_back(std::make_unique<EncoderBlock>(block_config(c, c.causal)));
      register_module("blocks." + std::to_string(i), blocks.back().get());
    }
    if (c.norm_position == "pre") {
      ln_f = std::make_unique<LayerNorm>(c.d_model);
      register_module("ln_f", ln_f.get());
    }
    if (!c.tie_embeddings) {
      head = std::make_unique<Linear>(c.d_model, c.vocab_size, false);
      register_module("head", head.get());
    }
  }

  // Token and position embeddings for positions [start, start + T): (B, T, C).
  Tensor embed(const std::vector<int32_t>& tokens, int64_t B, int64_t T, int64_t start) {
    return embed_with_positions(*this, emb, pe.get(), pos.get(), tokens, B, T, start, config.dropout,
                                "LanguageModel::forward");
  }

  Tensor logits(const Tensor& x) { return output_logits(x, ln_f.get(), head.get(), emb.weight); }

  ModelConfig config;
  Embedding emb;
  std::unique_ptr<LearnedPositionalEmbedding> pos;
  std::unique_ptr<SinusoidalPositionalEncoding> pe;
  std::vector<std::unique_ptr<EncoderBlock>> blocks;
  std::unique_ptr<LayerNorm> ln_f;
  std::unique_ptr<Linear> head;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Model: the flat buffers and what every architecture shares

ModelConfig checked_common(ModelConfig c, const char* where) {
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  TFM_CHECK(c.max_seq_len > 0 && c.d_ff > 0, where, "max_seq_len ", c.max_seq_len, " and d_ff ", c.d_ff,
            " must be positive");
  TFM_CHECK(c.positional_encoding == "sinusoidal" || c.positional_encoding == "learned", where,
            "positional_encoding must be \"sinusoidal\" or \"learned\", got \"", c.positional_encoding, "\"");
  TFM_CHECK(c.dropout >= 0.0f && c.dropout < 1.0f && c.attention_dropout >= 0.0f && c.attention_dropout < 1.0f,
            where, "dropout ", c.dropout, " and attention_dropout ", c.attention_dropout, " must be in [0, 1)");
  return c;
}

BlockConfig block_config(const ModelConfig& c, bool causal) {
  BlockConfig b;
  b.attention.d_model = c.d_model;
  b.attention.n_heads = c.n_heads;
  b.attention.n_kv_heads = c.n_kv_heads;
  b.attention.bias = c.bias;
  b.attention.causal = causal;
  b.attention.dropout = c.attention_dropout;
  b.attention.score = c.attention_score;
  b.attention.gating = c.head_gating;
  b.attention.top_k = c.head_topk;
  b.attention.balance_loss = c.head_balance_loss;
  b.attention.mixing = c.head_mixing;
  b.attention.groups = c.head_groups;
  b.d_ff = c.d_ff;
  b.activation = c.activation;
  b.norm_position = c.norm_position;
  b.dropout = c.dropout;
  return b;
}

Model::~Model() = default;

void Model::adopt_parameters(Module& root, uint64_t init_seed, int64_t residual_layers) {
  root_ = &root;
  for (Module* m : root.modules())
    if (auto* a = dynamic_cast<MultiHeadAttention*>(m); a && a->gate) gated_.push_back(a);
  ParameterBuffers buffers = flatten_parameters(root);
  values_ = buffers.values, grads_ = buffers.grads, size_ = buffers.size;
  dropout_rng_.seed_with(init_seed + 1);
  root.set_rng(&dropout_rng_);
  // Initialisation exactly as ARCHITECTURE.md and the reference, in its parameter order.
  Rng rng(init_seed);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, residual_layers)));
  const auto named = root.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].first;
    Tensor& t = *named[i].second;
    float* p = t.data();
    // Head mixing matrices (g, n, n) start as identities, so a mixing layer starts as the standard one;
    // they are not decayed either: weight decay pulls towards zero, which for a mixing matrix is not
    // "no effect" but "no attention" (the identity is what a user expects it to stay near).
    const bool mixing = ends_with(name, "mix_logits") || ends_with(name, "mix_weights");
    if (mixing) {
      const int64_t n = t.size(1);
      t.fill_(0.0f);
      for (int64_t g = 0; g < t.size(0); ++g)
        for (int64_t h = 0; h < n; ++h) p[(g * n + h) * n + h] = 1.0f;
    } else if (t.dim() == 2) {
      const bool residual = ends_with(name, "wo.weight") || ends_with(name, "fc2.weight");
      const float std = residual ? residual_std : 0.02f;
      for (int64_t j = 0; j < t.numel(); ++j) p[j] = std * rng.normal();
    } else {
      const bool gain = name.find("ln") != std::string::npos && ends_with(name, "weight");
      t.fill_(gain ? 1.0f : 0.0f);
    }
    parameters_.push_back({name, t, buffers.offsets[i], t.dim() >= 2 && !mixing});
  }
}

void Model::share_values_of(const Model& source) {
  TFM_CHECK(source.size_ == size_ && source.parameters_.size() == parameters_.size(), "Model::share_values_of",
            "the source has ", source.size_, " parameter values in ", source.parameters_.size(),
            " tensors, this model ", size_, " in ", parameters_.size());
  const auto named = root_->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    NamedParameter& p = parameters_[i];
    p.value = *named[i].second = flat_parameter(source.values_, grads_, p.value.shape(), p.offset);
  }
  values_ = source.values_;
}

const NamedParameter* Model::find_parameter(const std::string& name) const {
  for (const NamedParameter& p : parameters_)
    if (p.name == name) return &p;
  return nullptr;
}

Tensor Model::flat_values() const { return Tensor::view_of(values_, {size_}, 0); }
Tensor Model::flat_grads() const { return Tensor::view_of(grads_, {size_}, 0); }

std::vector<std::pair<std::string, int64_t>> Model::parameter_breakdown() const {
  std::vector<std::pair<std::string, int64_t>> out = {{"embedding", 0}, {"positions", 0}, {"attention", 0},
                                                      {"feed-forward", 0}, {"norms", 0}, {"head", 0}};
  for (const NamedParameter& p : parameters_) {
    const std::string& n = p.name;
    const size_t k = n.find("emb.") != std::string::npos && n.find("pos") == std::string::npos ? 0
                     : n.find("pos.") != std::string::npos                                    ? 1
                     : n.find("attn.") != std::string::npos ||
                             n.find("cross.") != std::string::npos                            ? 2
                     : n.find(".fc") != std::string::npos                                     ? 3
                     : n.find("ln") != std::string::npos                                      ? 4
                                                                                              : 5;
    out[k].second += p.value.numel();
  }
  return out;
}

Tensor Model::take_auxiliary_loss() {
  Tensor total;
  for (MultiHeadAttention* a : gated_) {
    const Tensor t = a->take_auxiliary_loss();
    if (t.defined()) total = total.defined() ? total + t : t;
  }
  return total;
}

Tensor Model::with_auxiliary_loss(const Tensor& loss) {
  const Tensor aux = take_auxiliary_loss();
  return aux.defined() ? loss + aux : loss;
}

std::vector<std::pair<std::string, std::vector<double>>> Model::take_head_usage() {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (MultiHeadAttention* a : gated_) {
    // The layer's name: its gate's parameter name without ".gate.weight".
    std::string name;
    for (const NamedParameter& p : parameters_)
      if (p.value.data() == a->gate->weight.data()) name = p.name.substr(0, p.name.size() - std::string(".gate.weight").size());
    std::vector<double> share(a->head_tokens.size(), 0.0);
    for (size_t h = 0; h < share.size(); ++h)
      share[h] = a->tokens_seen > 0 ? a->head_tokens[h] / a->tokens_seen : 0.0;
    out.emplace_back(name, share);
    std::fill(a->head_tokens.begin(), a->head_tokens.end(), 0.0);
    a->tokens_seen = 0;
  }
  return out;
}

void Model::set_training(bool on) { root_->set_training(on); }
bool Model::training() const { return root_->training(); }

// ---------------------------------------------------------------------------------------------
// LanguageModel

struct LanguageModel::Impl {
  explicit Impl(const ModelConfig& c) : net(c) {}
  Network net;
  bool record_attention = false;
  std::vector<Tensor> probabilities, head_outputs;

  void collect_recorded() {
    probabilities.clear();
    head_outputs.clear();
    if (!record_attention) return;
    for (auto& b : net.blocks) {
      probabilities.push_back(b->attn.last_probabilities);
      head_outputs.push_back(b->attn.last_head_outputs);
    }
  }
};

LanguageModel::LanguageModel(const ModelConfig& config, uint64_t init_seed)
    : impl_(std::make_unique<Impl>(checked(config))) {
  adopt_parameters(impl_->net, init_seed, impl_->net.config.n_layers);
}

LanguageModel::~LanguageModel() = default;

const ModelConfig& LanguageModel::config() const { return impl_->net.config; }

double computed_head_share(const ModelConfig& c) {
  return c.head_gating == "topk" ? static_cast<double>(c.head_topk) / static_cast<double>(c.n_heads) : 1.0;
}
double gate_weight_count(const ModelConfig& c) {
  return c.head_gating == "topk" ? static_cast<double>(c.n_heads) * static_cast<double>(c.d_model) : 0.0;
}

double attention_output_weights(const ModelConfig& c) {
  const double C = static_cast<double>(c.d_model);
  return c.head_mixing == "group_mlp" ? 2.0 * C * C : C * C;  // out_mlp's fc1 and fc2, or Wo
}

double head_mixing_flops_per_token(const ModelConfig& c, int64_t keys) {
  if (c.head_mixing == "none") return 0.0;
  // Each mixed logit (and each mixed probability) of a query head is a sum over the n = H / g heads of
  // its group, n multiply-adds, for each of the `keys` keys: 2 n keys per query head per mix, over H
  // heads and two mixes (logits, probabilities): 2 * 2 * H * n * keys per token.
  const double H = static_cast<double>(c.n_heads);
  const double n = H / static_cast<double>(head_mixing_groups(c.head_mixing, c.head_groups));
  return 2.0 * 2.0 * H * n * static_cast<double>(keys);
}

double block_flops_per_token(const ModelConfig& c, int64_t keys) {
  const double C = static_cast<double>(c.d_model), Dk = C / static_cast<double>(c.n_heads);
  const double kv = static_cast<double>(c.n_kv_heads) * Dk;
  // Wq, Wk, Wv, Wo (or group_mlp's MLP) as they exist, and the gate. Top-k gating computes k of the H
  // heads' attention per token; the projections stay dense (every head's K and V serve the tokens
  // that pick it).
  const double attn_weights = C * C + 2.0 * C * kv + attention_output_weights(c) + gate_weight_count(c);
  const double ffn_weights = 2.0 * C * static_cast<double>(c.d_ff);
  return 2.0 * (attn_weights + ffn_weights) + 2.0 * 2.0 * static_cast<double>(keys) * C * computed_head_share(c) +
         head_mixing_flops_per_token(c, keys);
}

FlopCount LanguageModel::flops_per_token(const ModelConfig& c, int64_t seq_len) {
  FlopCount f;
  f.forward_per_token = static_cast<double>(c.n_layers) * block_flops_per_token(c, seq_len) +
                        2.0 * static_cast<double>(c.d_model) * static_cast<double>(c.vocab_size);
  f.train_per_token = 3.0 * f.forward_per_token;
  return f;
}

Tensor LanguageModel::forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  Network& net = impl_->net;
  Tensor x = net.embed(tokens, B, T, 0);  // (B, T, C)
  for (auto& block : net.blocks) x = block->forward(x);
  impl_->collect_recorded();
  return net.logits(x);
}

Tensor LanguageModel::loss(const Tensor& logits, const std::vector<int32_t>& targets) {
  return cross_entropy(logits, targets);
}

KVCache LanguageModel::make_cache(int64_t B) const {
  const ModelConfig& c = impl_->net.config;
  KVCache cache;
  cache.batch = B;
  const int64_t width = c.n_kv_heads * (c.d_model / c.n_heads);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    cache.keys.push_back(Tensor::zeros({B, c.max_seq_len, width}));    // (B, T_max, Hkv*Dk)
    cache.values.push_back(Tensor::zeros({B, c.max_seq_len, width}));  // (B, T_max, Hkv*Dv)
  }
  return cache;
}

Tensor LanguageModel::forward_cached(KVCache& cache, const std::vector<int32_t>& tokens, int64_t B, int64_t T_new) {
  TFM_CHECK(B == cache.batch, "LanguageModel::forward_cached", "batch ", B, " but the cache was made for ",
            cache.batch);
  NoGradGuard no_grad;  // decoding only
  Network& net = impl_->net;
  Tensor x = net.embed(tokens, B, T_new, cache.length);  // (B, T_new, C)
  for (size_t l = 0; l < net.blocks.size(); ++l)
    x = net.blocks[l]->forward_cached(x, cache.keys[l], cache.values[l], cache.length);
  cache.length += T_new;
  impl_->collect_recorded();
  return net.logits(x);
}

void LanguageModel::set_record_attention(bool on) {
  impl_->record_attention = on;
  for (auto& b : impl_->net.blocks) b->attn.record = on;
}
void LanguageModel::set_head_gates(const std::vector<Tensor>& gates) {
  auto& blocks = impl_->net.blocks;
  TFM_CHECK(gates.empty() || gates.size() == blocks.size(), "LanguageModel::set_head_gates", "expected ",
            blocks.size(), " gates (one per layer) or none, got ", gates.size());
  for (size_t l = 0; l < blocks.size(); ++l) blocks[l]->attn.head_gate = gates.empty() ? Tensor() : gates[l];
}

const std::vector<Tensor>& LanguageModel::attention_probabilities() const { return impl_->probabilities; }
const std::vector<Tensor>& LanguageModel::head_outputs() const { return impl_->head_outputs; }

}  // namespace tfm
