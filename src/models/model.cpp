// The flat parameter buffers every model shares, their initialisation (docs/architecture.md) and the
// auxiliary losses and statistics of the layers.
#include "tfm/models/model.h"

#include <algorithm>
#include <cmath>

#include "tfm/engine/ops.h"
#include "tfm/engine/strings.h"
#include "tfm/nn/attention.h"

namespace tfm {

FlopCount flops_per_token(const Cost& forward, double tokens) {
  FlopCount f;
  f.forward_per_token = forward.flops / tokens;
  f.train_per_token = 3.0 * f.forward_per_token;
  return f;
}

Model::~Model() = default;

namespace {
// A head mixing matrix (g, n, n): it starts as identities and is not decayed (see init_parameters).
bool is_head_mixing(const std::string& name) {
  return ends_with(name, "mix_logits") || ends_with(name, "mix_weights");
}
}  // namespace

void init_parameters(Module& root, uint64_t seed, int64_t residual_layers) {
  // Initialisation exactly as docs/architecture.md and the reference, in its parameter order.
  Rng rng(seed);
  const float residual_std =
      0.02f / std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, residual_layers)));
  for (auto& [name, tensor] : root.named_parameters()) {
    Tensor& t = *tensor;
    float* p = t.data();
    // Head mixing matrices (g, n, n) start as identities, so a mixing layer starts as the standard one;
    // they are not decayed either: weight decay pulls towards zero, which for a mixing matrix is not
    // "no effect" but "no attention" (the identity is what a user expects it to stay near).
    if (is_head_mixing(name)) {
      const int64_t n = t.size(1);
      t.fill_(0.0f);
      for (int64_t g = 0; g < t.size(0); ++g)
        for (int64_t h = 0; h < n; ++h) p[(g * n + h) * n + h] = 1.0f;
    } else if (t.dim() == 2) {
      const bool residual = ends_with(name, "wo.weight") || ends_with(name, "fc2.weight");
      const float std = residual ? residual_std : 0.02f;
      for (int64_t j = 0; j < t.numel(); ++j) p[j] = std * rng.normal();
    } else {
      // A 1-D weight is a norm's gain (LayerNorm, RMSNorm, QK-norm): 1; biases 0.
      t.fill_(ends_with(name, "weight") ? 1.0f : 0.0f);
    }
    if (!t.requires_grad()) t.set_requires_grad(true);  // a model's flat views already do
  }
}

void Model::adopt_parameters(Module& root, uint64_t init_seed, int64_t residual_layers) {
  root_ = &root;
  for (Module* m : root.modules())
    if (auto* a = dynamic_cast<MultiHeadAttention*>(m); a && a->gate) gated_.push_back(a);
  ParameterBuffers buffers = flatten_parameters(root);
  values_ = buffers.values, grads_ = buffers.grads, size_ = buffers.size;
  dropout_rng_.seed_with(init_seed + 1);
  root.set_rng(&dropout_rng_);
  init_parameters(root, init_seed, residual_layers);
  const auto named = root.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const Tensor& t = *named[i].second;
    parameters_.push_back(
        {named[i].first, t, buffers.offsets[i], t.dim() >= 2 && !is_head_mixing(named[i].first)});
  }
}

void Model::share_values_of(const Model& source) {
  TFM_CHECK(source.size_ == size_ && source.parameters_.size() == parameters_.size(),
            "Model::share_values_of", "the source has ", source.size_, " parameter values in ",
            source.parameters_.size(), " tensors, this model ", size_, " in ", parameters_.size());
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

Tensor Model::flat_values() const {
  return Tensor::view_of(values_, {size_}, 0);
}
Tensor Model::flat_grads() const {
  return Tensor::view_of(grads_, {size_}, 0);
}

bool is_position_table(const std::string& parameter_name) {
  return parameter_name == "pos.weight" || parameter_name == "src_pos.weight" ||
         parameter_name == "tgt_pos.weight";
}

std::vector<std::pair<std::string, int64_t>> Model::parameter_breakdown() const {
  std::vector<std::pair<std::string, int64_t>> out = {{"embedding", 0},    {"positions", 0}, {"attention", 0},
                                                      {"feed-forward", 0}, {"norms", 0},     {"head", 0}};
  int64_t skips = 0;  // the x0 skip's scalars (model.x0_skip), listed only when there are some
  int64_t mtp = 0;    // multi-token prediction's extra heads (model.mtp_heads), likewise
  for (const NamedParameter& p : parameters_) {
    const std::string& n = p.name;
    if (n.find(".x0_mix") != std::string::npos) {
      skips += p.value.numel();
      continue;
    }
    if (n.rfind("mtp.", 0) == 0) {
      mtp += p.value.numel();
      continue;
    }
    const size_t k = n.rfind("bigram.", 0) == 0                                                      ? 0
                     : n.find("emb.") != std::string::npos && n.find("pos") == std::string::npos     ? 0
                     : is_position_table(n)                                                          ? 1
                     : n.find("attn.") != std::string::npos || n.find("cross.") != std::string::npos ? 2
                     : n.find(".fc") != std::string::npos                                            ? 3
                     : n.find("ln") != std::string::npos                                             ? 4
                                                                                                     : 5;
    out[k].second += p.value.numel();
  }
  if (skips > 0) out.emplace_back("x0 skips", skips);
  if (mtp > 0) out.emplace_back("mtp heads", mtp);  // training only
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
      if (p.value.data() == a->gate->weight.data())
        name = p.name.substr(0, p.name.size() - std::string(".gate.weight").size());
    std::vector<double> share(a->head_tokens.size(), 0.0);
    for (size_t h = 0; h < share.size(); ++h)
      share[h] = a->tokens_seen > 0 ? a->head_tokens[h] / a->tokens_seen : 0.0;
    out.emplace_back(name, share);
    std::fill(a->head_tokens.begin(), a->head_tokens.end(), 0.0);
    a->tokens_seen = 0;
  }
  return out;
}

void Model::set_training(bool on) {
  root_->set_training(on);
}
bool Model::training() const {
  return root_->training();
}

}  // namespace tfm
