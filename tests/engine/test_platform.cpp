// platform::run_program: a subprocess gets its arguments as they are, with no shell in between, so
// quotes, $(), backticks, newlines and spaces in a path are never run as commands.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tfm/engine/platform.h"

namespace fs = std::filesystem;

namespace {
// Names that would run `touch PWNED` (or break the command) if they ever reached a shell.
const std::vector<std::string> kHostileNames = {
    "it's $(touch PWNED) 'x", "`touch PWNED`", "a;touch PWNED",     "new\nline",     "two  spaces", "$HOME",
    "-starts-with-dash",      "back\\slash",   "\"double\" quotes", "a|touch PWNED&"};
}  // namespace

TEST_CASE("run_program passes hostile arguments verbatim and runs no shell", "[platform]") {
  const fs::path dir = fs::temp_directory_path() / ("tfm_test_platform_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);  // a relative PWNED would land here
  for (const std::string& name : kHostileNames) {
    INFO(name);
    // touch -- NAME: the file with exactly that name appears, and nothing else does.
    CHECK(tfm::platform::run_program({"/usr/bin/touch", "--", name}) == 0);
    CHECK(fs::exists(dir / name));
    CHECK_FALSE(fs::exists(dir / "PWNED"));
  }
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) ==
        static_cast<std::ptrdiff_t>(kHostileNames.size()));
  // The exit status comes back; a program that does not exist is -1, not a crash.
  CHECK(tfm::platform::run_program({"/bin/false"}) == 1);
  CHECK(tfm::platform::run_program({"/nonexistent/program"}) == -1);
  CHECK(tfm::platform::run_program({}) == -1);
  fs::current_path(cwd);
  fs::remove_all(dir);
}

TEST_CASE("shell_quote round-trips through a real shell", "[platform]") {
  // The printed "to draw it" command is for a user to paste: each argument must arrive intact.
  const fs::path out = fs::temp_directory_path() / ("tfm_test_quote_" + std::to_string(::getpid()));
  for (const std::string& name : kHostileNames) {
    INFO(name);
    const std::string cmd = "printf %s " + tfm::platform::shell_quote(name) + " > " + out.string();
    REQUIRE(tfm::platform::run_program({"/bin/sh", "-c", cmd}) == 0);
    std::FILE* f = std::fopen(out.c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string got(name.size() + 16, '\0');
    got.resize(std::fread(got.data(), 1, got.size(), f));
    std::fclose(f);
    CHECK(got == name);
  }
  fs::remove(out);
}
