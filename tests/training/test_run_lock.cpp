// One writer per run directory (run_lock.h): while one `tfm train` holds DIR/train.lock a second
// writer exits 2 naming the directory and the holder's PID, readers are not blocked, and the kernel
// releases the lock when the holder dies (even by SIGKILL).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/run_lock.h"

namespace fs = std::filesystem;
using tfm::RunLock;

TEST_CASE("run lock: one holder at a time, released on destruction", "[lock]") {
  const std::string dir = tfm_test::scratch_path("lock", "api") + "/run";
  {
    RunLock a = RunLock::acquire(dir);  // creates the directory
    CHECK(a.held());
    CHECK(fs::is_directory(dir));
    CHECK(RunLock::holder(dir) == ::getpid());
    // flock locks belong to the open file description: a second acquire, even in this process, fails.
    try {
      RunLock b = RunLock::acquire(dir);
      FAIL("a second lock on " << dir << " was granted");
    } catch (const tfm::IoError& e) {
      CHECK_THAT(e.what(),
                 Catch::StartsWith(dir + ": another tfm process (PID " + std::to_string(::getpid()) + ")"));
    }
    RunLock moved = std::move(a);
    CHECK(moved.held());
    CHECK(!a.held());
  }
  // Released, and the directory it made for nothing is gone again.
  CHECK(RunLock::holder(dir) == 0);
  CHECK(!fs::exists(dir));
  fs::create_directories(dir);
  std::ofstream(dir + "/keep.txt") << "x";
  { RunLock c = RunLock::acquire(dir); }
  CHECK(fs::exists(dir + "/keep.txt"));  // a directory it did not make stays, lock file removed
  CHECK(!fs::exists(dir + "/" + RunLock::kFileName));
  // The parents it made for DIR go too (a run that failed before writing left runs/ behind), up to
  // the first that holds something else.
  const std::string base = tfm_test::scratch_path("lock", "parents");
  fs::create_directories(base);
  std::ofstream(base + "/other.txt") << "x";
  { RunLock d = RunLock::acquire(base + "/a/b/run"); }
  CHECK(!fs::exists(base + "/a"));
  CHECK(fs::exists(base + "/other.txt"));
  fs::create_directories(base + "/a");
  std::ofstream(base + "/a/mine.txt") << "x";
  { RunLock e = RunLock::acquire(base + "/a/b/run"); }
  CHECK(!fs::exists(base + "/a/b"));
  CHECK(fs::exists(base + "/a/mine.txt"));
  // A `..` in DIR never walks the removal out of what acquire() made: an empty directory that held the
  // run stays (here base/empty, which `z/..` names).
  fs::create_directories(base + "/empty");
  { RunLock f = RunLock::acquire(base + "/empty/z/../d/run"); }
  CHECK(fs::is_directory(base + "/empty"));
  CHECK(!fs::exists(base + "/empty/d"));
}
