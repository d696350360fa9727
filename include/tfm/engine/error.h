// Errors that say where and what: every message starts with the op, function or config key that
// failed, then states what was expected and what was got. Library code throws; only the CLI exits.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tfm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A bad config key or value, or a bad command-line argument (the CLI exits with status 2).
class ConfigError : public Error {
 public:
  using Error::Error;
};
// A missing, unreadable or corrupt file (the CLI exits with status 2).
class IoError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace tfm

// TFM_CHECK(cond, "where", "what", values...) throws tfm::Error("where: what values...").
#define TFM_CHECK(cond, where, ...)                                                      \
  do {                                                                                   \
    if (!(cond)) throw ::tfm::Error(::tfm::detail::concat(where, ": ", __VA_ARGS__)); \
  } while (0)
