// Where the commands put their reports and how they draw them (scripts/plot_*.py, Debian's
// python3-matplotlib).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"

namespace tfm::cli {

namespace fs = std::filesystem;

std::string find_script(const std::string& name) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  // An installed tfm: PREFIX/bin/tfm with its scripts in PREFIX/share/tfm/scripts (cmake --install).
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "tfm" / "scripts" / name);
  // A build tree, in the repository or outside it: the sources it was built from.
  candidates.push_back(fs::path(TFM_SOURCE_SCRIPTS_DIR) / name);
  candidates.push_back(fs::path("scripts") / name);  // a repository root as the working directory
  for (const fs::path& p : candidates)
    if (fs::exists(p, ec)) return p.string();
  return "scripts/" + name;
}

bool run_plot_script(const std::string& name, const std::vector<std::string>& args, bool no_plot,
                     bool quiet) {
  static const std::string kPython = "/usr/bin/python3";
  std::vector<std::string> argv = {kPython, find_script(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  std::fflush(stdout);  // our lines before the script's
  // An argument vector, never a shell command line: paths are user strings.
  if (!no_plot && fs::exists(argv[1]) &&
      platform::run_program({kPython, "-c", "import matplotlib"}, true) == 0 &&
      platform::run_program(argv, quiet) == 0)
    return true;
  if (!quiet) {
    std::string cmd;
    for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + platform::shell_quote(a);
    fmt::print("to draw it (needs python3-matplotlib): {}\n", cmd.c_str());
  }
  return false;
}

}  // namespace tfm::cli
