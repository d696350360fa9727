// Multi-head attention through the fused op (dot scoring) or a composition of primitive ops (additive
// scoring, head mixing).
// Legend: B batch, T time (Tq, Tk), C = d_model, H heads, Hkv kv heads, G = H / Hkv, Dk = Dv = C / H.
#include "tfm/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "tfm/engine/fused_attention.h"
#include "tfm/engine/ops.h"

namespace tfm {

namespace {
ModelConfig checked_for_attention(ModelConfig c) {
  c = resolved(c);
  check_model_config(c, "MultiHeadAttention");
  return c;
}

// 1 where query i (at absolute position i + Tk - Tq) must not see key j: (B, 1, 1, Tq, Tk).
Tensor attention_mask(int64_t B, int64_t Tq, int64_t Tk, bool causal,
                      const std::vector<int64_t>& key_lengths) {
  Tensor mask = Tensor::zeros({B, 1, 1, Tq, Tk});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) {
        const bool hidden = (causal && j > i + Tk - Tq) || (!key_lengths.empty() && j >= key_lengths[b]);
        mask.data()[(b * Tq + i) * Tk + j] = hidden ? 1.0f : 0.0f;
      }
  return mask;
}

// Additive scores s[b,h,i,j] = sum_d w_v[h,d] tanh(q[b,i,h,d] + k[b,j,g(h),d]), by broadcasting query
// heads grouped per kv head: (B, Hkv, G, Tq, 1, Dk) + (B, Hkv, 1, 1, Tk, Dk). q (B, Tq, H*Dk), k (B, Tk,
// Hkv*Dk), score_v (H, Dk) -> (B, Hkv, G, Tq, Tk).
Tensor additive_scores(const Tensor& q, const Tensor& k, const Tensor& score_v, int64_t Hkv, int64_t G) {
  const int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), Dk = score_v.size(1);
  const Tensor qh =
      reshape(permute(reshape(q, {B, Tq, Hkv, G, Dk}), {0, 2, 3, 1, 4}), {B, Hkv, G, Tq, 1, Dk});
  const Tensor kh = reshape(permute(reshape(k, {B, Tk, Hkv, Dk}), {0, 2, 1, 3}), {B, Hkv, 1, 1, Tk, Dk});
  const Tensor e = tanh(qh + kh);                            // (B, Hkv, G, Tq, Tk, Dk)
  return sum(e * reshape(score_v, {Hkv, G, 1, 1, Dk}), -1);  // (B, Hkv, G, Tq, Tk)
}

// The heads' outputs from probabilities p (B, H, Tq, Tk) (or (B, Hkv, G, Tq, Tk)) and values v (B, Tk,
// Hkv*Dv), query head h reading kv head h / G -> (B, Tq, H*Dv).
Tensor weighted_values(const Tensor& p, const Tensor& v, int64_t Hkv, int64_t G) {
  const int64_t B = v.size(0), Tk = v.size(1), Dv = v.size(2) / Hkv, Tq = p.numel() / (B * Hkv * G * Tk);
  const Tensor vh = permute(reshape(v, {B, Tk, Hkv, Dv}), {0, 2, 1, 3});  // (B, Hkv, Tk, Dv)
  const Tensor oh = matmul(reshape(p, {B, Hkv, G * Tq, Tk}), vh);         // (B, Hkv, G*Tq, Dv)
  return reshape(permute(reshape(oh, {B, Hkv, G, Tq, Dv}), {0, 3, 1, 2, 4}), {B, Tq, Hkv * G * Dv});
}

