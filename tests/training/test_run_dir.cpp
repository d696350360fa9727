// The one rule for the checkpoint a command reads from a run (run_dir.h's choose_checkpoint) and the
// line that names it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/training/run_dir.h"

using namespace tfm;

namespace {

void run_dir_test_touch(const std::string& path) {
  std::ofstream(path) << "x";
}

}  // namespace

TEST_CASE("run dir: best.ckpt when it exists, else last.ckpt, and --checkpoint overrides", "[run_dir]") {
  const tfm_test::TempDir tmp("choose_checkpoint");
  const std::string dir = tmp.path, best = tmp.file("best.ckpt"), last = tmp.file("last.ckpt");
  // Neither: the message names the directory and both files.
  CHECK_THROWS_AS(choose_checkpoint(dir), IoError);
  CHECK_THROWS_WITH(choose_checkpoint(dir),
                    Catch::Contains(dir) && Catch::Contains("best.ckpt") && Catch::Contains("last.ckpt"));
  // Only last.ckpt (a run not evaluated yet, or one whose evaluations never improved on nothing).
  run_dir_test_touch(last);
  CHECK(choose_checkpoint(dir).which == "last");
  CHECK(choose_checkpoint(dir).path == last);
  CHECK(choose_checkpoint(dir, "last").path == last);
  CHECK_THROWS_WITH(choose_checkpoint(dir, "best"),
                    Catch::StartsWith(best + ": no such checkpoint (--checkpoint best)") &&
                        Catch::Contains("the run has " + last));
  // Both: best unless last is asked for.
  run_dir_test_touch(best);
  CHECK(choose_checkpoint(dir).which == "best");
  CHECK(choose_checkpoint(dir).path == best);
  CHECK(choose_checkpoint(dir, "best").path == best);
  CHECK(choose_checkpoint(dir, "last").path == last);
  // Only best.ckpt (train.checkpoint_interval 0, killed before the end).
  std::filesystem::remove(last);
  CHECK(choose_checkpoint(dir).path == best);
  CHECK_THROWS_WITH(choose_checkpoint(dir, "last"), Catch::StartsWith(last + ": no such checkpoint"));
  // Anything else is refused by name; a missing directory is an IoError naming it.
  CHECK_THROWS_AS(choose_checkpoint(dir, "middle"), ConfigError);
  CHECK_THROWS_WITH(choose_checkpoint(dir, "middle"), Catch::Contains("--checkpoint: expected"));
  CHECK_THROWS_AS(choose_checkpoint(dir + "/nowhere"), IoError);
}

TEST_CASE("run dir: describe_checkpoint names the file, step and val loss", "[run_dir]") {
  Checkpoint ck;
  ck.state.step = 900;
  ck.state.best_val_loss = 1.4912;
  CHECK(describe_checkpoint("runs/x/best.ckpt", ck) == "runs/x/best.ckpt (step 900, val loss 1.491)");
  ck.state.step = 1000;
  CHECK(describe_checkpoint("runs/x/last.ckpt", ck) ==
        "runs/x/last.ckpt (step 1000, best val loss so far 1.491)");
  ck.state.best_val_loss = std::numeric_limits<double>::infinity();
  CHECK(describe_checkpoint("runs/x/last.ckpt", ck) == "runs/x/last.ckpt (step 1000, not evaluated yet)");
}
