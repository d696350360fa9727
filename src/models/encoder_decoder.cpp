// The Transformer encoder-decoder of encoder_decoder.h: the module tree, teacher-forced forward, incremental
// decoding with self- and cross-attention caches, greedy and beam search.
// Legend: B batch, S source length, T target length, C = d_model, H heads, Hkv kv heads, Dk = C / H,
// V target vocabulary, Vs source vocabulary, N beam width, R = cache rows (B or B * N).
#include "tfm/models/encoder_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tfm/engine/ops.h"
#include "tfm/models/beam_search.h"
#include "tfm/nn/blocks.h"

namespace tfm {
namespace {

ModelConfig checked_seq2seq_config(ModelConfig c) {
  c = resolved(c);
  check_model_config(c, "Seq2SeqModel");
  TFM_CHECK(c.vocab_size > 0 && c.source_vocab_size > 0, "Seq2SeqModel", "vocab_size ", c.vocab_size,
            " and source_vocab_size ", c.source_vocab_size, " must be positive");
  TFM_CHECK(c.n_encoder_layers >= 0 && c.n_decoder_layers >= 0, "Seq2SeqModel", "n_encoder_layers ",
            c.n_encoder_layers, " and n_decoder_layers ", c.n_decoder_layers, " must be >= 0");
  return c;
}

// Rows `rows` of t (R, ...) contiguous -> (rows.size(), ...), a copy (cache bookkeeping, not recorded).
Tensor select_batch_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape();
  const int64_t R = shape[0], row = t.numel() / std::max<int64_t>(R, 1);
  shape[0] = static_cast<int64_t>(rows.size());
  const Tensor src = contiguous_values(t);
  Tensor out = Tensor::empty(shape);  // (rows, ...)
  for (size_t i = 0; i < rows.size(); ++i) {
    TFM_CHECK(rows[i] >= 0 && rows[i] < R, "Seq2SeqModel::select_rows", "row ", rows[i], " outside [0, ", R,
              ")");
    std::memcpy(out.data() + static_cast<int64_t>(i) * row, src.data() + rows[i] * row, sizeof(float) * row);
  }
  return out;
}

// The module tree, registered in the order of encoder_decoder.h's parameter names.
struct Seq2SeqNetwork : Module {
  explicit Seq2SeqNetwork(const ModelConfig& c)
      : config(c), src_emb(c.source_vocab_size, c.d_model), tgt_emb(c.vocab_size, c.d_model) {
    const bool learned = c.positional_encoding == PositionalEncoding::Learned;
    register_module("src_emb", &src_emb);
    if (learned) {
      src_pos = std::make_unique<LearnedPositionalEmbedding>(c.max_seq_len, c.d_model);
      register_module("src_pos", src_pos.get());
    } else if (c.positional_encoding == PositionalEncoding::Sinusoidal) {
      pe = std::make_unique<SinusoidalPositionalEncoding>(c.max_seq_len, c.d_model);
    }  // RoPE: the self-attention layers of both stacks turn their queries and keys
    for (int64_t i = 0; i < c.n_encoder_layers; ++i) {
      encoder.push_back(std::make_unique<EncoderBlock>(c, false));
      register_module("encoder.blocks." + std::to_string(i), encoder.back().get());
    }
    const bool pre = c.norm_position == NormPosition::Pre;
    if (pre) {
      encoder_ln = std::make_unique<Norm>(c.d_model, c);
      register_module("encoder.ln_f", encoder_ln.get());
    }
    register_module("tgt_emb", &tgt_emb);
    if (learned) {
      tgt_pos = std::make_unique<LearnedPositionalEmbedding>(c.max_seq_len, c.d_model);
      register_module("tgt_pos", tgt_pos.get());
    }
    for (int64_t i = 0; i < c.n_decoder_layers; ++i) {
      decoder.push_back(std::make_unique<DecoderBlock>(c));
      register_module("decoder.blocks." + std::to_string(i), decoder.back().get());
    }
    if (pre) {
      decoder_ln = std::make_unique<Norm>(c.d_model, c);
      register_module("decoder.ln_f", decoder_ln.get());
    }
    if (!c.tie_embeddings) {
      head = std::make_unique<Linear>(c.d_model, c.vocab_size, false);
      register_module("head", head.get());
    }
  }