// Mixes x (B, H, Tq, Tk) across the heads inside each of the g groups of mix (g, n, n):
// out[b, group*n + o] = sum_i mix[group, o, i] x[b, group*n + i]. One GEMM per (batch, group), (n, n)
// by (n, Tq*Tk); mix is broadcast over the batch (its gradient sums over it) because matmul's batch
// dims must match.
Tensor mix_heads(const Tensor& x, const Tensor& mix) {
  const int64_t B = x.size(0), H = x.size(1), Tq = x.size(2), Tk = x.size(3);
  const int64_t g = mix.size(0), n = mix.size(1);
  const Tensor m =
      B == 1 ? reshape(mix, {1, g, n, n}) : reshape(mix, {1, g, n, n}) * Tensor::ones({B, 1, 1, 1});
  const Tensor mixed = matmul(m, reshape(x, {B, g, n, Tq * Tk}));  // (B, g, n, Tq*Tk)
  return reshape(mixed, {B, H, Tq, Tk});
}
}  // namespace

MultiHeadAttention::MultiHeadAttention(const ModelConfig& config, bool causal, int64_t kdim, int64_t vdim)
    : config_(checked_for_attention(config)),
      causal_(causal),
      kdim_(kdim > 0 ? kdim : config_.d_model),
      vdim_(vdim > 0 ? vdim : config_.d_model),
      head_dim_(config_.head_dim()),
      wq(config_.d_model, config_.n_heads * head_dim_, config_.bias),  // (H*Dk, C)
      wk(kdim_, config_.n_kv_heads * head_dim_, config_.bias),         // (Hkv*Dk, kdim)
      wv(vdim_, config_.n_kv_heads * head_dim_, config_.bias),         // (Hkv*Dv, vdim)
      // (C, H*Dv); empty with group_mlp, whose out_mlp takes its place (no C x C floats left unused)
      wo(config_.head_mixing == HeadMixing::GroupMlp ? 0 : config_.n_heads * head_dim_,
         config_.head_mixing == HeadMixing::GroupMlp ? 0 : config_.d_model, config_.bias) {
  if (config_.qk_norm) {  // registered first: the reference's parameter order
    q_norm = std::make_unique<Norm>(head_dim_, NormKind::RMSNorm, config_.norm_eps);
    k_norm = std::make_unique<Norm>(head_dim_, NormKind::RMSNorm, config_.norm_eps);
    register_module("q_norm", q_norm.get());
    register_module("k_norm", k_norm.get());
  }
  if (config_.positional_encoding == PositionalEncoding::Rope)
    rope_ = std::make_unique<PositionTables>(config_.max_seq_len,
                                             [D = head_dim_, theta = config_.rope_theta](int64_t rows) {
                                               const auto [cos, sin] = rope_table(rows, D, theta);
                                               return std::vector<Tensor>{cos, sin};
                                             });
  register_module("wq", &wq);
  register_module("wk", &wk);
  register_module("wv", &wv);
  if (config_.head_mixing == HeadMixing::GroupMlp) {
    // Named out_mlp.fc1/fc2: counted as attention ("attn."/"cross." in the name) and fc2, which writes
    // into the residual stream as wo does, gets the residual output initialisation.
    out_mlp = std::make_unique<FeedForward>(config_.d_model, config_.d_model, Activation::Gelu, config_.bias);
    register_module("out_mlp", out_mlp.get());
  } else {
    register_module("wo", &wo);
  }
  if (config_.attention_score == AttentionScore::Additive)
    register_parameter("score_v", &score_v, {config_.n_heads, head_dim_});
  if (config_.head_mixing != HeadMixing::None) {
    const int64_t g = config_.mixing_groups(), n = config_.n_heads / g;
    register_parameter("mix_logits", &mix_logits, {g, n, n});    // (g, n, n)
    register_parameter("mix_weights", &mix_weights, {g, n, n});  // (g, n, n)
  }
  if (config_.head_gating == HeadGating::TopK) {
    gate = std::make_unique<Linear>(config_.d_model, config_.n_heads, false);  // (H, C)
    register_module("gate", gate.get());
    head_tokens.assign(config_.n_heads, 0.0);
  }
}

double MultiHeadAttention::computed_head_share(const ModelConfig& c) {
  return c.head_gating == HeadGating::TopK ? static_cast<double>(c.head_topk) / static_cast<double>(c.n_heads)
                                           : 1.0;
}

