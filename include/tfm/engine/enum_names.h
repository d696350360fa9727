// One spelling table per option enum: enum_names<E>() spells E's values as configs and the CLI do, in
// declaration order, and name_of / enum_from are the only ways between a value and its name. Each enum
// specialises enum_names in the .cpp of the layer that owns it; no option name is compared as a string
// anywhere else.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tfm {

template <class E>
const std::vector<std::string>& enum_names();

template <class E>
const std::string& name_of(E value) {
  return enum_names<E>()[static_cast<size_t>(value)];
}
// The value a config spells `name`, or nothing when it names none.
template <class E>
std::optional<E> enum_from(const std::string& name) {
  const auto& names = enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}
// "\"a\", \"b\" or \"c\"": the allowed names, for error messages.
template <class E>
std::string enum_choices() {
  const auto& names = enum_names<E>();
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "\"" : i + 1 == names.size() ? " or \"" : ", \"") + names[i] + "\"";
  return s;
}

}  // namespace tfm
