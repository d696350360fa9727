// The language model (language_model.h) from the layers of nn/.
// Legend: B batch, T time, C = d_model, H heads, Hkv kv heads, Dk = C / H, F = d_ff, V vocabulary.
#include "tfm/models/language_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tfm/engine/ops.h"
#include "tfm/engine/strings.h"
#include "tfm/nn/blocks.h"

namespace tfm {
namespace {

ModelConfig checked_for_language_model(ModelConfig c) {
  c = resolved(c);
  check_model_config(c, "LanguageModel");
  TFM_CHECK(c.vocab_size > 0, "LanguageModel", "vocab_size must be positive, got ", c.vocab_size);
  return c;
}

// One extra head of multi-token prediction (model.mtp_heads): a pre-norm residual branch whose body is one
// linear map, z = x + W norm(x), x the last block's output (B, T, C), W (C, C) without bias; the shared final
// norm and output head then give its logits. Gloeckle et al. 2024 ("Better & Faster Large Language Models
// via Multi-token Prediction", sec. 2) give each future token its own transformer layer on a shared trunk
// and share the unembedding; DeepSeek-V3 (2024, sec. 2.2) chains such modules (an RMSNorm, a projection, a
// block) before a shared output head. One norm and one C x C matrix per head is the cheapest form of the
// same idea: K (C^2 + C) parameters beside the trunk's ~12 L C^2, and a head of its own without a V x C
// unembedding; the residual path lets the loss of token t+1+k reach the trunk directly.
struct MtpBranch : Module {
  explicit MtpBranch(const ModelConfig& c) : norm(c.d_model, c), proj(c.d_model, c.d_model, false) {
    register_module("norm", &norm);
    register_module("proj", &proj);
  }
  Tensor forward(const Tensor& x) { return x + proj.forward(norm.forward(x)); }  // (B, T, C)
  Norm norm;
  Linear proj;
};

// The module tree, registered in the reference's order: emb, pos, blocks.i, ln_f, head.
struct Network : Module {
  explicit Network(const ModelConfig& c) : config(c), emb(c.vocab_size, c.d_model) {
    register_module("emb", &emb);
    if (c.positional_encoding == PositionalEncoding::Learned) {
      pos = std::make_unique<LearnedPositionalEmbedding>(c.max_seq_len, c.d_model);
      register_module("pos", pos.get());
    } else if (c.positional_encoding == PositionalEncoding::Sinusoidal) {
      pe = std::make_unique<SinusoidalPositionalEncoding>(c.max_seq_len, c.d_model);
    }  // RoPE: no table here; every self-attention layer turns its queries and keys
    for (int64_t i = 0; i < c.n_layers; ++i) {
      blocks.push_back(std::make_unique<EncoderBlock>(c, c.causal));
      register_module("blocks." + std::to_string(i), blocks.back().get());
    }
    if (c.norm_position == NormPosition::Pre) {
      ln_f = std::make_unique<Norm>(c.d_model, c);
      register_module("ln_f", ln_f.get());
    }
    if (!c.tie_embeddings) {
      head = std::make_unique<Linear>(c.d_model, c.vocab_size, false);
      register_module("head", head.get());
    }
    // The tricks' parameters come last in their modules: with a trick off or on, the other parameters
    // draw the same initial values.
    for (size_t l = 0; l < blocks.size(); ++l) {
      if (c.x0_skip) blocks[l]->use_x0_mix();
      if (c.value_residual) blocks[l]->attn.use_value_residual(&first_values, l == 0);
    }
    if (c.bigram_buckets > 0) {
      bigram = std::make_unique<Embedding>(c.bigram_buckets, c.d_model);
      register_module("bigram", bigram.get());
    }
    for (int64_t k = 1; k <= c.mtp_heads; ++k) {  // mtp.k predicts token t+1+k
      mtp.push_back(std::make_unique<MtpBranch>(c));
      register_module("mtp." + std::to_string(k), mtp.back().get());
    }
  }

  // Token and position embeddings for positions [start, start + T): (B, T, C), plus the bigram
  // embedding; `previous` holds each sequence's token before position start (empty: none).
  Tensor embed(const std::vector<int32_t>& tokens, int64_t B, int64_t T, int64_t start,
               const std::vector<int32_t>& previous, const char* where) {
    const Tensor x = embed_with_positions(*this, emb, pe.get(), pos.get(), config.max_seq_len, tokens, B, T,
                                          start, config.dropout, where);
    if (!bigram) return x;
    const int64_t V = config.vocab_size, N = config.bigram_buckets;
    std::vector<int32_t> rows(static_cast<size_t>(B * T), 0);
    Tensor has_previous = Tensor::zeros({B, T, 1});  // 0 where a position has no token before it
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t prev = t > 0 ? tokens[b * T + t - 1] : previous.empty() ? -1 : previous[b];
        if (prev < 0) continue;
        rows[b * T + t] = static_cast<int32_t>((prev * V + tokens[b * T + t]) % N);
        has_previous.data()[b * T + t] = 1.0f;
      }
    return x + bigram->forward(rows, {B, T}) * has_previous;  // (B, T, C)
  }