Cost MultiHeadAttention::cost(const ModelConfig& config, int64_t B_, int64_t Tq_, int64_t Tk_, int64_t kdim_,
                              int64_t vdim_) {
  const ModelConfig c = resolved(config);
  const double B = static_cast<double>(B_), Tq = static_cast<double>(Tq_), Tk = static_cast<double>(Tk_);
  const double C = static_cast<double>(c.d_model), H = static_cast<double>(c.n_heads);
  const double Dk = static_cast<double>(c.head_dim()), kv = static_cast<double>(c.n_kv_heads) * Dk;
  const double kdim = kdim_ > 0 ? static_cast<double>(kdim_) : C,
               vdim = vdim_ > 0 ? static_cast<double>(vdim_) : C;
  const double queries = B * Tq, keys = B * Tk, pairs = B * H * Tq * Tk;  // (query, key) pairs of all heads
  Cost cost = linear_cost(C, C, c.bias, queries);                         // Wq
  cost += linear_cost(kdim, kv, c.bias, keys);                            // Wk
  cost += linear_cost(vdim, kv, c.bias, keys);                            // Wv
  if (c.head_mixing == HeadMixing::GroupMlp)
    cost +=
        FeedForward::cost(c.d_model, c.d_model, Activation::Gelu, c.bias, queries);  // out_mlp, Wo's place
  else
    cost += linear_cost(C, C, c.bias, queries);                                      // Wo
  if (c.head_gating == HeadGating::TopK) cost += linear_cost(C, H, false, queries);  // the gate, no bias
  // Scores (dot: Q K^T; additive scores are elementwise, not products) and the weighted sum P V, over the
  // computed (query, head) pairs.
  const double share = computed_head_share(c);
  const bool dot = c.attention_score == AttentionScore::Dot;
  cost.flops += (dot ? 2.0 : 1.0) * 2.0 * pairs * Dk * share;
  if (!dot) cost.parameters += H * Dk;  // score_v
  // K and V; per query its output before the output projection and the softmax's max and 1/sum per head.
  cost.activations += keys * 2.0 * kv + queries * (C + 2.0 * H);
  if (c.qk_norm) {  // two gains of Dk; each head's 1/rms of Q and K, and K before its norm
    cost.parameters += 2.0 * Dk;
    cost.activations += queries * H + keys * (static_cast<double>(c.n_kv_heads) + kv);
  }
  if (c.head_gating == HeadGating::TopK) cost.activations += queries * 4.0 * H;  // gate logits, weights
  if (c.attention_dropout > 0.0f) cost.activations += pairs;                     // the dropout mask
  if (!dot) {  // composed ops over (B, H, Tq, Tk, Dk): tanh's output and a few score tensors
    cost.activations += pairs * (Dk + 4.0);
    cost.transient = std::max(cost.transient, 3.0 * pairs * Dk);
  }
  if (c.head_mixing != HeadMixing::None) {
    // Two (n, n) mixes per group over every (query, key) pair: mix_logits and mix_weights, (g, n, n) each.
    const double n = H / static_cast<double>(c.mixing_groups());
    cost.parameters += 2.0 * H * n;
    cost.flops += 2.0 * 2.0 * pairs * n;
    // The logits, the softmax's output, the masked and the mixed probabilities, and the queries' copy
    // in head-major layout (group_mlp's out_mlp keeps its hidden layer: counted above).
    cost.activations += 4.0 * pairs + queries * C;
    cost.transient = std::max(cost.transient, 3.0 * pairs);
  }
  return cost;
}

Tensor MultiHeadAttention::project_output(const Tensor& o) const {
  return out_mlp ? out_mlp->forward(o) : wo.forward(o);  // (B, Tq, H*Dv) -> (B, Tq, C)
}

Tensor MultiHeadAttention::take_auxiliary_loss() {
  Tensor t = auxiliary_loss_;
  auxiliary_loss_ = Tensor();
  return t;
}

