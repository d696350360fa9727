// What `tfm board` was asked for (its flags and help: src/cli/board.cpp), handed to the board's server,
// the program tfm-board (src/board/), as one JSON argument. The server is a program of its own so that
// cpp-httplib, which Debian builds with OpenSSL and brotli and which initializes OpenSSL when it is
// loaded, is loaded by `tfm board` alone, not at every start of every command.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tfm::board {

struct BoardOptions {
  std::vector<std::string> roots;  // --runs
  std::string host = "127.0.0.1";
  int port = 6006;
  int64_t model_memory_mb = 2048;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(BoardOptions, roots, host, port, model_memory_mb)

// The server's file name, beside tfm in a build tree and in an installed PREFIX/bin.
constexpr const char* kServerProgram = "tfm-board";

}  // namespace tfm::board
