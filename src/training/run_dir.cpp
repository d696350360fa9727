#include "tfm/training/run_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/training/run_lock.h"

namespace tfm {
namespace fs = std::filesystem;

namespace {

// Anything under the name counts (a dangling symlink or a FIFO too): a directory is taken for a run
// on the side of caution.
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

bool is_run_file_name(const std::string& name) {
  const std::vector<std::string>& names = run_file_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The run file `p` would be (its name in a directory that holds a run), or "" when it is none.
std::string run_file_at(const fs::path& p) {
  const std::string name = p.filename().string();
  return is_run_file_name(name) && holds_a_run(p.parent_path().string()) ? name : "";
}

// `path` with its directory resolved (symlinks, `.` and `..`) and its own name kept, so a symlink
// is judged by its own name; and where the whole path leads (a symlink followed), when that differs.
std::vector<fs::path> spellings_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return {};
  if (!p.has_filename()) p = p.parent_path();  // "DIR/": the directory itself
  std::vector<fs::path> out;
  const std::string name = p.filename().string();
  if (name != "." && name != "..") out.push_back(fs::weakly_canonical(p.parent_path(), ec) / name);
  const fs::path leads_to = fs::weakly_canonical(p, ec);
  if (!ec && (out.empty() || leads_to != out.front())) out.push_back(leads_to);
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa = {};
  struct stat sb = {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {kRunConfigFile, kLastCheckpointFile, kBestCheckpointFile,
                                                 kRunLogFile,    kMetricsFile,        RunLock::kFileName};
  return names;
}

std::vector<std::string> run_files_in(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const char* name : {kLastCheckpointFile, kBestCheckpointFile, kRunLogFile, kMetricsFile})
    if (present(fs::path(dir) / name)) found.push_back(name);
  return found;
}

void require_run_directory(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) throw IoError(dir + ": no such run directory");
  if (!fs::is_directory(st))
    throw IoError(dir +
                  ": not a run directory (it is a file; give the directory `tfm train` wrote, which holds " +
                  kLastCheckpointFile + " or " + kBestCheckpointFile + ")");
}

std::string resume_checkpoint_path(const std::string& dir) {
  for (const char* name : {kLastCheckpointFile, kBestCheckpointFile})
    if (present(fs::path(dir) / name)) return dir + "/" + name;
  return "";
}

std::vector<CommandInput> run_inputs(const std::string& checkpoint_path, const Config& config) {
  std::vector<CommandInput> inputs = {{"the run's checkpoint", checkpoint_path}};
  for (const char* key : {"data.path", "data.tokenizer_path"})
    if (const nlohmann::json& v = config.at(key); v.is_string())
      inputs.push_back({key, v.get<std::string>()});
  return inputs;
}

void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<CommandInput>& inputs) {
  for (const fs::path& p : spellings_of(path)) {
    const std::string name = run_file_at(p);
    if (name.empty()) continue;
    const std::string via =
        p.filename() == fs::path(path).filename() ? "" : " (where it leads: " + p.string() + ")";
    throw ConfigError(flag + ": " + path + via + " is the " + name + " of the run in " +
                      p.parent_path().string() +
                      "; only `tfm train` writes a run's own files: write the output elsewhere");
  }
  for (const CommandInput& in : inputs)
    if (!in.path.empty() && same_file(path, in.path))
      throw ConfigError(
          flag + ": " + path + " is the same file as " + in.what + " " + in.path +
          ", which this command reads: writing it would destroy its input; choose another path");
}

}  // namespace tfm
