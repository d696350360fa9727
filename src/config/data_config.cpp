#include "tfm/config/data_config.h"

namespace tfm {

template <>
const std::vector<std::string>& enum_names<DataFormat>() {
  static const std::vector<std::string> names = {"text", "pairs"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<BadRecord>() {
  static const std::vector<std::string> names = {"error", "skip"};
  return names;
}

}  // namespace tfm
