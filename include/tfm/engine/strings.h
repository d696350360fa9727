// String helpers every layer uses (C++17 has no std::string::ends_with).
#pragma once
#include <string_view>

namespace tfm {

// Whether `s` ends with `tail` ("run.txt.gz" ends with ".gz"; every string ends with "").
inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace tfm