Tensor MultiHeadAttention::gate_weights(const Tensor& x, std::vector<uint8_t>& active_rows) {
  const int64_t B = x.size(0), Tq = x.size(1), H = config_.n_heads, k = config_.head_topk;
  const Tensor logits = gate->forward(x);  // (B, Tq, H), contiguous
  // The selection is not differentiable (as in any mixture of experts): the gradient reaches the
  // gate through the softmax over the selected logits, and through the balance term.
  active_rows.assign(B * Tq * H, 0);
  Tensor unselected = Tensor::ones({B, Tq, H});  // 1 = not among the token's top k
  std::vector<int64_t> order(H);
  std::vector<float> picked(H, 0.0f);  // tokens that chose each head in this call
  const float* g = logits.data();
  for (int64_t r = 0; r < B * Tq; ++r) {
    for (int64_t h = 0; h < H; ++h) order[h] = h;
    // Highest logits first; ties go to the lower head index, so the choice is deterministic.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return g[r * H + a] > g[r * H + b] || (g[r * H + a] == g[r * H + b] && a < b);
    });
    for (int64_t j = 0; j < k; ++j) {
      active_rows[r * H + order[j]] = 1;
      unselected.data()[r * H + order[j]] = 0.0f;
      picked[order[j]] += 1.0f;
    }
  }
  for (int64_t h = 0; h < H; ++h) head_tokens[h] += picked[h];
  tokens_seen += static_cast<double>(B * Tq);
  // Computed on every forward, with or without a graph: it is part of the model's training loss, and
  // tfm gradcheck evaluates that loss without one.
  if (config_.head_balance_loss > 0.0f) {
    // f_h: share of the B*Tq*k slots that went to head h (a constant); P_h: mean gate probability.
    for (float& f : picked) f /= static_cast<float>(B * Tq * k);
    const Tensor p = mean(reshape(softmax(logits), {B * Tq, H}), 0);  // (H)
    auxiliary_loss_ =
        sum(p * Tensor::from_vector(picked, {H})) * (config_.head_balance_loss * static_cast<float>(H));
  }
  return softmax(masked_fill(logits, unselected, -1e30f));  // (B, Tq, H): 0 outside the top k
}

std::vector<Tensor> MultiHeadAttention::project(const Linear& w, const Norm* norm, int64_t heads,
                                                const Tensor& x, int64_t start) const {
  std::vector<Tensor> steps = {w.forward(x)};  // (B, T, heads*Dk)
  const int64_t B = x.size(0), T = x.size(1);
  if (norm)  // over each head's Dk entries
    steps.push_back(
        reshape(norm->forward(reshape(steps.back(), {B, T, heads, head_dim_})), {B, T, heads * head_dim_}));
  if (start >= 0 && rope_) {
    const std::vector<Tensor> cos_sin = rope_->up_to(start + T);  // (>= start + T, Dk/2) each
    steps.push_back(rope(steps.back(), heads, cos_sin[0], cos_sin[1], start));
  }
  return steps;
}

Tensor MultiHeadAttention::attend_and_project(const Tensor& x, const std::vector<Tensor>& q_steps,
                                              const Tensor& k, const Tensor& v,
                                              const std::vector<int64_t>& key_lengths) {
  const Tensor o = attend(x, q_steps.back(), k, v, causal_, key_lengths);  // (B, Tq, H*Dv)
  // The attention's backward reads the queries; recomputing them there (one GEMM, and the norm and
  // rotation from what their backwards keep) is cheaper than keeping a (B, Tq, C) per layer through
  // the whole step.
  for (const Tensor& q : q_steps) q.release_values();
  return project_output(o);
}

void MultiHeadAttention::use_value_residual(Tensor* first_values, bool first_layer) {
  first_values_ = first_values;
  if (!first_layer) register_parameter("value_lambda", &value_lambda, {1});
}

