// GGUF v3 writer and reader, from ggml's docs/gguf.md (see gguf.h for the layout).
#include "tfm/engine/gguf.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gemm.h"

// Numbers are copied byte for byte: the format is little-endian, and so must the host be.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF I/O assumes a little-endian host");

namespace tfm {

namespace {

constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;

bool is_integer(GgufType t) {
  return t == GgufType::UInt8 || t == GgufType::Int8 || t == GgufType::UInt16 || t == GgufType::Int16 ||
         t == GgufType::UInt32 || t == GgufType::Int32 || t == GgufType::UInt64 || t == GgufType::Int64;
}
bool is_signed(GgufType t) {
  return t == GgufType::Int8 || t == GgufType::Int16 || t == GgufType::Int32 || t == GgufType::Int64;
}
bool is_known(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::Float64);
}

// Bytes of a fixed-size value type (0 for string and array).
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UInt8:
    case GgufType::Int8:
    case GgufType::Bool:
      return 1;
    case GgufType::UInt16:
    case GgufType::Int16:
      return 2;
    case GgufType::UInt32:
    case GgufType::Int32:
    case GgufType::Float32:
      return 4;
    case GgufType::UInt64:
    case GgufType::Int64:
    case GgufType::Float64:
      return 8;
    default:
      return 0;
  }
}
// The fewest bytes one value of type t can take in a file (string: its length; array: type + length).
uint64_t min_encoded_size(GgufType t) {
  return t == GgufType::String ? 8 : t == GgufType::Array ? 12 : scalar_size(t);
}

uint64_t align_up(uint64_t offset, uint64_t alignment) {
  return offset + (alignment - offset % alignment) % alignment;
}

bool is_power_of_two(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// The spec's key rule: ASCII, '.'-separated segments of lower_snake_case ([a-z0-9_]).
bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > kGgufMaxKeyBytes || key.front() == '.' || key.back() == '.') return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '.') {
      if (key[i - 1] == '.') return false;
    } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// The known ggml type names, for errors about the quantized types tfm does not read.
