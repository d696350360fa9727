// GGUF, the file format of ggml and llama.cpp, version 3 (the spec: ggml's docs/gguf.md,
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). Little-endian throughout:
//   header        "GGUF" (4 bytes), version (u32, 3), tensor_count (u64), metadata_kv_count (u64)
//   metadata      per pair: key (string), value type (u32), value; a string is a u64 byte length and
//                 the bytes (no NUL); an array is its element type (u32), its length (u64, elements)
//                 and the elements, which may themselves be arrays
//   tensor infos  per tensor: name (string, at most 64 bytes), n_dims (u32), dims (u64 each, ggml's
//                 order: dims[0] is the innermost, fastest-varying one), ggml type (u32), offset (u64,
//                 relative to the data section, a multiple of the alignment)
//   padding       0x00 up to a multiple of the alignment (general.alignment, u32, default 32)
//   data          each tensor's elements, row-major, every tensor starting at a multiple of the alignment
// The writer packs the tensors in the order given, each padded to the alignment, which is also the
// layout ggml's own reader insists on (gguf.cpp: "tensor has offset X, expected Y").
// The reader validates everything against the bytes that are there before it allocates: counts and
// lengths against the bytes left, types, names, dims, offsets, overlaps; errors are IoError("<file>:
// ..."), naming the key or tensor and what is wrong.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tfm/engine/tensor.h"

namespace tfm {

// gguf_metadata_value_type.
enum class GgufType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};
const char* gguf_type_name(GgufType type);  // "uint32", "string", ...

// The ggml tensor types tfm writes and reads (ggml_type); the others are quantized block formats.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, BF16 = 30 };
const char* ggml_type_name(GgmlType type);  // "F32", "F16", "BF16"
size_t ggml_type_size(GgmlType type);       // bytes per element

// float32 -> IEEE half, round to nearest even (overflow to infinity, NaN stays NaN), and back.
// (bfloat16: to_bf16 / from_bf16 in gemm.h.)
uint16_t to_f16(float x);
float from_f16(uint16_t h);

// One metadata value: a number, bool or string, or an array of values of one type.
class GgufValue {
 public:
  GgufValue() = default;  // uint8 0
  static GgufValue u8(uint8_t v) { return unsigned_of(GgufType::UInt8, v); }
  static GgufValue i8(int8_t v) { return signed_of(GgufType::Int8, v); }
  static GgufValue u16(uint16_t v) { return unsigned_of(GgufType::UInt16, v); }
  static GgufValue i16(int16_t v) { return signed_of(GgufType::Int16, v); }
  static GgufValue u32(uint32_t v) { return unsigned_of(GgufType::UInt32, v); }
  static GgufValue i32(int32_t v) { return signed_of(GgufType::Int32, v); }
  static GgufValue u64(uint64_t v) { return unsigned_of(GgufType::UInt64, v); }
  static GgufValue i64(int64_t v) { return signed_of(GgufType::Int64, v); }
  static GgufValue f32(float v) { return number_of(GgufType::Float32, v); }
  static GgufValue f64(double v) { return number_of(GgufType::Float64, v); }
  static GgufValue boolean(bool v) { return unsigned_of(GgufType::Bool, v); }
  static GgufValue string(std::string v);
  static GgufValue array(GgufType element_type, std::vector<GgufValue> items);
  static GgufValue strings(const std::vector<std::string>& items);
  static GgufValue int32s(const std::vector<int32_t>& items);
  static GgufValue float32s(const std::vector<float>& items);

  GgufType type() const { return type_; }
  GgufType element_type() const { return element_; }  // arrays only
  // The value; Error("GgufValue: ...") when it is of another kind. unsigned_value() takes the
  // unsigned integer types and bool, signed_value() the signed ones, number() both float types.
  uint64_t unsigned_value() const;
  int64_t signed_value() const;
  double number() const;
  bool boolean_value() const;
  const std::string& str() const;
  const std::vector<GgufValue>& items() const;

