// String helpers every layer uses (C++17 has no std::string::ends_with).
#pragma once
#include <string>
#include <string_view>

namespace tfm {

// Whether `s` ends with `tail` ("run.txt.gz" ends with ".gz"; every string ends with "").
inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `s` with its ASCII letters in lower case, other bytes (UTF-8 too) as they are: how file extensions and
// host names are compared ("Notes.TXT" is a .txt file).
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace tfm
