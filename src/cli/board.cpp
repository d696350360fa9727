// `tfm board`: its flags and help, checked here like every command's; then tfm becomes the board's server,
// tfm-board (src/board/, options.h says why it is a program of its own), found beside the tfm binary.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli.h"
#include "options.h"
#include "tfm/engine/platform.h"

namespace tfm::cli {
namespace {

// Replaces this process with tfm-board: Ctrl-C, a kill or an exit status reach the server itself.
int exec_board_server(const board::BoardOptions& o) {
  const std::string bin = platform::program_directory();
  const std::string server = (std::filesystem::path(bin) / board::kServerProgram).string();
  std::error_code ec;
  if (bin.empty() || !std::filesystem::is_regular_file(server, ec))
    throw IoError("tfm board: its server " + server +
                  " is missing (it is built and installed beside tfm: " + "build or install tfm again)");
  const std::string options = nlohmann::json(o).dump();
  char* const argv[] = {const_cast<char*>(server.c_str()), const_cast<char*>("--options"),
                        const_cast<char*>(options.c_str()), nullptr};
  ::execv(server.c_str(), argv);
  throw IoError("tfm board: cannot start its server " + server + ": " + std::strerror(errno));
}

}  // namespace

std::vector<Command> add_board_commands(CLI::App& app) {
  auto o = std::make_shared<board::BoardOptions>();
  auto* cmd = app.add_subcommand("board",
                                 "A live web page of the runs: table, curves, config diff, the model inside");
  cmd->add_option("--runs", o->roots, "Directories whose runs it shows (default: runs)")
      ->type_name("DIR ...");
  cmd->add_option(
         "--host", o->host,
         "Address to listen on: a loopback one (127.0.0.1, any 127.x, ::1, localhost) keeps the board "
         "to this machine; any other opens it to the network")
      ->capture_default_str()
      ->check(non_empty("an address"));
  cmd->add_option("--port", o->port, "Port (0: any free one, printed at start)")
      ->capture_default_str()
      ->check(integer_in(0, 65535));
  cmd->add_option("--model-memory-mb", o->model_memory_mb, "Memory for the loaded models the page asks about")
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->footer("\nExamples:\n  tfm board\n  tfm board --runs runs/ other_runs/ --port 8080\n");
  return {{cmd, [o] {
             if (o->roots.empty()) o->roots = {"runs"};
             return exec_board_server(*o);
           }}};
}

}  // namespace tfm::cli
