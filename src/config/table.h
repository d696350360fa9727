// What config.cpp and the key table (keys.cpp) share. Private to src/config/.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/config/config.h"

namespace tfm {

// Every key, in documentation order (config_keys() holds the result).
std::vector<KeySpec> build_table();
// The value at a dotted path of a tree ("train.optimizer.lr"), or null when it is absent.
const nlohmann::json* lookup(const nlohmann::json& tree, const std::string& path);
// The values of a tree's keys bound to S (ModelConfig: model.*, TrainConfig: train.*) written into an S;
// a key the tree lacks keeps the struct's default.
template <class S>
S from_tree(const nlohmann::json& tree);

}  // namespace tfm