const char* any_ggml_type_name(uint32_t t) {
  static const char* const names[] = {
      "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",       "Q4_3",       "Q5_0",       "Q5_1",
      "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",
      "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL",     "IQ3_S",      "IQ2_S",      "IQ4_XS",
      "I8",       "I16",      "I32",     "I64",   "F64",        "IQ1_M",      "BF16",       "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

// ---- writing ----

class Writer {
 public:
  explicit Writer(std::string what) : what_(std::move(what)) {}
  template <class T>
  void pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out_ += s;
  }
  void value(const GgufValue& v, int depth) {
    switch (v.type()) {
      case GgufType::UInt8:
        pod(static_cast<uint8_t>(v.unsigned_value()));
        break;
      case GgufType::Int8:
        pod(static_cast<int8_t>(v.signed_value()));
        break;
      case GgufType::UInt16:
        pod(static_cast<uint16_t>(v.unsigned_value()));
        break;
      case GgufType::Int16:
        pod(static_cast<int16_t>(v.signed_value()));
        break;
      case GgufType::UInt32:
        pod(static_cast<uint32_t>(v.unsigned_value()));
        break;
      case GgufType::Int32:
        pod(static_cast<int32_t>(v.signed_value()));
        break;
      case GgufType::UInt64:
        pod(v.unsigned_value());
        break;
      case GgufType::Int64:
        pod(v.signed_value());
        break;
      case GgufType::Float32:
        pod(static_cast<float>(v.number()));
        break;
      case GgufType::Float64:
        pod(v.number());
        break;
      case GgufType::Bool:
        pod(static_cast<uint8_t>(v.boolean_value()));
        break;
      case GgufType::String:
        str(v.str());
        break;
      case GgufType::Array:
        TFM_CHECK(depth < kGgufMaxArrayDepth, what_, "arrays nested deeper than ", kGgufMaxArrayDepth,
                  " levels");
        pod(static_cast<uint32_t>(v.element_type()));
        pod<uint64_t>(v.items().size());
        for (const GgufValue& item : v.items()) value(item, depth + 1);
        break;
    }
  }
  void pad_to(uint64_t alignment) { out_.append(align_up(out_.size(), alignment) - out_.size(), '\0'); }
  std::string& bytes() { return out_; }

 private:
  std::string what_;
  std::string out_;
};

// Checks the file against the spec and returns the header, metadata and tensor infos (everything
// before the data section, padded), and each tensor's offset in the data section.
std::string layout(const GgufFile& file, const std::string& what, std::vector<uint64_t>& offsets) {
  std::set<std::string> keys;
  for (const auto& [key, value] : file.metadata) {
    TFM_CHECK(valid_key(key), what, "metadata key \"", key,
              "\" is not '.'-separated lower_snake_case segments of at most ", kGgufMaxKeyBytes,
              " bytes (gguf.md)");
    TFM_CHECK(keys.insert(key).second, what, "duplicate metadata key \"", key, "\"");
    if (key == "general.alignment") {
      TFM_CHECK(value.type() == GgufType::UInt32, what, "general.alignment is a ",
                gguf_type_name(value.type()), ", expected a uint32 (gguf.md)");
      TFM_CHECK(is_power_of_two(value.unsigned_value()) && value.unsigned_value() >= 8, what,
                "general.alignment is ", value.unsigned_value(),
                ", expected a power of two >= 8 (gguf.md: a "
                "multiple of 8)");
    }
  }
  const uint64_t alignment = file.alignment();
  std::set<std::string> names;
  offsets.clear();
  uint64_t offset = 0;
  for (const GgufTensor& t : file.tensors) {
    TFM_CHECK(!t.name.empty() && t.name.size() <= kGgufMaxTensorName, what, "tensor name \"", t.name,
              "\" must have 1 to ", kGgufMaxTensorName, " bytes (ggml keeps names in 64 bytes with a NUL)");
    TFM_CHECK(names.insert(t.name).second, what, "duplicate tensor name \"", t.name, "\"");
    TFM_CHECK(!t.shape.empty() && t.shape.size() <= kGgufMaxDims, what, "tensor \"", t.name, "\": rank ",
              t.shape.size(), " is outside [1, ", kGgufMaxDims, "]");
    for (int64_t d : t.shape)
      TFM_CHECK(d > 0, what, "tensor \"", t.name, "\": shape ", shape_str(t.shape), " has a dimension < 1");
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * ggml_type_size(t.type);
    TFM_CHECK(t.data.size() == bytes, what, "tensor \"", t.name, "\": ", t.data.size(),
              " bytes of data, shape ", shape_str(t.shape), " of ", ggml_type_name(t.type), " needs ", bytes);
    offsets.push_back(offset);
    offset = align_up(offset + bytes, alignment);
  }

  Writer w(what);
  w.bytes().append(kGgufMagic, 4);
  w.pod<uint32_t>(kVersion);
  w.pod<uint64_t>(file.tensors.size());
  w.pod<uint64_t>(file.metadata.size());
  for (const auto& [key, value] : file.metadata) {
    w.str(key);
    w.pod(static_cast<uint32_t>(value.type()));
    w.value(value, 0);
  }
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const GgufTensor& t = file.tensors[i];
    w.str(t.name);
    w.pod(static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d)
      w.pod(static_cast<uint64_t>(*d));  // innermost first
    w.pod(static_cast<uint32_t>(t.type));
    w.pod(offsets[i]);
  }
  w.pad_to(alignment);
  return std::move(w.bytes());
}

// ---- reading ----

// The bytes being read: a file or a buffer, with the position and size known up front, so every
// length is checked against what is left before anything is allocated.
class Input {
 public:
  Input(std::string what, uint64_t size, std::function<void(void*, uint64_t, uint64_t)> read_at)
      : what_(std::move(what)), size_(size), read_at_(std::move(read_at)) {}