  Tensor logits(const Tensor& x) {
    const Tensor out = output_logits(x, ln_f.get(), head.get(), emb.weight);  // (B, T, V)
    const float c = config.logit_softcap;
    return c > 0.0f ? tanh(out / c) * c : out;
  }

  // The blocks over the embedding output x0 (B, T, C), with the x0 skip; `block(l, x)` runs block l.
  template <class RunBlock>
  Tensor run_blocks(const Tensor& x0, RunBlock&& block) {
    Tensor x = x0;
    for (size_t l = 0; l < blocks.size(); ++l) x = block(l, config.x0_skip ? blocks[l]->mix_x0(x, x0) : x);
    first_values = Tensor();  // the value residual's slot: held by the graph, not here
    return x;
  }

  ModelConfig config;
  Embedding emb;
  std::unique_ptr<LearnedPositionalEmbedding> pos;
  std::unique_ptr<SinusoidalPositionalEncoding> pe;
  std::vector<std::unique_ptr<EncoderBlock>> blocks;
  std::unique_ptr<Norm> ln_f;
  std::unique_ptr<Linear> head;
  std::unique_ptr<Embedding> bigram;
  std::vector<std::unique_ptr<MtpBranch>> mtp;
  Tensor first_values;  // the value residual's: the first layer's V of the current forward
};

}  // namespace

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
    : impl_(std::make_unique<Impl>(checked_for_language_model(config))) {
  adopt_parameters(impl_->net, init_seed, impl_->net.config.n_layers);
  // The tricks' initial values (their parameters drew nothing or were drawn last: the others are as
  // without them).
  const bool zero_init = impl_->net.config.zero_init;
  for (const NamedParameter& p : parameters()) {
    Tensor v = p.value;
    if (ends_with(p.name, ".x0_mix")) {
      v.fill_(0.0f);
      v.data()[0] = 1.0f;
    } else if (ends_with(p.name, ".value_lambda")) {
      v.fill_(0.5f);
    } else if (p.name == "bigram.weight" ||
               (zero_init && (ends_with(p.name, "wo.weight") || ends_with(p.name, "fc2.weight") ||
                              p.name == "head.weight" || ends_with(p.name, ".proj.weight")))) {
      v.fill_(0.0f);
    }
  }
}

LanguageModel::~LanguageModel() = default;

const ModelConfig& LanguageModel::config() const {
  return impl_->net.config;
}

Cost LanguageModel::cost(const ModelConfig& config, int64_t B_, int64_t T_) {
  const ModelConfig c = resolved(config);
  const double B = static_cast<double>(B_), T = static_cast<double>(T_), rows = B * T;
  const double C = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab_size);
  Cost cost;
  cost.parameters = V * C;  // the token embedding
  if (c.positional_encoding == PositionalEncoding::Learned)
    cost.parameters += static_cast<double>(c.max_seq_len) * C;
  cost += EncoderBlock::cost(c, B_, T_).times(static_cast<double>(c.n_layers));
  if (c.norm_position == NormPosition::Pre) cost += Norm::cost(c.d_model, c.norm, rows);  // ln_f
  cost += linear_cost(C, V, false, rows);  // the head: x E^T when tied
  if (c.tie_embeddings) cost.parameters -= V * C;
  const double L = static_cast<double>(c.n_layers), kv = static_cast<double>(c.n_kv_heads * c.head_dim());
  if (c.bigram_buckets > 0) {  // the table, and its rows before the add
    cost.parameters += static_cast<double>(c.bigram_buckets) * C;
    cost.activations += rows * C;
  }
  if (c.x0_skip) {  // (a, b) per block; each block's unmixed input
    cost.parameters += 2.0 * L;
    cost.activations += L * rows * C;
  }
  if (c.value_residual) {  // lambda per later layer; each later layer's unmixed values
    cost.parameters += L - 1.0;
    cost.activations += (L - 1.0) * rows * kv;
  }
  if (c.logit_softcap > 0.0f) cost.activations += rows * V;  // the capped logits' tanh
  // Multi-token prediction: a training step's forward runs each extra head (forward_multi_token) over
  // every position: its norm and C x C projection, the final norm again, the shared head's product.
  for (int64_t k = 0; k < c.mtp_heads; ++k) {
    cost += Norm::cost(c.d_model, c.norm, rows);
    cost += linear_cost(C, C, false, rows);
    // The shared head (and ln_f), whose parameters are the next-token head's.
    Cost shared = linear_cost(C, V, false, rows);
    if (c.norm_position == NormPosition::Pre) shared += Norm::cost(c.d_model, c.norm, rows);
    shared.parameters = 0;
    cost += shared;
    cost.activations += 2.0 * rows * C + (c.logit_softcap > 0.0f ? 3.0 : 2.0) * rows * V;
  }
  // The backward's largest transient (~5 C per token) and the logits with their gradient.
  cost.activations += 5.0 * rows * C + 2.0 * rows * V;
  return cost;
}

