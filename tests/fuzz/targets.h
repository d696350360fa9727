// Fuzz targets: one function per reader of untrusted input. libFuzzer drives them (fuzz_main.cpp,
// scripts/dev/fuzz.sh) and the normal test suite replays the committed corpora and every input that
// once crashed (tests/fuzz/test_fuzz_corpus.cpp). A target may throw tfm::Error (a clear rejection);
// anything else – a crash, a sanitizer report, another exception type – is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/data/bpe.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/safetensors.h"
#include "tfm/training/checkpoint.h"

namespace tfm::fuzz {

// JSON text -> parse -> validate -> resolve (with the derived defaults).
inline void config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  resolve_config(parse_json(text, "fuzz.json"));
}

// Bytes -> strict UTF-8 decoding -> the char tokenizer's vocabulary and encoding.
inline void utf8(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  decode_utf8(text, "fuzz.txt");
  const Tokenizer tok = Tokenizer::from_text(Tokenizer::Kind::Char, text, "fuzz.txt");
  tok.encode(text, "fuzz.txt");
}

// Bytes -> the safetensors header and tensor table.
inline void safetensors(const uint8_t* data, size_t size) {
  parse_safetensors(data, size, "fuzz.safetensors");
}

// Bytes -> the checkpoint reader (every section validated before use). A mutated input almost never
// keeps a valid CRC-32, so the fuzzer would only ever meet the checksum check: re-stamp the CRC of
// the payload (bytes 24..27) of a copy so the section parsers are reached. checkpoint_raw is the
// input as given (the replay test runs both, so the checksum path stays covered).
inline void checkpoint_raw(const uint8_t* data, size_t size) {
  parse_checkpoint(data, size, "fuzz.ckpt");
}
inline void checkpoint(const uint8_t* data, size_t size) {
  constexpr size_t kHeader = 32, kCrcOffset = 24;
  if (size < kHeader) return checkpoint_raw(data, size);
  std::vector<uint8_t> copy(data, data + size);
  const uint32_t crc = crc32(copy.data() + kHeader, size - kHeader);
  std::memcpy(copy.data() + kCrcOffset, &crc, sizeof crc);
  parse_checkpoint(copy.data(), copy.size(), "fuzz.ckpt");
}

// Bytes -> a BPE tokenizer file; when it parses, a few bytes of the input must survive
// encode -> decode unchanged (byte-level BPE is lossless for any bytes).
inline void bpe(const uint8_t* data, size_t size) {
  const BpeTokenizer tok = BpeTokenizer::parse(data, size, "fuzz.bpe");
  const std::string sample(reinterpret_cast<const char*>(data), size < 64 ? size : 64);
  if (tok.decode(tok.encode(sample)) != sample) __builtin_trap();  // a round-trip failure is a finding
}

// Bytes -> the GGUF reader (header, metadata of every kind, tensor infos, offsets); when it parses,
// each tensor converts to float32, and what the writer then writes reads back and writes again to the
// same bytes (the writer may refuse what the reader lets through, e.g. keys that are not
// lower_snake_case: a tfm::Error like any rejection).
inline void gguf(const uint8_t* data, size_t size) {
  const GgufFile f = parse_gguf(data, size, "fuzz.gguf");
  for (const GgufTensor& t : f.tensors) gguf_tensor_values(t);
  const std::string bytes = serialize_gguf(f, "fuzz.gguf");
  const GgufFile back = parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "fuzz.gguf");
  const bool same = serialize_gguf(back, "fuzz.gguf") == bytes;  // bitwise, so NaN metadata compares too
  if (!same) __builtin_trap();  // a write-read round-trip failure is a finding
}

// Runs target `name` on one input; false for an unknown name.
inline bool run(const std::string& name, const uint8_t* data, size_t size) {
  try {
    if (name == "config")
      config(data, size);
    else if (name == "utf8")
      utf8(data, size);
    else if (name == "safetensors")
      safetensors(data, size);
    else if (name == "checkpoint")
      checkpoint(data, size);
    else if (name == "checkpoint_raw")
      checkpoint_raw(data, size);
    else if (name == "bpe")
      bpe(data, size);
    else if (name == "gguf")
      gguf(data, size);
    else
      return false;
  } catch (const tfm::Error&) {
    // A clear rejection is the expected outcome for malformed input.
  }
  return true;
}

}  // namespace tfm::fuzz