  const std::string& what() const { return what_; }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  uint64_t size() const { return size_; }

  // Reads n bytes at the current position; `item` says what they are, for the truncation error.
  void read(void* dst, uint64_t n, const std::string& item) {
    if (n > left())
      throw IoError(detail::concat(what_, ": truncated: ", item, " needs ", n, " bytes at offset ", pos_,
                                   ", the file ends at ", size_));
    if (n > 0) read_at_(dst, pos_, n);
    pos_ += n;
  }
  void read_at(void* dst, uint64_t offset, uint64_t n) {
    if (n > 0) read_at_(dst, offset, n);
  }
  template <class T>
  T pod(const std::string& item) {
    T v;
    read(&v, sizeof v, item);
    return v;
  }
  std::string str(const std::string& item, uint64_t max_bytes) {
    const uint64_t n = pod<uint64_t>(item + "'s length");
    if (n > max_bytes)
      throw IoError(
          detail::concat(what_, ": ", item, " is ", n, " bytes long, more than the limit of ", max_bytes));
    if (n > left())
      throw IoError(detail::concat(what_, ": truncated: ", item, " of ", n, " bytes at offset ", pos_,
                                   " runs past the end of the file at ", size_));
    std::string s(static_cast<size_t>(n), '\0');
    read(s.data(), n, item);
    return s;
  }

 private:
  std::string what_;
  uint64_t size_ = 0, pos_ = 0;
  std::function<void(void*, uint64_t, uint64_t)> read_at_;
};

GgufValue read_value(Input& in, GgufType type, const std::string& item, int depth) {
  switch (type) {
    case GgufType::UInt8:
      return GgufValue::u8(in.pod<uint8_t>(item));
    case GgufType::Int8:
      return GgufValue::i8(in.pod<int8_t>(item));
    case GgufType::UInt16:
      return GgufValue::u16(in.pod<uint16_t>(item));
    case GgufType::Int16:
      return GgufValue::i16(in.pod<int16_t>(item));
    case GgufType::UInt32:
      return GgufValue::u32(in.pod<uint32_t>(item));
    case GgufType::Int32:
      return GgufValue::i32(in.pod<int32_t>(item));
    case GgufType::UInt64:
      return GgufValue::u64(in.pod<uint64_t>(item));
    case GgufType::Int64:
      return GgufValue::i64(in.pod<int64_t>(item));
    case GgufType::Float32:
      return GgufValue::f32(in.pod<float>(item));
    case GgufType::Float64:
      return GgufValue::f64(in.pod<double>(item));
    case GgufType::Bool: {
      const uint8_t b = in.pod<uint8_t>(item);
      // gguf.md: "1-byte value where 0 is false and 1 is true. Anything else is invalid".
      if (b > 1)
        throw IoError(detail::concat(in.what(), ": ", item, " is a bool of byte value ", int{b},
                                     " at offset ", in.pos() - 1, " (only 0 and 1 are valid)"));
      return GgufValue::boolean(b == 1);
    }
    case GgufType::String:
      return GgufValue::string(in.str(item, in.left()));
    case GgufType::Array: {
      if (depth >= kGgufMaxArrayDepth)
        throw IoError(detail::concat(in.what(), ": ", item, ": arrays nested deeper than ",
                                     kGgufMaxArrayDepth, " levels"));
      const uint32_t raw = in.pod<uint32_t>(item + "'s element type");
      if (!is_known(raw))
        throw IoError(detail::concat(in.what(), ": ", item, " has element type ", raw,
                                     ", not a GGUF value type (0 to 12)"));
      const auto element = static_cast<GgufType>(raw);
      const uint64_t n = in.pod<uint64_t>(item + "'s length");
      // Every element takes at least min_encoded_size bytes: a length the rest of the file cannot
      // hold is refused before any element is allocated.
      if (n > in.left() / min_encoded_size(element))
        throw IoError(detail::concat(in.what(), ": ", item, " claims ", n, " elements of ",
                                     gguf_type_name(element), ", more than the ", in.left(),
                                     " bytes left can hold"));
      std::vector<GgufValue> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i)
        items.push_back(read_value(in, element, detail::concat(item, "[", i, "]"), depth + 1));
      return GgufValue::array(element, std::move(items));
    }
  }
  throw IoError(detail::concat(in.what(), ": ", item, " has unknown type ", static_cast<uint32_t>(type)));
}