  void check_source(const std::vector<int64_t>& src_lengths, int64_t B, int64_t S, const char* where) const {
    TFM_CHECK(static_cast<int64_t>(src_lengths.size()) == B, where, "expected ", B, " src_lengths, got ",
              src_lengths.size());
    for (int64_t b = 0; b < B; ++b)
      TFM_CHECK(src_lengths[b] >= 1 && src_lengths[b] <= S, where, "src_lengths[", b, "] = ", src_lengths[b],
                " is outside [1, S = ", S, "]");
  }

  Tensor logits(const Tensor& y) { return output_logits(y, decoder_ln.get(), head.get(), tgt_emb.weight); }

  ModelConfig config;
  Embedding src_emb, tgt_emb;
  std::unique_ptr<LearnedPositionalEmbedding> src_pos, tgt_pos;
  std::unique_ptr<SinusoidalPositionalEncoding> pe;  // both sides' table
  std::vector<std::unique_ptr<EncoderBlock>> encoder;
  std::vector<std::unique_ptr<DecoderBlock>> decoder;
  std::unique_ptr<Norm> encoder_ln, decoder_ln;
  std::unique_ptr<Linear> head;
};

}  // namespace

struct Seq2SeqModel::Impl {
  explicit Impl(const ModelConfig& c) : net(c) {}
  Seq2SeqNetwork net;
  bool record_attention = false;
  std::vector<Tensor> encoder_probs, self_probs, cross_probs;

  void collect_encoder() {
    encoder_probs.clear();
    if (record_attention)
      for (auto& b : net.encoder) encoder_probs.push_back(b->attn.last_probabilities);
  }
  void collect_decoder() {
    self_probs.clear();
    cross_probs.clear();
    if (!record_attention) return;
    for (auto& b : net.decoder) {
      self_probs.push_back(b->attn.last_probabilities);
      cross_probs.push_back(b->cross.last_probabilities);
    }
  }
};

Seq2SeqModel::Seq2SeqModel(const ModelConfig& config, uint64_t init_seed)
    : impl_(std::make_unique<Impl>(checked_seq2seq_config(config))) {
  const ModelConfig& c = impl_->net.config;
  adopt_parameters(impl_->net, init_seed, c.n_encoder_layers + c.n_decoder_layers);
}

Seq2SeqModel::~Seq2SeqModel() = default;

const ModelConfig& Seq2SeqModel::config() const {
  return impl_->net.config;
}

Cost Seq2SeqModel::cost(const ModelConfig& config, int64_t B_, int64_t S_, int64_t T_) {
  const ModelConfig c = resolved(config);
  const double B = static_cast<double>(B_), S = static_cast<double>(S_), T = static_cast<double>(T_);
  const double C = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab_size);
  Cost cost;
  cost.parameters = (static_cast<double>(c.source_vocab_size) + V) * C;  // both embeddings
  if (c.positional_encoding == PositionalEncoding::Learned)
    cost.parameters += 2.0 * static_cast<double>(c.max_seq_len) * C;  // src_pos, tgt_pos
  cost += EncoderBlock::cost(c, B_, S_).times(static_cast<double>(c.n_encoder_layers));
  cost += DecoderBlock::cost(c, B_, T_, S_).times(static_cast<double>(c.n_decoder_layers));
  if (c.norm_position == NormPosition::Pre) {  // encoder.ln_f, decoder.ln_f
    cost += Norm::cost(c.d_model, c.norm, B * S);
    cost += Norm::cost(c.d_model, c.norm, B * T);
  }
  cost += linear_cost(C, V, false, B * T);  // the head: y E_tgt^T when tied
  if (c.tie_embeddings) cost.parameters -= V * C;
  // The backward's largest transient (~5 C per token of the longer side) and the logits with their
  // gradient.
  cost.activations += 5.0 * B * std::max(S, T) * C + 2.0 * B * T * V;
  return cost;
}

FlopCount Seq2SeqModel::flops_per_token(const ModelConfig& c, int64_t src_len, int64_t tgt_len) {
  return tfm::flops_per_token(cost(c, 1, src_len, tgt_len), static_cast<double>(tgt_len));
}

Tensor Seq2SeqModel::encode(const std::vector<int32_t>& src, const std::vector<int64_t>& src_lengths,
                            int64_t B, int64_t S) {
  Seq2SeqNetwork& net = impl_->net;
  net.check_source(src_lengths, B, S, "Seq2SeqModel::encode");
  Tensor x = embed_with_positions(net, net.src_emb, net.pe.get(), net.src_pos.get(), net.config.max_seq_len,
                                  src, B, S, 0, net.config.dropout,
                                  "Seq2SeqModel::encode");  // (B, S, C)
  for (auto& block : net.encoder) x = block->forward(x, src_lengths);
  impl_->collect_encoder();
  return net.encoder_ln ? net.encoder_ln->forward(x) : x;  // (B, S, C)
}

