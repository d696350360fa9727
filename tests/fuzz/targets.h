// Fuzz targets: one function per reader of untrusted input. libFuzzer drives them (fuzz_main.cpp,
// scripts/fuzz.sh) and the normal test suite replays the committed corpora and every input that
// once crashed (tests/test_fuzz_corpus.cpp). A target may throw tfm::Error (a clear rejection);
// anything else – a crash, a sanitizer report, another exception type – is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tfm/checkpoint.h"
#include "tfm/config.h"
#include "tfm/data.h"
#include "tfm/error.h"
#include "tfm/safetensors.h"

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
inline void safetensors(const uint8_t* data, size_t size) { parse_safetensors(data, size, "fuzz.safetensors"); }

// Bytes -> the checkpoint reader (every section validated before use).
inline void checkpoint(const uint8_t* data, size_t size) { parse_checkpoint(data, size, "fuzz.ckpt"); }

// Runs target `name` on one input; false for an unknown name.
inline bool run(const std::string& name, const uint8_t* data, size_t size) {
  try {
    if (name == "config") config(data, size);
    else if (name == "utf8") utf8(data, size);
    else if (name == "safetensors") safetensors(data, size);
    else if (name == "checkpoint") checkpoint(data, size);
    else return false;
  } catch (const tfm::Error&) {
    // A clear rejection is the expected outcome for malformed input.
  }
  return true;
}

}  // namespace tfm::fuzz
