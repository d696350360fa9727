// Checkpoint files: the CRC-32 is zlib's (bit for bit the table CRC tfm used before), a checkpoint
// written by an older build (tests/fixtures/checkpoint_v1_tiny.ckpt, format 1) still loads, and a state
// field of the wrong type or range is refused by name where the file is read.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_bytes.h"
#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/training/checkpoint.h"

using namespace tfm;

namespace {

// IEEE CRC-32 from its definition, one bit at a time (reflected polynomial 0xEDB88320, initial and
// final value all ones): what the byte-table CRC that checkpoints were written with computed.
uint32_t crc32_bitwise(const unsigned char* p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

void write_checkpoint_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("checkpoint: crc32 equals the bitwise IEEE CRC-32 on random buffers, and continues",
          "[checkpoint]") {
  const char* check = "123456789";
  CHECK(crc32(check, 9) == 0xCBF43926u);  // the standard check value of CRC-32/ISO-HDLC
  CHECK(crc32(nullptr, 0) == 0u);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<unsigned char> buf(rng() % 5000);
    for (auto& b : buf) b = static_cast<unsigned char>(rng());
    const uint32_t start = trial % 2 ? static_cast<uint32_t>(rng()) : 0u;
    INFO("size " << buf.size() << ", start " << start);
    REQUIRE(crc32(buf.data(), buf.size(), start) == crc32_bitwise(buf.data(), buf.size(), start));
    const size_t cut = buf.empty() ? 0 : rng() % buf.size();
    CHECK(crc32(buf.data() + cut, buf.size() - cut, crc32(buf.data(), cut)) == crc32(buf.data(), buf.size()));
  }
}

TEST_CASE("checkpoint: a checkpoint written by an older build still loads, exactly", "[checkpoint]") {
  // Written by `tfm train --config configs/tiny.json` (d_model 8, 1 layer, 2 steps) before the CRC came
  // from zlib; its header's CRC was computed by the byte-table code.
  const Checkpoint c =
      load_checkpoint(std::string(TFM_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_tiny.ckpt");
  CHECK(c.config.at("model").at("d_model") == 8);
  CHECK(c.state.optimizer_steps == 2);
  REQUIRE(c.model.size() == 1336);
  REQUIRE(c.optimizer.size() == 2);
  CHECK(c.optimizer[0].size() == 1336);
  const auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  CHECK(bits(c.model[0]) == 0x3c009404u);         // bytes 04 94 00 3c: the first parameter
  CHECK(bits(c.optimizer[1][0]) == 0x36f03fbcu);  // AdamW's v of it
  CHECK(c.tokenizer.kind() == Tokenizer::Kind::Char);
}

TEST_CASE("checkpoint: every state field is checked where the file is read, naming the file and the field",
          "[checkpoint]") {
  using nlohmann::json;
  const std::string fixture = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/checkpoint_v1_tiny.ckpt";
  const std::string good = tfm_test::read_file(fixture);
  const tfm_test::TempDir tmp("checkpoint_state");
  const std::string path = tmp.file("last.ckpt");
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::string message;  // after "PATH: corrupt checkpoint: "
  };
  const std::string step_range = "expected an integer from 0 to 9223372036854775807";
  const std::vector<Case> cases = {
      {"a string step", [](json& s) { s["step"] = "60"; }, "the state's \"step\" is \"60\", " + step_range},
      // A float past int64_t: converted, it was step -9223372036854775808 (undefined behaviour).
      {"a step of 1e30", [](json& s) { s["step"] = 1e30; }, "the state's \"step\" is 1e+30, " + step_range},
      {"a negative step", [](json& s) { s["step"] = -5; }, "the state's \"step\" is -5, " + step_range},
      {"an unsigned step past int64_t", [](json& s) { s["step"] = UINT64_MAX; },
       "the state's \"step\" is 18446744073709551615, " + step_range},
      {"no step", [](json& s) { s.erase("step"); }, "the state has no \"step\""},
      {"negative optimizer steps", [](json& s) { s["optimizer"]["steps"] = -1; },
       "the state's \"optimizer.steps\" is -1, " + step_range},
      {"an optimizer name of a number", [](json& s) { s["optimizer"]["name"] = 3; },
       "the state's \"optimizer.name\" is 3, expected a string"},
      {"an optimizer of an array", [](json& s) { s["optimizer"] = json::array(); },
       "the state's \"optimizer\" is [], expected an object"},
      {"a best val loss of a string", [](json& s) { s["best_val_loss"] = "low"; },
       "the state's \"best_val_loss\" is \"low\", expected a number, or null"},
      {"negative elapsed seconds", [](json& s) { s["elapsed_s"] = -1.5; },
       "the state's \"elapsed_s\" is -1.5, expected a number of seconds >= 0"},
      {"training seconds of a string", [](json& s) { s["training_s"] = "soon"; },
       "the state's \"training_s\" is \"soon\", expected a number of seconds >= 0"},
      {"a stream of 2 words",
       [](json& s) {
         s["rng"]["sampler"] = {1, 2};
       },
       "the state's \"rng.sampler\" is [1,2], expected an array of 5 unsigned"},
      {"no random streams", [](json& s) { s.erase("rng"); }, "the state has no \"rng\""},
      {"a stopped of a number", [](json& s) { s["stopped"] = 3; },
       "the state's \"stopped\" is 3, expected \"target_loss\" or \"max_seconds\""},
      {"2 ranks without their streams", [](json& s) { s["ranks"] = 2; }, "the state has no \"rng.ranks\""},
      {"0 ranks", [](json& s) { s["ranks"] = 0; },
       "the state's \"ranks\" is 0, expected an integer from 1 to 9223372036854775807"},
      {"an ema_in_model of a string", [](json& s) { s["ema_in_model"] = "yes"; },
       "the state's \"ema_in_model\" is \"yes\", expected true or false"},
      {"negative unlogged steps",
       [](json& s) {
         s["unlogged"] = {{"steps", -1}, {"loss", 0}, {"grad_norm", 0}, {"auxiliary", 0}};
       },
       "the state's \"unlogged.steps\" is -1, " + step_range},
      {"an unlogged loss of NaN's stand-in",
       [](json& s) {
         s["unlogged"] = {{"steps", 2}, {"loss", "nan"}, {"grad_norm", 0}, {"auxiliary", 0}};
       },
       "the state's \"unlogged.loss\" is \"nan\", expected a finite number"},
      {"a data hash of 3 digits", [](json& s) { s["data_hash"] = "abc"; },
       "the state's \"data_hash\" is \"abc\", expected 16 hexadecimal digits"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string bytes = tfm_test::with_edited_state(good, c.edit);
    write_checkpoint_file(path, bytes);
    const std::string expected = path + ": corrupt checkpoint: " + c.message;
    // The whole file, and the state alone (what a list of runs reads).
    CHECK_THROWS_WITH(load_checkpoint(path), Catch::StartsWith(expected));
    CHECK_THROWS_WITH(load_checkpoint_state(path), Catch::StartsWith(expected));
    CHECK_THROWS_AS(load_checkpoint_state(path), IoError);
  }

  // What tfm writes reads back as it was: a multi-rank run's streams, a stop, the EMA, no evaluation.
  Checkpoint ck = load_checkpoint(fixture);
  CHECK(ck.state.step == 2);
  // Written before the training loop's clock was kept apart: its elapsed_s stands for it.
  CHECK(ck.state.training_s == ck.state.elapsed_s);
  CHECK(ck.state.optimizer == "adamw");
  CHECK(ck.state.ranks() == 1);
  ck.state.streams = {{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}}, {{11, 12, 13, 14, 15}, {16, 17, 18, 19, 20}}};
  ck.state.stopped = "max_seconds";
  ck.state.ema_in_model = true;
  ck.state.best_val_loss = std::numeric_limits<double>::infinity();
  save_checkpoint(path, ck);
  const CheckpointState back = load_checkpoint_state(path);
  REQUIRE(back.ranks() == 2);
  CHECK(back.streams[1].sampler == ck.state.streams[1].sampler);
  CHECK(back.streams[1].dropout == ck.state.streams[1].dropout);
  CHECK(back.stopped == "max_seconds");
  CHECK(back.ema_in_model);
  CHECK_FALSE(back.evaluated());
  CHECK(back.step == 2);
}

TEST_CASE("checkpoint: a FIFO where a checkpoint should be is refused at once, never waited on",
          "[checkpoint]") {
  // A run list and a resume read the state alone (load_checkpoint_state): a FIFO there hung them.
  const tfm_test::TempDir tmp("checkpoint_fifo");
  const std::string path = tmp.file("best.ckpt");
  REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
  CHECK_THROWS_WITH(load_checkpoint_state(path), Catch::Contains(path) && Catch::Contains("FIFO"));
  CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains(path) && Catch::Contains("FIFO"));
}