Tensor MultiHeadAttention::self_values(const Tensor& x) {
  const Tensor v = wv.forward(x);  // (B, T, Hkv*Dv)
  if (!first_values_) return v;
  if (!value_lambda.defined()) return *first_values_ = v;
  TFM_CHECK(first_values_->defined() && first_values_->shape() == v.shape(), "MultiHeadAttention",
            "the value residual needs the first layer's values of these positions (", shape_str(v.shape()),
            ") before a later layer runs");
  return v * value_lambda + *first_values_ * rsub(1.0f, value_lambda);  // (B, T, Hkv*Dv)
}

Tensor MultiHeadAttention::self_attention(const Tensor& x, const std::vector<int64_t>& key_lengths) {
  if (!rope_ && !first_values_) return forward(x, x, x, key_lengths);
  if (!rope_) {  // the value residual without RoPE: forward's halves, V mixed between them
    TFM_CHECK(x.dim() == 3 && x.size(-1) == config_.d_model, "MultiHeadAttention::self_attention",
              "expected x (B, T, ", config_.d_model, "), got ", shape_str(x.shape()));
    const Tensor k = project(wk, k_norm.get(), config_.n_kv_heads, x, -1).back();  // (B, T, Hkv*Dk)
    return forward_projected(x, k, self_values(x), key_lengths);
  }
  TFM_CHECK(
      x.dim() == 3 && x.size(-1) == config_.d_model && kdim_ == config_.d_model && vdim_ == config_.d_model,
      "MultiHeadAttention::self_attention", "expected x (B, T, ", config_.d_model,
      ") and a layer whose keys ", "and values are d_model wide, got ", shape_str(x.shape()), ", kdim ",
      kdim_, ", vdim ", vdim_);
  const std::vector<Tensor> k_steps = project(wk, k_norm.get(), config_.n_kv_heads, x, 0);
  // K stays for the attention's backward; of its steps only QK-norm's input is read by a backward.
  for (size_t i = k_norm ? 1 : 0; i + 1 < k_steps.size(); ++i) k_steps[i].release_values();
  return attend_and_project(x, project(wq, q_norm.get(), config_.n_heads, x, 0), k_steps.back(),
                            self_values(x), key_lengths);
}

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const std::vector<int64_t>& key_lengths) {
  TFM_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(-1) == config_.d_model &&
                key.size(-1) == kdim_ && value.size(-1) == vdim_ && key.size(1) == value.size(1) &&
                query.size(0) == key.size(0) && key.size(0) == value.size(0),
            "MultiHeadAttention::forward", "expected query (B, Tq, ", config_.d_model, "), key (B, Tk, ",
            kdim_, "), value (B, Tk, ", vdim_, "), got ", shape_str(query.shape()), ", ",
            shape_str(key.shape()), ", ", shape_str(value.shape()));
  const auto [k, v] = project_key_value(key, value);  // (B, Tk, Hkv*Dk), (B, Tk, Hkv*Dv)
  return forward_projected(query, k, v, key_lengths);
}

std::pair<Tensor, Tensor> MultiHeadAttention::project_key_value(const Tensor& key,
                                                                const Tensor& value) const {
  // (B, Tk, Hkv*Dk) without positions, (B, Tk, Hkv*Dv)
  return {project(wk, k_norm.get(), config_.n_kv_heads, key, -1).back(), wv.forward(value)};
}