Tensor Seq2SeqModel::decode(const Tensor& memory, const std::vector<int64_t>& src_lengths,
                            const std::vector<int32_t>& tgt_in, int64_t T) {
  Seq2SeqNetwork& net = impl_->net;
  TFM_CHECK(memory.dim() == 3 && memory.size(2) == net.config.d_model, "Seq2SeqModel::decode",
            "expected memory (B, S, ", net.config.d_model, "), got ", shape_str(memory.shape()));
  const int64_t B = memory.size(0);
  net.check_source(src_lengths, B, memory.size(1), "Seq2SeqModel::decode");
  Tensor y = embed_with_positions(net, net.tgt_emb, net.pe.get(), net.tgt_pos.get(), net.config.max_seq_len,
                                  tgt_in, B, T, 0, net.config.dropout, "Seq2SeqModel::decode");  // (B, T, C)
  for (auto& block : net.decoder) y = block->forward(y, memory, src_lengths);
  impl_->collect_decoder();
  return net.logits(y);  // (B, T, V)
}

Tensor Seq2SeqModel::forward(const std::vector<int32_t>& src, const std::vector<int64_t>& src_lengths,
                             int64_t B, int64_t S, const std::vector<int32_t>& tgt_in, int64_t T) {
  const Tensor memory = encode(src, src_lengths, B, S);  // (B, S, C)
  return decode(memory, src_lengths, tgt_in, T);         // (B, T, V)
}

Seq2SeqCache Seq2SeqModel::make_cache(const Tensor& memory, const std::vector<int64_t>& src_lengths,
                                      int64_t positions) const {
  NoGradGuard no_grad;
  const Seq2SeqNetwork& net = impl_->net;
  const ModelConfig& c = net.config;
  TFM_CHECK(memory.dim() == 3 && memory.size(2) == c.d_model, "Seq2SeqModel::make_cache",
            "expected memory (B, S, ", c.d_model, "), got ", shape_str(memory.shape()));
  Seq2SeqCache cache;
  cache.rows = memory.size(0);
  cache.source_len = memory.size(1);
  net.check_source(src_lengths, cache.rows, cache.source_len, "Seq2SeqModel::make_cache");
  cache.src_lengths = src_lengths;
  TFM_CHECK(positions >= 0 && positions <= c.max_seq_len, "Seq2SeqModel::make_cache", "positions ", positions,
            " is not in [0, max_seq_len ", c.max_seq_len, "]");
  const int64_t P = positions > 0 ? positions : c.max_seq_len;
  const int64_t width = c.n_kv_heads * (c.d_model / c.n_heads);
  for (const auto& block : net.decoder) {
    cache.self_keys.push_back(Tensor::zeros({cache.rows, P, width}));    // (R, P, Hkv*Dk)
    cache.self_values.push_back(Tensor::zeros({cache.rows, P, width}));  // (R, P, Hkv*Dv)
    auto [k, v] = block->cross.project_key_value(memory, memory);        // (R, S, Hkv*Dk) each
    cache.cross_keys.push_back(k);
    cache.cross_values.push_back(v);
  }
  return cache;
}

Tensor Seq2SeqModel::forward_cached(Seq2SeqCache& cache, const std::vector<int32_t>& tgt, int64_t T_new) {
  NoGradGuard no_grad;  // decoding only
  Seq2SeqNetwork& net = impl_->net;
  Tensor y = embed_with_positions(net, net.tgt_emb, net.pe.get(), net.tgt_pos.get(), net.config.max_seq_len,
                                  tgt, cache.rows, T_new, cache.length, net.config.dropout,
                                  "Seq2SeqModel::forward_cached");  // (R, T_new, C)
  for (size_t l = 0; l < net.decoder.size(); ++l)
    y = net.decoder[l]->forward_cached(y, cache.self_keys[l], cache.self_values[l], cache.length,
                                       cache.cross_keys[l], cache.cross_values[l], cache.src_lengths);
  cache.length += T_new;
  impl_->collect_decoder();
  return net.logits(y);  // (R, T_new, V)
}

