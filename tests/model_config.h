// Model configs for tests, built through the key table (config_keys()) as a run's are: `--set`-style
// overrides on the defaults, so every default, derived value (d_ff, n_kv_heads) and validation is the
// key table's, and a new key reaches the tests without a test copying fields by hand.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/config/config.h"

namespace tfm_test {

// The model of the default config with `overrides` ("model.d_model=32", ...) applied, for a vocabulary
// of `vocab_size` symbols. A bad override throws the key table's ConfigError naming the key.
inline tfm::ModelConfig model_config_from(const std::vector<std::string>& overrides, int64_t vocab_size) {
  return tfm::resolve_config(nlohmann::json::object(), overrides).model(vocab_size);
}

}  // namespace tfm_test
