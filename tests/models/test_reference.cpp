// Cross-check with PyTorch: the fixtures written by scripts/dev/make_fixtures.py from
// scripts/torch_lm.py (and torch.nn.MultiheadAttention) are loaded into our model and
// layers; logits, loss and outputs must match to 1e-5, every gradient to 1e-4 relative to the
// largest entry of its tensor. Set TFM_REPORT_DIFFS=1 to print the largest differences seen.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fixture_compare.h"
#include "tfm/config/config.h"
#include "tfm/engine/ops.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"

using namespace tfm;
using tfm_test::model_config_from;
using json = nlohmann::json;

using namespace tfm::testing;

TEST_CASE("reference: language model logits, loss and gradients match PyTorch", "[reference][model]") {
  const char* names[] = {"lm_pre_sinusoidal_tied",
                         "lm_post_learned_untied",
                         "lm_gqa_relu",
                         "mlm_bidirectional",
                         "lm_modern",
                         "mlm_modern",
                         "lm_tricks",
                         "lm_tricks_sinusoidal"};
  for (const char* name : names) {
    SECTION(name) {
      const json fx = load_fixture(name);
      LanguageModel model(config_from(fx.at("config")), 1);
      load_parameters(model, fx.at("params"));
      int64_t count = 0;
      for (const NamedParameter& p : model.parameters()) count += p.value.numel();
      CHECK(model.parameter_count() == count);
      const int64_t B = fx.at("B"), T = fx.at("T");
      const auto tokens = fx.at("tokens").get<std::vector<int32_t>>();
      const auto targets = fx.at("targets").get<std::vector<int32_t>>();

      model.flat_grads().fill_(0.0f);
      const Tensor logits = model.forward(tokens, B, T);
      check_logits_loss_gradients(name, model, fx, logits, LanguageModel::loss(logits, targets));
    }
  }
}

TEST_CASE("reference: multi-token prediction's logits, loss and gradients match PyTorch",
          "[reference][mtp]") {
  // The training loss with the extra heads: next-token loss + mtp_weight * the extra heads' mean loss, each
  // head's positions without a target left out; every gradient through the shared head and trunk.
  for (const char* name : {"lm_mtp", "lm_mtp_post_tied"}) {
    SECTION(name) {
      const json fx = load_fixture(name);
      LanguageModel model(config_from(fx.at("config")), 1);
      load_parameters(model, fx.at("params"));
      const int64_t B = fx.at("B"), T = fx.at("T");
      const auto tokens = fx.at("tokens").get<std::vector<int32_t>>();
      const auto targets = fx.at("targets").get<std::vector<int32_t>>();
      model.flat_grads().fill_(0.0f);
      const MultiTokenLogits heads = model.forward_multi_token(tokens, B, T);
      REQUIRE(heads.extra.size() == fx.at("mtp_logits").size());
      for (size_t k = 0; k < heads.extra.size(); ++k) {
        const double diff = max_diff(heads.extra[k], fx.at("mtp_logits")[k]);
        report(std::string(name) + " extra head " + std::to_string(k + 1) + " logits", diff);
        CHECK(diff <= 1e-5);
      }
      const Tensor aux = LanguageModel::mtp_loss(heads.extra, targets, B, T);
      CHECK(std::fabs(aux.item() - fx.at("mtp_loss").get<double>()) <= 1e-5);
      const float weight = fx.at("mtp_weight").get<float>();
      check_logits_loss_gradients(name, model, fx, heads.logits,
                                  LanguageModel::loss(heads.logits, targets) + aux * weight);
      // forward() is the next-token head alone, the same logits.
      NoGradGuard no_grad;
      CHECK(max_diff(model.forward(tokens, B, T), fx.at("logits")) <= 1e-5);
    }
  }
}