Tensor MultiHeadAttention::forward_projected(const Tensor& query, const Tensor& k, const Tensor& v,
                                             const std::vector<int64_t>& key_lengths) {
  const int64_t kv_width = config_.n_kv_heads * head_dim_;
  TFM_CHECK(query.dim() == 3 && k.dim() == 3 && v.dim() == 3 && query.size(-1) == config_.d_model &&
                k.size(-1) == kv_width && v.size(-1) == kv_width && k.size(1) == v.size(1) &&
                query.size(0) == k.size(0) && k.size(0) == v.size(0),
            "MultiHeadAttention::forward_projected", "expected query (B, Tq, ", config_.d_model,
            "), k and v (B, Tk, ", kv_width, "), got ", shape_str(query.shape()), ", ", shape_str(k.shape()),
            ", ", shape_str(v.shape()));
  TFM_CHECK(key_lengths.empty() || static_cast<int64_t>(key_lengths.size()) == k.size(0),
            "MultiHeadAttention::forward", "expected ", k.size(0), " key_lengths, got ", key_lengths.size());
  return attend_and_project(query, project(wq, q_norm.get(), config_.n_heads, query, -1), k, v, key_lengths);
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, Tensor& cache_k, Tensor& cache_v, int64_t past) {
  // Everything up front: a wrong shape would otherwise surface deep inside as another call's error.
  const auto shape_of = [](const Tensor& t) { return t.defined() ? shape_str(t.shape()) : "undefined"; };
  const int64_t C = config_.d_model, kv_width = config_.n_kv_heads * head_dim_;
  const bool x_ok = x.defined() && x.dim() == 3 && x.size(2) == C;
  const auto cache_ok = [&](const Tensor& c) {
    return c.defined() && c.dim() == 3 && c.size(2) == kv_width && (!x_ok || c.size(0) == x.size(0));
  };
  TFM_CHECK(kdim_ == C && vdim_ == C && x_ok && cache_ok(cache_k) && cache_ok(cache_v) &&
                cache_k.size(1) == cache_v.size(1),
            "MultiHeadAttention::forward_cached", "expected x (B, T, ", C, ") and caches k and v (B, P, ",
            kv_width, ") of one length P, on a self-attention layer (kdim = vdim = d_model), got x ",
            shape_of(x), ", k ", shape_of(cache_k), ", v ", shape_of(cache_v), ", kdim ", kdim_, ", vdim ",
            vdim_);
  const int64_t T = x.size(1);
  TFM_CHECK(past >= 0 && past + T <= cache_k.size(1), "MultiHeadAttention::forward_cached", past,
            " cached + ", T, " new positions exceed the cache ", shape_str(cache_k.shape()));
  const Tensor q = project(wq, q_norm.get(), config_.n_heads, x, past).back();  // (B, T, H*Dk)
  {
    NoGradGuard no_grad;  // the cache is a buffer, not part of the graph
    narrow(cache_k, 1, past, T).copy_from(project(wk, k_norm.get(), config_.n_kv_heads, x, past).back());
    narrow(cache_v, 1, past, T).copy_from(self_values(x));
  }
  // Keys [0, past + T): views into the caches, strided per batch, read in place by the fused op.
  const Tensor k = narrow(cache_k, 1, 0, past + T), v = narrow(cache_v, 1, 0, past + T);
  return project_output(attend(x, q, k, v, causal_, {}));
}

Tensor MultiHeadAttention::attend(const Tensor& x, const Tensor& q, const Tensor& k, const Tensor& v,
                                  bool causal, const std::vector<int64_t>& key_lengths) {
  const int64_t B = q.size(0), Tq = q.size(1);
  const int64_t H = config_.n_heads, Hkv = config_.n_kv_heads, Dk = head_dim_;
  const bool drop = training() && config_.attention_dropout > 0.0f;
  TFM_CHECK(!drop || rng(), "MultiHeadAttention", "attention dropout needs set_rng()");
  Tensor o, probs;  // (B, Tq, H*Dv), (B, H, Tq, Tk)
  if (config_.attention_score == AttentionScore::Dot && config_.head_mixing == HeadMixing::None) {
    AttentionOptions opt;
    opt.n_heads = H;
    opt.n_kv_heads = Hkv;
    opt.causal = causal;
    opt.key_lengths = key_lengths;
    opt.dropout = config_.attention_dropout;
    opt.training = training();
    opt.rng = rng();
    Tensor weights;  // (B, Tq, H), gating only
    if (gate) weights = gate_weights(x, opt.active_rows);
    o = scaled_dot_product_attention(q, k, v, opt, record ? &probs : nullptr);  // (B, Tq, H*Dv)
    if (gate) o = reshape(reshape(o, {B, Tq, H, Dk}) * reshape(weights, {B, Tq, H, 1}), {B, Tq, H * Dk});
  } else {
    o = attend_composed(q, k, v, causal, key_lengths, record ? &probs : nullptr);
  }
  if (head_gate.defined()) {
    TFM_CHECK(head_gate.dim() == 1 && head_gate.size(0) == H, "MultiHeadAttention", "head_gate must be (", H,
              "), got ", shape_str(head_gate.shape()));
    o = reshape(reshape(o, {B, Tq, H, Dk}) * reshape(head_gate, {1, 1, H, 1}), {B, Tq, H * Dk});
  }
  if (record) {
    last_probabilities = probs;
    last_head_outputs = reshape(o, {B, Tq, H, Dk}).detach();
  }
  return o;
}

