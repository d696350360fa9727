// A checkpoint file's sections as bytes, for tests that write what tfm never writes (a state field of
// the wrong type, sections out of order or twice) with a right checksum, so that the reader's checks
// after the checksum's are what they meet: split a file tfm wrote, change it, join it again.
// The layout is checkpoint.h's.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tfm/training/checkpoint.h"

namespace tfm_test {

// (name, data) in the file's order.
using CheckpointSections = std::vector<std::pair<std::string, std::string>>;

// The sections of a whole checkpoint file's bytes (one tfm wrote: not checked here).
inline CheckpointSections checkpoint_sections(const std::string& bytes) {
  const auto get = [&bytes](size_t& at, size_t n) {
    const std::string s = bytes.substr(at, n);
    at += n;
    return s;
  };
  const auto u64 = [&](size_t& at, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, get(at, n).data(), n);  // little-endian, as the file
    return v;
  };
  size_t at = 12;
  const uint64_t count = u64(at, 4);
  at = 32;
  CheckpointSections sections;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string name = get(at, u64(at, 4));
    sections.emplace_back(name, get(at, u64(at, 8)));
  }
  return sections;
}

// A checkpoint file of `sections`: the header with their count, size and CRC-32.
inline std::string checkpoint_bytes(const CheckpointSections& sections) {
  const auto put = [](std::string& out, uint64_t v, size_t n) {
    out.append(reinterpret_cast<const char*>(&v), n);
  };
  std::string payload;
  for (const auto& [name, data] : sections) {
    put(payload, name.size(), 4);
    payload += name;
    put(payload, data.size(), 8);
    payload += data;
  }
  std::string out("TFMCKPT\0", 8);
  put(out, tfm::kCheckpointVersion, 4);
  put(out, sections.size(), 4);
  put(out, payload.size(), 8);
  put(out, tfm::crc32(payload.data(), payload.size()), 4);
  put(out, 0, 4);
  return out + payload;
}

// `bytes` with its state section's JSON changed by `edit`, the checksum right.
inline std::string with_edited_state(const std::string& bytes,
                                     const std::function<void(nlohmann::json&)>& edit) {
  CheckpointSections sections = checkpoint_sections(bytes);
  for (auto& [name, data] : sections)
    if (name == "state") {
      nlohmann::json state = nlohmann::json::parse(data);
      edit(state);
      data = state.dump();
    }
  return checkpoint_bytes(sections);
}

}  // namespace tfm_test
