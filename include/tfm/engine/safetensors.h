// The safetensors format (https://github.com/huggingface/safetensors), float32 only:
//   8 bytes   N, the header length (unsigned little-endian)
//   N bytes   JSON {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//                   "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   the rest  raw little-endian data; offsets are relative to its start
// Readers validate everything before allocating or copying: header size, JSON, types, dtype,
// shape against byte count, offsets in range, and that the tensors tile the data section exactly
// (no overlap, no gap, no trailing bytes), as the format requires.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/tensor.h"

namespace tfm {

// The reference implementation's bound on the header; larger headers are refused before reading.
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  std::string source;                           // the file (or buffer name) it came from
  NamedTensors tensors;                         // in data-section order
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent

  bool contains(const std::string& name) const;
  // The tensor called `name`; IoError("<source>: no tensor named ...") when absent.
  const Tensor& at(const std::string& name) const;
};

// Writes float32 tensors in the given order (non-contiguous views are copied) to a temporary beside
// path, then renames it over path (AtomicFile). Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file; errors are IoError("<path>: ...").
SafetensorsFile load_safetensors(const std::string& path);

// The same from bytes in memory (for tests and fuzzers); errors are IoError("<what>: ...").
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what = "safetensors");

}  // namespace tfm
