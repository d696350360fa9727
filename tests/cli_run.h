// Running the tfm executable (tfm_binary()) or a shell command from the repository root in CLI tests,
// a per-process temporary directory removed when it goes out of scope, and named scratch paths
// removed when the test binary exits.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tfm_test {

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// The tfm executable the CLI tests run: the one beside this test binary in its build tree. Found at run
// time, not compiled in, so that a sanitizer tree can link the test code a Release tree compiled
// (TFM_TEST_OBJECTS_FROM in CMakeLists.txt) and still run its own, instrumented tfm.
inline const char* tfm_binary() {
  static const std::string path = std::filesystem::canonical("/proc/self/exe").parent_path() / "tfm";
  return path.c_str();
}

// tfm_binary() quoted for a shell command line.
inline std::string tfm_command() {
  return "'" + std::string(tfm_binary()) + "'";
}

}  // namespace tfm_test

// AddressSanitizer's interface, declared weak: resolved when this binary is linked with the runtime
// (a sanitizer tree, static or shared), null otherwise. The test code compiles without the sanitizers
// (docs/testing.md), so it asks this way.
extern "C" int __asan_address_is_poisoned(const volatile void* address) __attribute__((weak));

namespace tfm_test {

// Whether this process, and so the tfm beside it, runs under AddressSanitizer: asked when the binary is
// linked, for the same reason (sanitizer_canary's ctest entries check that such a tree reports bugs).
inline bool under_address_sanitizer() {
  return &__asan_address_is_poisoned != nullptr;
}

// A file's whole content ("" when it cannot be read; the caller's checks then fail).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `command` run by the shell from the repository root, its output and exit status.
inline CliRun run_shell(const std::string& command) {
  const std::string cmd = std::string("cd '") + TFM_SOURCE_DIR + "' && " + command + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// `tfm ARGS` (ARGS as the shell reads them).
inline CliRun run_tfm(const std::string& args) {
  return run_shell(tfm_command() + " " + args);
}

// /tmp/tfm_test_<name>_<pid>, created empty, removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name)
      : path("/tmp/tfm_test_" + name + "_" + std::to_string(::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// Removes, when the test binary exits, everything in /tmp whose name starts with `prefix` (a test's
// path and the siblings it derives from it: "<path>_data.txt", "<path>_data", "<path>2"), and the token
// caches of such data files (data.cache_dir's default: .tfm-cache beside the data).
inline void remove_at_exit(const std::string& prefix) {
  struct Registry {
    std::vector<std::string> prefixes;
    ~Registry() {
      std::error_code ec;
      for (const std::string& prefix : prefixes)
        for (const char* dir : {"/tmp", "/tmp/.tfm-cache"})
          for (const auto& e : std::filesystem::directory_iterator(dir, ec))
            if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove_all(e.path(), ec);
    }
  };
  static Registry registry;
  registry.prefixes.push_back(prefix);
}

// /tmp/tfm_test_<group>_<pid>_<name>, removed if present (not created). It and the paths that start
// with it ("<path>_data.txt", "<path>_data/", "<path>2") are removed when the test binary exits.
inline std::string scratch_path(const std::string& group, const std::string& name) {
  const std::string path = "/tmp/tfm_test_" + group + "_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(path);
  remove_at_exit(std::filesystem::path(path).filename().string());
  return path;
}

// /tmp/tfm_test_<group>_<pid>_files/<name>: a file in a directory of this process's own, made on first
// use and removed with everything in it when the test binary exits.
inline std::string scratch_file(const std::string& group, const std::string& name) {
  const std::string dir = "/tmp/tfm_test_" + group + "_" + std::to_string(::getpid()) + "_files";
  static std::vector<std::string> made;
  if (std::find(made.begin(), made.end(), dir) == made.end()) {
    made.push_back(dir);
    std::filesystem::remove_all(dir);
    remove_at_exit(std::filesystem::path(dir).filename().string());
  }
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// The temporaries AtomicFile left beside `path` (".NAME.<random>"): none once every write of it
// finished or failed cleanly.
inline std::vector<std::string> temporaries_beside(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = "." + p.filename().string() + ".";
  std::vector<std::string> found;
  std::error_code ec;
  const auto dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path().string());
  return found;
}

}  // namespace tfm_test
