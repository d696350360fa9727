#include "tfm/config/train_config.h"

namespace tfm {

template <>
const std::vector<std::string>& enum_names<ObjectiveKind>() {
  static const std::vector<std::string> names = {"causal_lm", "masked_lm", "seq2seq"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<OptimizerKind>() {
  static const std::vector<std::string> names = {"adamw", "sgd", "muon"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<ScheduleKind>() {
  static const std::vector<std::string> names = {"cosine", "constant", "inverse_sqrt", "wsd"};
  return names;
}

}  // namespace tfm