void Seq2SeqModel::select_rows(Seq2SeqCache& cache, const std::vector<int64_t>& rows) {
  for (auto* list : {&cache.self_keys, &cache.self_values, &cache.cross_keys, &cache.cross_values})
    for (Tensor& t : *list) t = select_batch_rows(t, rows);
  std::vector<int64_t> lengths;
  for (int64_t r : rows) lengths.push_back(cache.src_lengths[r]);
  cache.src_lengths = lengths;
  cache.rows = static_cast<int64_t>(rows.size());
}

std::vector<std::vector<int32_t>> Seq2SeqModel::translate(const std::vector<int32_t>& src,
                                                          const std::vector<int64_t>& src_lengths, int64_t B,
                                                          int64_t S, const TranslateOptions& o) {
  const ModelConfig& c = impl_->net.config;
  const int64_t N = o.beam, V = c.vocab_size, max_len = o.max_len > 0 ? o.max_len : c.max_seq_len;
  TFM_CHECK(N >= 1, "Seq2SeqModel::translate", "beam must be >= 1, got ", N);
  TFM_CHECK(max_len <= c.max_seq_len, "Seq2SeqModel::translate", "max_len ", max_len, " exceeds max_seq_len ",
            c.max_seq_len);
  NoGradGuard no_grad;
  struct EvalMode {  // decoding runs without dropout; the caller's mode comes back even on an error
    Model& m;
    bool was;
    ~EvalMode() { m.set_training(was); }
  } eval_mode{*this, training()};
  set_training(false);
  const Tensor memory = encode(src, src_lengths, B, S);  // (B, S, C)

  // R = B * N rows, row b * N + i = hypothesis i of source b; every row starts as <bos>.
  const int64_t R = B * N;
  std::vector<int64_t> expand(R);
  for (int64_t r = 0; r < R; ++r) expand[r] = r / N;
  std::vector<int64_t> row_lengths(R);
  for (int64_t r = 0; r < R; ++r) row_lengths[r] = src_lengths[expand[r]];
  Tensor row_memory = select_batch_rows(memory, expand);  // (R, S, C)
  Seq2SeqCache cache;
  // <bos> and the max_len tokens after it (the last one is fed only if the search goes on).
  if (o.use_cache) cache = make_cache(row_memory, row_lengths, std::min(c.max_seq_len, max_len + 1));
  NextTokenModel next;
  next.vocab_size = V;
  // Log-probabilities (R, V) of the next token after each row's prefix: the cached decoder fed each
  // row's last token, or (the reference for tests) the whole decoder over the prefixes.
  next.log_probs = [&](int64_t t, const std::vector<std::vector<int32_t>>& prefix) {
    Tensor logits;  // (R, 1, V)
    if (o.use_cache) {
      std::vector<int32_t> last(R);
      for (int64_t r = 0; r < R; ++r) last[r] = prefix[r].back();
      logits = forward_cached(cache, last, 1);
    } else {
      std::vector<int32_t> all;
      for (const auto& p : prefix) all.insert(all.end(), p.begin(), p.end());
      logits = narrow(decode(row_memory, row_lengths, all, t + 1), 1, t, 1);
    }
    return log_softmax(reshape(logits, {R, V})).to_vector();  // (R, V)
  };
  // Hypotheses move between the rows of their source: the cache follows (every row of a source reads
  // the same encoder output, so row_memory needs no reordering).
  if (o.use_cache) next.reorder = [&](const std::vector<int64_t>& parents) { select_rows(cache, parents); };
  BeamSearchOptions search;
  search.beam = N, search.max_len = max_len, search.alpha = o.alpha, search.penalty = o.penalty;
  search.bos = o.bos, search.eos = o.eos;
  return beam_search(B, next, search);
}

void Seq2SeqModel::set_record_attention(bool on) {
  impl_->record_attention = on;
  for (auto& b : impl_->net.encoder) b->attn.record = on;
  for (auto& b : impl_->net.decoder) b->attn.record = b->cross.record = on;
}
const std::vector<Tensor>& Seq2SeqModel::encoder_attention() const {
  return impl_->encoder_probs;
}
const std::vector<Tensor>& Seq2SeqModel::decoder_self_attention() const {
  return impl_->self_probs;
}
const std::vector<Tensor>& Seq2SeqModel::decoder_cross_attention() const {
  return impl_->cross_probs;
}

}  // namespace tfm