GgufFile read_gguf(Input& in) {
  GgufFile file;
  file.source = in.what();
  const std::string& what = in.what();
  char magic[4];
  in.read(magic, 4, "the magic number");
  if (std::memcmp(magic, kGgufMagic, 4) != 0)
    throw IoError(detail::concat(what, ": not a GGUF file (the first 4 bytes are not \"GGUF\")"));
  file.version = in.pod<uint32_t>("the version");
  if (file.version == 0x03000000u || file.version == 0x02000000u)
    throw IoError(detail::concat(what, ": a big-endian GGUF file (version field ", file.version,
                                 " byte-swapped); tfm reads little-endian files only"));
  if (file.version != 2 && file.version != 3)
    throw IoError(detail::concat(what, ": GGUF version ", file.version,
                                 ", expected 3 (or 2, the same layout; version 1 used 32-bit counts)"));
  const uint64_t n_tensors = in.pod<uint64_t>("the tensor count");
  const uint64_t n_kv = in.pod<uint64_t>("the metadata count");
  // A pair takes at least 13 bytes (key length, type, one byte of value), a tensor info 24.
  if (n_kv > in.left() / 13)
    throw IoError(detail::concat(what, ": header claims ", n_kv, " metadata pairs, more than the ", in.left(),
                                 " bytes after the header can hold"));
  if (n_tensors > in.left() / 24)
    throw IoError(detail::concat(what, ": header claims ", n_tensors, " tensors, more than the ", in.left(),
                                 " bytes after the header can hold"));

  std::set<std::string> keys;
  file.metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = in.str(detail::concat("metadata key ", i), kGgufMaxKeyBytes);
    if (key.empty()) throw IoError(detail::concat(what, ": metadata key ", i, " is empty"));
    if (!keys.insert(key).second)
      throw IoError(detail::concat(what, ": duplicate metadata key \"", key, "\""));
    const std::string item = "metadata \"" + key + "\"";
    const uint32_t raw = in.pod<uint32_t>(item + "'s type");
    if (!is_known(raw))
      throw IoError(detail::concat(what, ": ", item, " has type ", raw, ", not a GGUF value type (0 to 12)"));
    GgufValue value = read_value(in, static_cast<GgufType>(raw), item, 0);
    file.metadata.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = file.find("general.alignment")) {
    if (a->type() != GgufType::UInt32)
      throw IoError(detail::concat(what, ": general.alignment is a ", gguf_type_name(a->type()),
                                   ", expected a uint32 (gguf.md)"));
    if (!is_power_of_two(a->unsigned_value()) || a->unsigned_value() < 8)
      throw IoError(detail::concat(what, ": general.alignment is ", a->unsigned_value(),
                                   ", expected a power of two >= 8 (gguf.md: a multiple of 8)"));
  }
  const uint64_t alignment = file.alignment();

  std::set<std::string> names;
  file.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    // The spec allows 64 bytes; the name is checked against that, then kept to ggml's 63 on write.
    t.name = in.str(detail::concat("tensor name ", i), 64);
    if (t.name.empty()) throw IoError(detail::concat(what, ": tensor ", i, " has an empty name"));
    if (!names.insert(t.name).second)
      throw IoError(detail::concat(what, ": duplicate tensor name \"", t.name, "\""));
    const std::string item = "tensor \"" + t.name + "\"";
    const uint32_t n_dims = in.pod<uint32_t>(item + "'s rank");
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kGgufMaxDims))
      throw IoError(detail::concat(what, ": ", item, " has rank ", n_dims, ", expected 1 to ", kGgufMaxDims));
    t.shape.assign(n_dims, 0);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.pod<uint64_t>(item + "'s dimensions");
      // Bounded so that byte counts cannot overflow: no file holds 2^60 elements.
      if (dim == 0 || dim > (uint64_t{1} << 60) / numel)
        throw IoError(detail::concat(what, ": ", item, " dimension ", d, " is ", dim,
                                     dim == 0 ? " (must be >= 1)" : " (more than 2^60 elements in all)"));
      numel *= dim;
      t.shape[n_dims - 1 - d] = static_cast<int64_t>(dim);  // the file lists the innermost first
    }
    const uint32_t type = in.pod<uint32_t>(item + "'s type");
    if (type != static_cast<uint32_t>(GgmlType::F32) && type != static_cast<uint32_t>(GgmlType::F16) &&
        type != static_cast<uint32_t>(GgmlType::BF16))
      throw IoError(detail::concat(what, ": ", item, " has ggml type ", type, " (", any_ggml_type_name(type),
                                   "); tfm reads F32, F16 and BF16 tensors only"));
    t.type = static_cast<GgmlType>(type);
    t.offset = in.pod<uint64_t>(item + "'s offset");
    if (t.offset % alignment != 0)
      throw IoError(detail::concat(what, ": ", item, " has offset ", t.offset,
                                   ", not a multiple of the alignment ", alignment));
    file.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  file.data_offset = align_up(in.pos(), alignment);
  const uint64_t data_size = in.size() > file.data_offset ? in.size() - file.data_offset : 0;
  std::vector<size_t> order(file.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return file.tensors[a].offset < file.tensors[b].offset; });
  uint64_t end = 0;
  const GgufTensor* previous = nullptr;
  for (size_t i : order) {
    GgufTensor& t = file.tensors[i];
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * ggml_type_size(t.type);
    if (t.offset > data_size || bytes > data_size - t.offset)
      throw IoError(detail::concat(what, ": truncated: tensor \"", t.name, "\" needs bytes [", t.offset, ", ",
                                   t.offset + bytes, ") of the data section, which has ", data_size,
                                   " bytes (from offset ", file.data_offset, ")"));
    if (previous && t.offset < end)
      throw IoError(detail::concat(what, ": tensor \"", t.name, "\" at data offset ", t.offset,
                                   " overlaps tensor \"", previous->name, "\", which ends at ", end));
    t.data.resize(static_cast<size_t>(bytes));
    in.read_at(t.data.data(), file.data_offset + t.offset, bytes);
    end = t.offset + bytes;
    previous = &t;
  }
  return file;
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  static const char* const names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                      "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