FlopCount LanguageModel::flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return tfm::flops_per_token(cost(c, 1, seq_len), static_cast<double>(seq_len));
}

Tensor LanguageModel::forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  return forward_multi_token(tokens, B, T, false).logits;
}

MultiTokenLogits LanguageModel::forward_multi_token(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                                    bool extra_heads) {
  Network& net = impl_->net;
  const Tensor x0 = net.embed(tokens, B, T, 0, {}, "LanguageModel::forward");  // (B, T, C)
  const Tensor x = net.run_blocks(x0, [&](size_t l, const Tensor& h) { return net.blocks[l]->forward(h); });
  impl_->collect_recorded();
  MultiTokenLogits out;
  out.logits = net.logits(x);  // (B, T, V)
  if (extra_heads)
    for (auto& branch : net.mtp) out.extra.push_back(net.logits(branch->forward(x)));  // (B, T, V)
  return out;
}

Tensor LanguageModel::loss(const Tensor& logits, const std::vector<int32_t>& targets) {
  return cross_entropy(logits, targets);
}

Tensor LanguageModel::mtp_loss(const std::vector<Tensor>& extra, const std::vector<int32_t>& targets,
                               int64_t B, int64_t T) {
  TFM_CHECK(!extra.empty() && static_cast<int64_t>(targets.size()) == B * T &&
                static_cast<int64_t>(extra.size()) < T,
            "LanguageModel::mtp_loss", "expected 1 to T - 1 = ", T - 1, " extra heads and B*T = ", B * T,
            " targets, got ", extra.size(), " heads and ", targets.size(), " targets");
  constexpr int32_t kNoTarget = -100;  // cross_entropy's ignore_index: left out of the mean
  Tensor sum;
  std::vector<int32_t> shifted(targets.size());
  for (size_t i = 0; i < extra.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i) + 1;  // head k predicts targets[t + k] (token t+1+k)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) shifted[b * T + t] = t + k < T ? targets[b * T + t + k] : kNoTarget;
    const Tensor l = cross_entropy(extra[i], shifted);  // mean over the B (T - k) positions with a target
    sum = sum.defined() ? sum + l : l;
  }
  return extra.size() == 1 ? sum : sum * (1.0f / static_cast<float>(extra.size()));
}

KVCache LanguageModel::make_cache(int64_t B, int64_t positions) const {
  const ModelConfig& c = impl_->net.config;
  TFM_CHECK(B >= 0, "LanguageModel::make_cache", "expected B >= 0 sequences, got ", B);
  TFM_CHECK(positions >= 0 && positions <= c.max_seq_len, "LanguageModel::make_cache", "positions ",
            positions, " is not in [0, max_seq_len ", c.max_seq_len, "]");
  const int64_t P = positions > 0 ? positions : c.max_seq_len;
  KVCache cache;
  cache.batch = B;
  const int64_t width = c.n_kv_heads * (c.d_model / c.n_heads);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    cache.keys.push_back(Tensor::zeros({B, P, width}));    // (B, P, Hkv*Dk)
    cache.values.push_back(Tensor::zeros({B, P, width}));  // (B, P, Hkv*Dv)
  }
  return cache;
}

Tensor LanguageModel::forward_cached(KVCache& cache, const std::vector<int32_t>& tokens, int64_t B,
                                     int64_t T_new) {
  TFM_CHECK(B == cache.batch, "LanguageModel::forward_cached", "batch ", B, " but the cache was made for ",
            cache.batch);
  NoGradGuard no_grad;  // decoding only
  Network& net = impl_->net;
  const Tensor x0 = net.embed(tokens, B, T_new, cache.length, cache.last_tokens,
                              "LanguageModel::forward_cached");  // (B, T_new, C)
  const Tensor x = net.run_blocks(x0, [&](size_t l, const Tensor& h) {
    return net.blocks[l]->forward_cached(h, cache.keys[l], cache.values[l], cache.length);
  });
  cache.length += T_new;
  if (T_new > 0) {
    cache.last_tokens.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) cache.last_tokens[b] = tokens[b * T_new + T_new - 1];
  }
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

const std::vector<Tensor>& LanguageModel::attention_probabilities() const {
  return impl_->probabilities;
}
const std::vector<Tensor>& LanguageModel::head_outputs() const {
  return impl_->head_outputs;
}

}  // namespace tfm