// Additive scores, and talking-heads attention (Shazeer et al. 2020) with its grouped form, by composed
// ops so that autograd gives the backward: logits S of the layer's scoring, mixed across the heads of
// each group before the masks (a mask is the same for every head, so mixing first lets no hidden key
// leak in, and the mixing never sees the -1e30 fill), softmax, the probabilities mixed again, dropout on
// them, times V. Without mixing the two mixes are skipped: plain additive attention.
Tensor MultiHeadAttention::attend_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                           const std::vector<int64_t>& key_lengths, Tensor* probabilities) {
  const int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1);
  const int64_t H = config_.n_heads, Hkv = config_.n_kv_heads, G = H / Hkv, Dk = head_dim_;
  Tensor s;  // (B, H, Tq, Tk): query head h = kv head h / G, G query heads per kv head
  if (config_.attention_score == AttentionScore::Dot) {
    // Scaling q (B, Tq, H*Dk) rather than the scores (B, H, Tq, Tk): the same result, fewer floats.
    const Tensor qs = q * (1.0f / std::sqrt(static_cast<float>(Dk)));
    const Tensor qh =
        reshape(permute(reshape(qs, {B, Tq, Hkv, G, Dk}), {0, 2, 3, 1, 4}), {B, Hkv, G * Tq, Dk});
    const Tensor kh = permute(reshape(k, {B, Tk, Hkv, Dk}), {0, 2, 1, 3});  // (B, Hkv, Tk, Dk)
    s = reshape(matmul(qh, kh, false, true), {B, H, Tq, Tk});  // (B, Hkv, G*Tq, Tk) -> (B, H, Tq, Tk)
  } else {
    s = reshape(additive_scores(q, k, score_v, Hkv, G), {B, H, Tq, Tk});
  }
  // Masked logits get a large negative value and the probabilities are multiplied by the visible mask,
  // so a row with no visible key is all zero (softmax of -inf everywhere would be NaN), and stays so
  // through the mixing.
  const bool mixing = config_.head_mixing != HeadMixing::None;
  const Tensor mask = reshape(attention_mask(B, Tq, Tk, causal, key_lengths), {B, 1, Tq, Tk});
  const Tensor sm = mixing ? mix_heads(s, mix_logits) : s;                     // (B, H, Tq, Tk)
  const Tensor p = softmax(masked_fill(sm, mask, -1e30f)) * rsub(1.0f, mask);  // (B, H, Tq, Tk)
  const Tensor pm = mixing ? mix_heads(p, mix_weights) : p;                    // (B, H, Tq, Tk)
  if (probabilities) *probabilities = pm.detach();
  const bool drop = training() && config_.attention_dropout > 0.0f;
  const Tensor pd = drop ? dropout(pm, config_.attention_dropout, true, *rng()) : pm;
  return weighted_values(pd, v, Hkv, G);  // (B, Tq, H*Dv)
}

}  // namespace tfm