const char* ggml_type_name(GgmlType type) {
  return any_ggml_type_name(static_cast<uint32_t>(type));
}

size_t ggml_type_size(GgmlType type) {
  return type == GgmlType::F32 ? 4 : 2;
}

uint16_t to_f16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u;     // NaN: a quiet NaN
  if (u >= 0x38800000u) {                         // |x| >= 2^-14: a normal half, or overflow
    u += 0x0fffu + ((u >> 13) & 1u);              // round the 23-bit mantissa to 10 bits, nearest even
    if (u >= 0x47800000u) return sign | 0x7c00u;  // 2^16 and up (65520 rounds there): infinity
    return static_cast<uint16_t>(sign | ((u >> 13) - (112u << 10)));  // rebias the exponent 127 -> 15
  }
  // Subnormal half: a multiple of 2^-24. The scaling is exact; nearbyint rounds to nearest even, and
  // 1024 is the smallest normal half's encoding, so rounding up into it is right too.
  float magnitude = 0.0f;
  std::memcpy(&magnitude, &u, sizeof u);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f)));
}

float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t u = 0;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&u, &v, sizeof u);
    u |= sign;
  } else if (exponent == 31) {  // infinity or NaN
    u = sign | 0x7f800000u | (mantissa << 13);
  } else {
    u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// ---- GgufValue ----

GgufValue GgufValue::unsigned_of(GgufType type, uint64_t v) {
  GgufValue out;
  out.type_ = type, out.unsigned_ = v;
  return out;
}
GgufValue GgufValue::signed_of(GgufType type, int64_t v) {
  GgufValue out;
  out.type_ = type, out.signed_ = v;
  return out;
}
GgufValue GgufValue::number_of(GgufType type, double v) {
  GgufValue out;
  out.type_ = type, out.number_ = v;
  return out;
}
GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type_ = GgufType::String, out.string_ = std::move(v);
  return out;
}
GgufValue GgufValue::array(GgufType element_type, std::vector<GgufValue> items) {
  for (size_t i = 0; i < items.size(); ++i)
    TFM_CHECK(items[i].type() == element_type, "GgufValue::array", "item ", i, " is ",
              gguf_type_name(items[i].type()), ", the array holds ", gguf_type_name(element_type));
  GgufValue out;
  out.type_ = GgufType::Array, out.element_ = element_type, out.items_ = std::move(items);
  return out;
}
GgufValue GgufValue::strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const std::string& s : items) v.push_back(string(s));
  return array(GgufType::String, std::move(v));
}
GgufValue GgufValue::int32s(const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(i32(x));
  return array(GgufType::Int32, std::move(v));
}
GgufValue GgufValue::float32s(const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float x : items) v.push_back(f32(x));
  return array(GgufType::Float32, std::move(v));
}

