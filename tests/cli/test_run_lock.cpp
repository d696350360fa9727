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

namespace {
// Polls `ready` every 50 ms for up to a minute (a loaded machine can be slow to start a process).
template <class F>
bool wait_for(F ready) {
  for (int i = 0; i < 1200; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}
}  // namespace

TEST_CASE("run lock: a second tfm train on a run exits 2 naming the directory and PID", "[lock][cli]") {
  const std::string dir = tfm_test::scratch_path("lock", "cli") + "/run";
  // The first writer: a long run in the background (killed below).
  const tfm_test::CliRun bg = tfm_test::run_shell(
      tfm_test::tfm_command() + " train --config configs/tiny.json --out " + dir +
      " --set train.max_steps=1000000 --set train.checkpoint_interval=5 >/dev/null 2>&1 & echo $!");
  REQUIRE(bg.status == 0);
  const pid_t pid = static_cast<pid_t>(std::stol(bg.out));
  struct Killer {
    pid_t pid;
    ~Killer() { ::kill(pid, SIGKILL); }
  } killer{pid};
  // tfm may restart itself once (exec keeps the PID); it holds the lock once it has written its PID.
  REQUIRE(wait_for([&] { return RunLock::holder(dir) == pid && fs::exists(dir + "/last.ckpt"); }));

  const std::string holder = "PID " + std::to_string(pid);
  tfm_test::CliRun r = tfm_test::run_tfm("train --resume " + dir + " --set train.max_steps=2000000");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("tfm: error: " + dir + ": another tfm process (" + holder + ")"));
  r = tfm_test::run_tfm("train --config configs/tiny.json --out " + dir);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(holder));
  // Readers are not blocked and see a complete checkpoint while the writer replaces it.
  for (int i = 0; i < 3; ++i) {
    r = tfm_test::run_tfm("eval --run " + dir + " --batches 1");
    CHECK(r.status == 0);
  }

  // SIGKILL: no destructor runs, the kernel drops the lock with the process.
  ::kill(pid, SIGKILL);
  CHECK(wait_for([&] { return RunLock::holder(dir) == 0; }));
  RunLock mine = RunLock::acquire(dir);
  CHECK(mine.held());
}

TEST_CASE("run lock: --resume takes the lock before reading the run, and a run with no checkpoint says so",
          "[lock][cli]") {
  const std::string dir = tfm_test::scratch_path("lock", "first") + "/run";
  // A writer that has not saved anything yet (it saves only at its end, a million steps away).
  const tfm_test::CliRun bg = tfm_test::run_shell(
      tfm_test::tfm_command() + " train --config configs/tiny.json --out " + dir +
      " --set train.max_steps=1000000 --set train.checkpoint_interval=0 --set train.eval_interval=1000000 "
      ">/dev/null 2>&1 & echo $!");
  REQUIRE(bg.status == 0);
  const pid_t pid = static_cast<pid_t>(std::stol(bg.out));
  struct Killer {
    pid_t pid;
    ~Killer() { ::kill(pid, SIGKILL); }
  } killer{pid};
  REQUIRE(wait_for([&] { return RunLock::holder(dir) == pid; }));
  REQUIRE_FALSE(fs::exists(dir + "/last.ckpt"));
  // The second writer is named, not mistaken for a run without a checkpoint.
  tfm_test::CliRun r = tfm_test::run_tfm("train --resume " + dir);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("another tfm process (PID " + std::to_string(pid) + ")"));
  ::kill(pid, SIGKILL);
  REQUIRE(wait_for([&] { return RunLock::holder(dir) == 0; }));

  // Nobody trains there now, and no checkpoint was ever written: say so and what to do.
  r = tfm_test::run_tfm("train --resume " + dir);
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains(dir + "/last.ckpt: no checkpoint to resume from yet"));
  CHECK_THAT(r.out, Catch::Contains("tfm train --config CONFIG --out " + dir));
  r = tfm_test::run_tfm("train --resume " + dir + "/nowhere");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("no such run directory"));
}
