// The pre-flight memory check (preflight.h): the parameter count from the shapes equals the built
// model's for every model option, the estimate stays close to the tensor memory a training step really
// peaks at, and a config that cannot fit exits 2 before anything large is allocated, naming its keys,
// the estimate and the available memory (train.skip_memory_check lets it through).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.h"
#include "tfm/config/config.h"
#include "tfm/data/pairs.h"
#include "tfm/engine/memory.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/model.h"
#include "tfm/training/preflight.h"

using namespace tfm;

TEST_CASE("preflight: configs that cannot fit exit 2 before building the model", "[preflight][cli]") {
  const std::string dir = tfm_test::scratch_path("preflight", "run");
  struct Case {
    std::string set, key;
  };
  for (const Case& k : {Case{"train.batch_size=100000000", "train.batch_size = 100000000"},
                        Case{"model.n_layers=100000", "model.n_layers = 100000"},
                        Case{"model.max_seq_len=1000000000 --set model.positional_encoding=learned",
                             "model.max_seq_len = 1000000000"}}) {
    const tfm_test::CliRun r =
        tfm_test::run_tfm("train --config configs/tiny.json --out " + dir + " --set " + k.set);
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("tfm: error: train.") || Catch::Contains("tfm: error: model."));
    CHECK_THAT(r.out, Catch::Contains(k.key));
    CHECK_THAT(r.out, Catch::Contains("train needs an estimated"));
    CHECK_THAT(r.out, Catch::Contains("available to this process"));
    CHECK_THAT(r.out, Catch::Contains("train.skip_memory_check=true"));
    CHECK(!std::filesystem::exists(dir + "/last.ckpt"));
    const tfm_test::CliRun info = tfm_test::run_tfm("info --config configs/tiny.json --set " + k.set);
    CHECK(info.status == 2);
    CHECK_THAT(info.out, Catch::Contains("info needs an estimated"));
  }
}

TEST_CASE("preflight: a fixed position table costs the positions trained, not model.max_seq_len",
          "[preflight][cli]") {
  // A sinusoidal (or RoPE) model of a 10^8 context had its table built whole: 12 GiB for 27k parameters.
  // On a machine with 100 MiB free it trains, its table as long as train.seq_len.
  const std::string dir = tfm_test::scratch_path("preflight", "long_context");
  for (const char* encoding : {"sinusoidal", "rope"}) {
    const tfm_test::CliRun r =
        tfm_test::run_shell("TFM_AVAILABLE_MEMORY_MB=100 " + tfm_test::tfm_command() +
                            " train --config configs/tiny.json --out " + dir + "_" + encoding +
                            " --set model.max_seq_len=100000000 --set train.max_steps=2 " +
                            "--set model.positional_encoding=" + encoding);
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("done: 2 steps"));
  }
}

TEST_CASE("preflight: train.skip_memory_check lets a config through, eval and sample are guarded",
          "[preflight][cli]") {
  // TFM_AVAILABLE_MEMORY_MB rehearses a machine with 0.1 MiB free: the tiny config (1.3 MiB) cannot fit.
  const std::string dir = tfm_test::scratch_path("preflight", "skip");
  const std::string small = "TFM_AVAILABLE_MEMORY_MB=0.1 ";
  tfm_test::CliRun r =
      tfm_test::run_shell(small + tfm_test::tfm_command() + " train --config configs/tiny.json --out " + dir +
                          " --set train.max_steps=2");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("(TFM_AVAILABLE_MEMORY_MB)"));
  r = tfm_test::run_shell(small + tfm_test::tfm_command() + " train --config configs/tiny.json --out " + dir +
                          " --set train.max_steps=2 --set train.skip_memory_check=true");
  REQUIRE(r.status == 0);
  // The run's config keeps skip_memory_check = true: flip it back on resume, then readers are guarded.
  r = tfm_test::run_shell(small + tfm_test::tfm_command() + " train --resume " + dir +
                          " --set train.max_steps=3 --set train.skip_memory_check=false");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("train.skip_memory_check=true"));
  r = tfm_test::run_shell(tfm_test::tfm_command() + " train --resume " + dir +
                          " --set train.max_steps=3 --set train.skip_memory_check=false");
  REQUIRE(r.status == 0);
  for (const std::string& cmd : {"eval --run " + dir, "sample --run " + dir + " --max-new-tokens 5"}) {
    r = tfm_test::run_shell(small + tfm_test::tfm_command() + " " + cmd);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("needs an estimated"));
    CHECK(tfm_test::run_tfm(cmd).status == 0);
  }
}