TEST_CASE("reference: cross-attention with kdim/vdim matches torch.nn.MultiheadAttention",
          "[reference][attention]") {
  const json fx = load_fixture("mha_cross_kdim_vdim");
  const ModelConfig cfg = model_config_from(
      {"model.d_model=" + fx.at("d_model").dump(), "model.n_heads=" + fx.at("n_heads").dump()}, 0);
  MultiHeadAttention mha(cfg, false, fx.at("kdim"), fx.at("vdim"));
  mha.record = true;
  auto params = load_parameters(mha, fx);
  Tensor query = to_tensor(fx.at("query")), key = to_tensor(fx.at("key")), value = to_tensor(fx.at("value"));
  for (Tensor* t : {&query, &key, &value}) t->set_requires_grad(true);
  const Tensor out = mha.forward(query, key, value, fx.at("key_lengths").get<std::vector<int64_t>>());
  const double out_diff = max_diff(out, fx.at("out"));
  const double prob_diff = max_diff(mha.last_probabilities, fx.at("probabilities"));
  report("MultiheadAttention output", out_diff);
  report("MultiheadAttention probabilities", prob_diff);
  CHECK(out_diff <= 1e-5);
  CHECK(prob_diff <= 1e-5);
  sum(out * to_tensor(fx.at("r"))).backward();
  for (auto& [name, t] : params) check_gradient(name, t->grad(), fx.at("grads").at(name));
  check_gradient("query", query.grad(), fx.at("grads").at("query"));
  check_gradient("key", key.grad(), fx.at("grads").at("key"));
  check_gradient("value", value.grad(), fx.at("grads").at("value"));
}

TEST_CASE("reference: top-k head gating equals a PyTorch version, output, balance loss and gradients",
          "[reference]") {
  const json fx = load_fixture("mha_topk_gating");
  const ModelConfig cfg = model_config_from(
      {"model.d_model=" + fx.at("d_model").dump(), "model.n_heads=" + fx.at("n_heads").dump(),
       "model.n_kv_heads=" + fx.at("n_kv_heads").dump(), "model.head_gating=topk",
       "model.head_topk=" + fx.at("top_k").dump(), "model.head_balance_loss=" + fx.at("balance_loss").dump()},
      0);
  MultiHeadAttention mha(cfg, fx.at("causal").get<bool>());
  auto params = load_parameters(mha, fx);
  Tensor x = to_tensor(fx.at("x"));
  x.set_requires_grad(true);
  const Tensor out = mha.forward(x, x, x, fx.at("key_lengths").get<std::vector<int64_t>>());
  const Tensor aux = mha.take_auxiliary_loss();
  const double out_diff = max_diff(out, fx.at("out"));
  report("top-k gated attention output", out_diff);
  CHECK(out_diff <= 1e-5);
  CHECK(aux.item() == Approx(fx.at("aux").get<double>()).epsilon(1e-5));
  (sum(out * to_tensor(fx.at("r"))) + aux).backward();
  for (auto& [name, t] : params) check_gradient(name, t->grad(), fx.at("grads").at(name));
  check_gradient("x", x.grad(), fx.at("grads").at("x"));
}

// The reference refuses what it does not implement rather than ignoring it (its docstring): so every
// model key is one it reads (MODEL_DEFAULTS), refuses away from its "off" value (NOT_HERE) or ignores
// because a refused key gates it (READ_ONLY_WITH). A new model key fails here until torch_lm.py says
// which.
TEST_CASE("reference: torch_lm.py reads, refuses or names as gated every model key", "[reference]") {
  std::ifstream in(std::string(TFM_SOURCE_DIR) + "/scripts/torch_lm.py");
  REQUIRE(in.good());
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The literal assigned to NAME (`NAME = {...}` or `NAME = dict(...)`), from its opening bracket to the
  // one that closes it.
  const auto block = [&](const std::string& name) {
    const size_t at = source.find("\n" + name + " = ");
    REQUIRE(at != std::string::npos);
    const size_t open = source.find_first_of("{(", at);
    REQUIRE(open != std::string::npos);
    int depth = 0;
    for (size_t i = open; i < source.size(); ++i) {
      depth += source[i] == '{' || source[i] == '(' ? 1 : source[i] == '}' || source[i] == ')' ? -1 : 0;
      if (depth == 0) return source.substr(open, i + 1 - open);
    }
    FAIL(name << " is not closed");
    return std::string();
  };
  const std::string defaults = block("MODEL_DEFAULTS"), refused = block("NOT_HERE"),
                    gated = block("READ_ONLY_WITH");
  int model_keys = 0;
  for (const KeySpec& key : config_keys()) {
    if (key.path.rfind("model.", 0) != 0) continue;
    ++model_keys;
    const std::string member = key.path.substr(6), quoted = "\"" + key.path + "\"";
    const bool read = defaults.find(" " + member + "=") != std::string::npos ||
                      defaults.find("(" + member + "=") != std::string::npos;
    INFO(key.path);
    CHECK(
        (read || refused.find(quoted) != std::string::npos || gated.find(quoted + ":") != std::string::npos));
  }
  CHECK(model_keys > 20);
}
