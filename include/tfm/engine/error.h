// Errors that say where and what: every message starts with the op, function or config key that
// failed, then states what was expected and what was got. Library code throws; only the CLI exits.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tfm {

class Error : public std::runtime_error {
 public:
  // A NUL byte (from a crafted file's name or path) is kept as the two characters \0: what() is a C
  // string, which would end the message there.
  explicit Error(const std::string& what) : std::runtime_error(without_nul(what)) {}
  explicit Error(const char* what) : std::runtime_error(what) {}

 private:
  static std::string without_nul(std::string s) {
    for (size_t at = 0; (at = s.find('\0', at)) != std::string::npos; at += 2) s.replace(at, 1, "\\0");
    return s;
  }
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

// A stop request (Ctrl-C, SIGTERM, SIGHUP) that ended work with nothing to save yet, before it wrote
// anything (tokenizing a corpus before the first step): not a failure, the CLI exits 0 as for an
// interrupted run.
class Interrupted : public Error {
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
#define TFM_CHECK(cond, where, ...)                                                   \
  do {                                                                                \
    if (!(cond)) throw ::tfm::Error(::tfm::detail::concat(where, ": ", __VA_ARGS__)); \
  } while (0)
