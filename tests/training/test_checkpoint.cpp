// Checkpoint files: the CRC-32 is zlib's (bit for bit the table CRC tfm used before), and a checkpoint
// written by an older build (tests/fixtures/checkpoint_v1_tiny.ckpt, format 1) still loads.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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
  CHECK(c.state.at("optimizer").at("steps") == 2);
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