  bool operator==(const GgufValue& other) const;
  bool operator!=(const GgufValue& other) const { return !(*this == other); }

 private:
  static GgufValue unsigned_of(GgufType type, uint64_t v);
  static GgufValue signed_of(GgufType type, int64_t v);
  static GgufValue number_of(GgufType type, double v);
  // One member per kind, the one `type_` names in use (plain members: GCC 12 at -O1 with ASan warned
  // of uninitialised reads moving a std::variant of these, -Wmaybe-uninitialized, a false positive).
  GgufType type_ = GgufType::UInt8;
  GgufType element_ = GgufType::UInt8;  // arrays
  uint64_t unsigned_ = 0;               // unsigned integers, bool
  int64_t signed_ = 0;                  // signed integers
  double number_ = 0;                   // float32 (exactly), float64
  std::string string_;
  std::vector<GgufValue> items_;
};

struct GgufTensor {
  std::string name;
  Shape shape;  // row-major, outermost first (tfm's order; the file lists it reversed)
  GgmlType type = GgmlType::F32;
  std::vector<uint8_t> data;  // the elements, little-endian: numel * ggml_type_size(type) bytes
  uint64_t offset = 0;        // into the data section (the reader fills it in; the writer lays out its own)
};

// A float32 tensor as a GGUF tensor of `type` (F16 and BF16 rounded to nearest even).
GgufTensor gguf_tensor(std::string name, const Tensor& values, GgmlType type = GgmlType::F32);
// A GGUF tensor's elements as float32.
Tensor gguf_tensor_values(const GgufTensor& t);

struct GgufFile {
  std::string source;  // the file (or buffer name) it came from
  uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensor> tensors;                          // in file order
  uint64_t data_offset = 0;                                 // reader: where the data section starts

  // general.alignment, or the spec's default of 32 without it.
  uint32_t alignment() const;
  const GgufValue* find(const std::string& key) const;
  // The value of `key`; IoError("<source>: no metadata key ...") when absent.
  const GgufValue& at(const std::string& key) const;
  // Sets `key`, replacing its value if present (keeping its place), else appending.
  void set(const std::string& key, GgufValue value);
  const GgufTensor* find_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // IoError("<source>: no tensor ...")
};

// Limits the writer keeps and the reader enforces (the spec's, and ggml's where it is stricter).
constexpr size_t kGgufMaxKeyBytes = 65535;  // spec: keys at most 2^16 - 1 bytes
constexpr size_t kGgufMaxTensorName = 63;   // spec: 64 bytes; ggml's GGML_MAX_NAME keeps a NUL
constexpr int kGgufMaxDims = 4;             // spec: "currently at most 4" (GGML_MAX_DIMS)
constexpr int kGgufMaxArrayDepth = 8;       // nested arrays: ours, so a hostile file cannot recurse deeply
constexpr uint32_t kGgufDefaultAlignment = 32;

// The file's bytes. Error("<what>: ...") for what the spec forbids: a key that is not
// lower_snake_case segments separated by '.', duplicate keys or tensor names, general.alignment not
// a uint32 power of two >= 8, a tensor name over kGgufMaxTensorName bytes, a rank outside [1, 4],
// data whose size does not match shape and type.
std::string serialize_gguf(const GgufFile& file, const std::string& what = "gguf");
// The same written atomically (AtomicFile: a temporary, fsync, rename); errors name the path.
void save_gguf(const std::string& path, const GgufFile& file);

// Reads and validates a GGUF file (version 2 or 3: v3 only added big-endian files, which are
// refused); errors are IoError("<path>: ..."). Tensors of types other than F32, F16 and BF16 are
// refused by name and type.
GgufFile load_gguf(const std::string& path);
// The same from bytes in memory (tests, fuzzers); errors are IoError("<what>: ...").
GgufFile parse_gguf(const uint8_t* data, size_t size, const std::string& what = "gguf");

}  // namespace tfm