uint64_t GgufValue::unsigned_value() const {
  TFM_CHECK((is_integer(type_) && !is_signed(type_)) || type_ == GgufType::Bool, "GgufValue", "a ",
            gguf_type_name(type_), " is not an unsigned integer");
  return unsigned_;
}
int64_t GgufValue::signed_value() const {
  TFM_CHECK(is_signed(type_), "GgufValue", "a ", gguf_type_name(type_), " is not a signed integer");
  return signed_;
}
double GgufValue::number() const {
  TFM_CHECK(type_ == GgufType::Float32 || type_ == GgufType::Float64, "GgufValue", "a ",
            gguf_type_name(type_), " is not a float32 or float64");
  return number_;
}
bool GgufValue::boolean_value() const {
  TFM_CHECK(type_ == GgufType::Bool, "GgufValue", "a ", gguf_type_name(type_), " is not a bool");
  return unsigned_ != 0;
}
const std::string& GgufValue::str() const {
  TFM_CHECK(type_ == GgufType::String, "GgufValue", "a ", gguf_type_name(type_), " is not a string");
  return string_;
}
const std::vector<GgufValue>& GgufValue::items() const {
  TFM_CHECK(type_ == GgufType::Array, "GgufValue", "a ", gguf_type_name(type_), " is not an array");
  return items_;
}
bool GgufValue::operator==(const GgufValue& other) const {
  return type_ == other.type_ && element_ == other.element_ && unsigned_ == other.unsigned_ &&
         signed_ == other.signed_ && number_ == other.number_ && string_ == other.string_ &&
         items_ == other.items_;
}

// ---- tensors and files ----

