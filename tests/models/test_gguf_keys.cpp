// The GGUF exporter held against the key table: every model.* key has a rule for each llama.cpp
// architecture (gguf_key_rules: the values it expresses, or every value), and a value outside a rule
// is refused naming the key and the value.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model_config.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/models/gguf_export.h"

using namespace tfm;
using Catch::Matchers::Contains;
using tfm_test::model_config_from;

namespace {

const GgufKeyRule* rule_for(GgufArchitecture arch, const std::string& key) {
  for (const GgufKeyRule& r : gguf_key_rules(arch))
    if (r.key == key) return &r;
  return nullptr;
}

constexpr GgufArchitecture kArchitectures[] = {GgufArchitecture::Gpt2, GgufArchitecture::Llama,
                                               GgufArchitecture::Qwen3};

// A model of each architecture that exports, through the key table.
std::vector<std::string> base_of(GgufArchitecture arch) {
  if (arch == GgufArchitecture::Gpt2) return {"model.positional_encoding=learned"};
  std::vector<std::string> modern = {"model.positional_encoding=rope", "model.norm=rmsnorm",
                                     "model.activation=swiglu"};
  if (arch == GgufArchitecture::Qwen3)
    modern.insert(modern.end(), {"model.qk_norm=true", "model.bias=false"});
  return modern;
}

// Every value a key may take that `rule` does not allow: the key table's choices, or the other bool.
std::vector<nlohmann::json> refused_values(const KeySpec& key, const GgufKeyRule& rule) {
  std::vector<nlohmann::json> candidates;
  if (key.type == KeyType::Boolean) candidates = {true, false};
  if (key.type == KeyType::Integer) candidates = {30};  // a number key's rule allows its 0 ("off")
  if (key.type == KeyType::Number) candidates = {30.5};
  for (const std::string& c : key.choices) candidates.emplace_back(c);
  std::vector<nlohmann::json> refused;
  for (const nlohmann::json& v : candidates)
    if (std::find(rule.allowed.begin(), rule.allowed.end(), v) == rule.allowed.end()) refused.push_back(v);
  return refused;
}

}  // namespace

TEST_CASE("gguf keys: every model.* key of the key table has a rule for every architecture", "[gguf]") {
  int model_keys = 0;
  for (const KeySpec& key : config_keys()) {
    if (key.path.rfind("model.", 0) != 0) continue;
    ++model_keys;
    for (const GgufArchitecture arch : kArchitectures) {
      INFO(key.path << " for " << gguf_architecture_name(arch));
      const GgufKeyRule* rule = rule_for(arch, key.path);
      CHECK(rule != nullptr);  // a new key: add it to gguf_key_rules (allowed values, or every value)
      if (rule && !rule->allowed.empty()) CHECK(rule->value);
      // A key whose value does not change what the weights mean (--init-from lets it differ) cannot
      // change what llama.cpp computes from them either.
      if (rule && key.weights_agnostic) CHECK(rule->allowed.empty());
    }
  }
  CHECK(model_keys >= 20);
  for (const GgufArchitecture arch : kArchitectures)
    for (const GgufKeyRule& rule : gguf_key_rules(arch)) {
      INFO(rule.key);
      CHECK(find_key(rule.key) != nullptr);  // no rule for a key the table does not have
      CHECK_FALSE(rule.note.empty());
    }
}

TEST_CASE("gguf keys: each refused value of each key is refused naming the key and the value", "[gguf]") {
  int refusals = 0;
  for (const GgufArchitecture arch : kArchitectures) {
    const std::vector<std::string> base = base_of(arch);
    REQUIRE(gguf_architecture(model_config_from(base, 10)) == arch);
    for (const GgufKeyRule& rule : gguf_key_rules(arch)) {
      if (rule.allowed.empty()) continue;
      const KeySpec* key = find_key(rule.key);
      REQUIRE(key != nullptr);
      const std::vector<nlohmann::json> values = refused_values(*key, rule);
      CHECK_FALSE(values.empty());  // a rule that allows every value the table has refuses nothing
      for (const nlohmann::json& v : values) {
        std::vector<std::string> overrides = base;
        overrides.push_back(rule.key + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
        INFO(gguf_architecture_name(arch) << " with " << overrides.back());
        ModelConfig c;
        try {
          c = model_config_from(overrides, 10);
        } catch (const ConfigError& e) {  // a causal_lm run cannot have the value at all (model.causal)
          CHECK_THAT(e.what(), Contains(rule.key + ": "));
          ++refusals;
          continue;
        }
        CHECK_THROWS_WITH(gguf_architecture(c), Contains(rule.key + " = " + v.dump() + ": "));
        ++refusals;
      }
    }
  }
  CHECK(refusals >= 15);
}
