// tfm-board: the server of `tfm board`, started by it (src/cli/board.cpp) with the flags it checked as one
// JSON argument (options.h). Its errors read like tfm's and exit the same way: 2 for what it was asked
// (a missing directory, a port in use), 1 for anything else.
#include <cstdio>
#include <string>

#include "board.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"

int main(int argc, char** argv) {
  tfm::platform::select_blas_kernels(argv);
  if (argc != 3 || std::string(argv[1]) != "--options") {
    std::fprintf(stderr, "tfm-board is the server `tfm board` starts: run that (tfm board --help)\n");
    return 2;
  }
  try {
    return tfm::board::serve(nlohmann::json::parse(argv[2]).get<tfm::board::BoardOptions>());
  } catch (const tfm::ConfigError& e) {
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
  } catch (const tfm::IoError& e) {
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfm: error: internal error in tfm board: %s\n", e.what());
    return 1;
  }
  return 2;
}