GgufTensor gguf_tensor(std::string name, const Tensor& values, GgmlType type) {
  GgufTensor t;
  t.name = std::move(name);
  t.shape = values.shape();
  t.type = type;
  const Tensor v = contiguous_values(values);
  const float* p = v.data();
  const auto n = static_cast<size_t>(v.numel());
  t.data.resize(n * ggml_type_size(type));
  if (type == GgmlType::F32) {
    if (n > 0) std::memcpy(t.data.data(), p, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {  // memcpy: the bytes are not uint16_t objects
      const uint16_t h = type == GgmlType::F16 ? to_f16(p[i]) : to_bf16(p[i]);
      std::memcpy(t.data.data() + 2 * i, &h, sizeof h);
    }
  }
  return t;
}

Tensor gguf_tensor_values(const GgufTensor& t) {
  Tensor out = Tensor::empty(t.shape);
  const auto n = static_cast<size_t>(out.numel());
  TFM_CHECK(t.data.size() == n * ggml_type_size(t.type), "gguf_tensor_values", "tensor \"", t.name, "\" has ",
            t.data.size(), " bytes, shape ", shape_str(t.shape), " of ", ggml_type_name(t.type), " needs ",
            n * ggml_type_size(t.type));
  float* p = out.data();
  if (t.type == GgmlType::F32) {
    if (n > 0) std::memcpy(p, t.data.data(), n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, t.data.data() + 2 * i, sizeof h);
      p[i] = t.type == GgmlType::F16 ? from_f16(h) : from_bf16(h);
    }
  }
  return out;
}

uint32_t GgufFile::alignment() const {
  const GgufValue* a = find("general.alignment");
  return a ? static_cast<uint32_t>(a->unsigned_value()) : kGgufDefaultAlignment;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufValue& GgufFile::at(const std::string& key) const {
  if (const GgufValue* v = find(key)) return *v;
  throw IoError(detail::concat(source, ": no metadata key \"", key, "\""));
}

void GgufFile::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata.emplace_back(key, std::move(value));
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  if (const GgufTensor* t = find_tensor(name)) return *t;
  throw IoError(detail::concat(source, ": no tensor named \"", name, "\""));
}

std::string serialize_gguf(const GgufFile& file, const std::string& what) {
  std::vector<uint64_t> offsets;
  std::string out = layout(file, what, offsets);
  const uint64_t alignment = file.alignment();
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& data = file.tensors[i].data;
    out.append(reinterpret_cast<const char*>(data.data()), data.size());
    out.append(align_up(out.size(), alignment) - out.size(), '\0');
  }
  return out;
}

void save_gguf(const std::string& path, const GgufFile& file) {
  std::vector<uint64_t> offsets;
  const std::string head = layout(file, path, offsets);
  const uint64_t alignment = file.alignment();
  const std::vector<char> zeros(alignment, '\0');
  AtomicFile out(path);
  out.write(head.data(), head.size());
  for (const GgufTensor& t : file.tensors) {  // streamed: the tensors are not copied into one buffer
    out.write(t.data.data(), t.data.size());
    out.write(zeros.data(), align_up(t.data.size(), alignment) - t.data.size());
  }
  out.commit();
}

GgufFile parse_gguf(const uint8_t* data, size_t size, const std::string& what) {
  Input in(what, size,
           [data](void* dst, uint64_t offset, uint64_t n) { std::memcpy(dst, data + offset, n); });
  return read_gguf(in);
}

GgufFile load_gguf(const std::string& path) {
  const FilePtr f = open_regular_stream(path);  // refuses a FIFO or device without blocking
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0)
    throw IoError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
  std::FILE* fp = f.get();
  uint64_t cursor = 0;  // the stream's position: most reads follow the last one, and need no seek
  Input in(
      path, static_cast<uint64_t>(st.st_size), [fp, &path, &cursor](void* dst, uint64_t offset, uint64_t n) {
        if ((offset != cursor && std::fseek(fp, static_cast<long>(offset), SEEK_SET) != 0) ||
            std::fread(dst, 1, n, fp) != n)
          throw IoError(
              detail::concat(path, ": read failed at offset ", offset, " (file changed while reading?)"));
        cursor = offset + n;
      });
  return read_gguf(in);
}

}  // namespace tfm
