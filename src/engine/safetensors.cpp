#include "tfm/engine/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <tuple>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

// Tensor data is copied byte for byte: the format is little-endian, and so must the host be.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace tfm {

namespace {

using json = nlohmann::json;

constexpr int kMaxRank = 64;
// Bound on the element count (zeros left out) so byte counts and strides cannot overflow int64.
constexpr uint64_t kMaxElements = uint64_t{1} << 60;

// One tensor as described by the header, validated against the data section size.
struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<Entry> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
};

const char* type_name(const json& j) {
  return j.type_name();
}

// The files given where safetensors belong, by their magic numbers: what the file is and what to use.
void refuse_other_formats(const uint8_t* bytes, uint64_t file_size, const std::string& what) {
  const auto starts_with = [&](const char* magic, size_t n) {
    return file_size >= n && std::memcmp(bytes, magic, n) == 0;
  };
  if (starts_with("TFMCKPT\0", 8))
    throw IoError(what +
                  ": not a safetensors file but a tfm checkpoint (.ckpt); write its weights as one "
                  "with tfm export --run DIR --out FILE.safetensors, or continue the run with tfm "
                  "train --resume DIR");
  if (starts_with("GGUF", 4))
    throw IoError(what +
                  ": not a safetensors file but a GGUF file (llama.cpp's format, which tfm only "
                  "writes); export the run as safetensors with tfm export --run DIR --out "
                  "FILE.safetensors");
}

// The header length field, and checks that the header fits in the file.
uint64_t header_length(const uint8_t* bytes, uint64_t file_size, const std::string& what) {
  refuse_other_formats(bytes, file_size, what);
  if (file_size < 8)
    throw IoError(detail::concat(what, ": file is ", file_size,
                                 " bytes, expected at least 8 (the header length field)"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kSafetensorsMaxHeader)
    throw IoError(detail::concat(what, ": not a safetensors file? its first 8 bytes give a header length of ",
                                 n, ", which exceeds the limit of ", kSafetensorsMaxHeader, " bytes"));
  if (n > file_size - 8)
    throw IoError(detail::concat(what, ": header length ", n, " exceeds the ", file_size - 8,
                                 " bytes after the length field (truncated file?)"));
  return n;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& what) {
  if (!j.is_object())
    throw IoError(detail::concat(what, ": __metadata__ must be an object, got ", type_name(j)));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      throw IoError(detail::concat(what, ": __metadata__ value for key \"", key, "\" must be a string, got ",
                                   type_name(value)));
    out[key] = value.get<std::string>();
  }
  return out;
}

Entry parse_entry(const std::string& name, const json& j, uint64_t data_size, const std::string& what) {
  const std::string where = detail::concat(what, ": tensor \"", name, "\"");
  if (!j.is_object()) throw IoError(detail::concat(where, ": expected an object, got ", type_name(j)));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) throw IoError(detail::concat(where, ": missing \"", key, "\""));
  for (const auto& item : j.items())
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
      throw IoError(detail::concat(where, ": unknown field \"", item.key(),
                                   "\" (expected dtype, shape, data_offsets)"));

  const json& dtype = j["dtype"];
  if (!dtype.is_string())
    throw IoError(detail::concat(where, ": dtype must be a string, got ", type_name(dtype)));
  if (dtype.get_ref<const std::string&>() != "F32")
    throw IoError(detail::concat(what, ": unsupported dtype ", dtype.get_ref<const std::string&>(),
                                 " for tensor \"", name, "\" (only F32 is supported)"));

  Entry e;
  e.name = name;
  const json& shape = j["shape"];
  if (!shape.is_array())
    throw IoError(detail::concat(where, ": shape must be an array, got ", type_name(shape)));
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw IoError(
        detail::concat(where, ": shape has ", shape.size(), " dimensions, expected at most ", kMaxRank));
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (const json& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      throw IoError(detail::concat(where, ": shape has negative dimension ", d.get<int64_t>()));
    if (!d.is_number_unsigned())
      throw IoError(
          detail::concat(where, ": shape dimensions must be non-negative integers, got ", d.dump()));
    const uint64_t v = d.get<uint64_t>();
    if (v == 0) {
      has_zero = true;
    } else if (v > kMaxElements / nonzero_product) {
      throw IoError(
          detail::concat(where, ": shape ", shape.dump(), " has more than ", kMaxElements, " elements"));
    } else {
      nonzero_product *= v;
    }
    e.shape.push_back(static_cast<int64_t>(v));
  }

  const json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw IoError(detail::concat(
        where, ": data_offsets must be [begin, end] with non-negative integers, got ", offsets.dump()));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end)
    throw IoError(detail::concat(where, ": data_offsets [", e.begin, ", ", e.end, "] begin after end"));
  if (e.end > data_size)
    throw IoError(detail::concat(where, ": data_offsets [", e.begin, ", ", e.end,
                                 "] exceed the data section of ", data_size, " bytes"));
  const uint64_t expected = has_zero ? 0 : nonzero_product * sizeof(float);
  if (expected != e.end - e.begin)
    throw IoError(detail::concat(where, ": shape ", shape_str(e.shape), " needs ", expected,
                                 " bytes of F32, data_offsets [", e.begin, ", ", e.end, "] give ",
                                 e.end - e.begin));
  return e;
}

SafetensorsHeader parse_header(const char* text, size_t size, uint64_t data_size, const std::string& what) {
  const json root = parse_json_strict(text, size, what + ": header");
  if (!root.is_object())
    throw IoError(detail::concat(what, ": header must be a JSON object, got ", type_name(root)));
  SafetensorsHeader h;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__")
      h.metadata = parse_metadata(value, what);
    else
      h.entries.push_back(parse_entry(name, value, data_size, what));
  }
  // The tensors must tile the data section: sorted by offset, each starts where the last ended.
  std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin < cursor)
      throw IoError(detail::concat(what, ": tensor \"", e.name, "\" at data_offsets [", e.begin, ", ", e.end,
                                   "] overlaps tensor \"", previous->name, "\" at [", previous->begin, ", ",
                                   previous->end, "]"));
    if (e.begin > cursor)
      throw IoError(detail::concat(what, ": bytes [", cursor, ", ", e.begin,
                                   ") of the data section belong to no tensor (next is \"", e.name, "\")"));
    cursor = e.end;
    previous = &e;
  }
  if (cursor != data_size)
    throw IoError(detail::concat(what, ": data section has ", data_size, " bytes, tensors cover ", cursor,
                                 " (trailing bytes after the last tensor)"));
  return h;
}

}  // namespace

bool SafetensorsFile::contains(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw IoError(detail::concat(source, ": no tensor named \"", name, "\""));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order: __metadata__ first, then tensors as given, as the
  // reference writer lays them out.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::vector<Tensor> values;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TFM_CHECK(!name.empty() && name != "__metadata__", "save_safetensors", "invalid tensor name \"", name,
              "\"");
    TFM_CHECK(seen.insert(name).second, "save_safetensors", "duplicate tensor name \"", name, "\"");
    TFM_CHECK(t.defined(), "save_safetensors", "tensor \"", name, "\" is undefined");
    values.push_back(contiguous_values(t));
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not valid UTF-8
    throw IoError(detail::concat(path, ": cannot encode header: ", e.what()));
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const Tensor& v : values) file.write(v.data(), static_cast<size_t>(v.numel()) * sizeof(float));
  file.commit();
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  const uint64_t n = header_length(data, size, what);
  const uint8_t* data_section = data + 8 + n;
  SafetensorsHeader h = parse_header(reinterpret_cast<const char*>(data + 8), n, size - 8 - n, what);
  SafetensorsFile out;
  out.source = what;
  out.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {
    Tensor t = Tensor::empty(e.shape);
    if (e.end > e.begin) std::memcpy(t.data(), data_section + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  // Streams the file: the header is read and validated first, then each tensor straight into its
  // own storage, so a large file is never held twice in memory.
  const FilePtr f = open_regular_stream(path);  // refuses a FIFO or device without blocking
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0)
    throw IoError(detail::concat(path, ": cannot open: ", std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_exact = [&](void* dst, uint64_t bytes) {
    if (bytes > 0 && std::fread(dst, 1, bytes, f.get()) != bytes)
      throw IoError(detail::concat(path, ": read failed (file changed while reading?)"));
  };

  uint8_t length[8] = {};
  read_exact(length, std::min<uint64_t>(size, 8));
  const uint64_t n = header_length(length, size, path);
  std::string text(static_cast<size_t>(n), '\0');
  read_exact(text.data(), n);
  SafetensorsHeader h = parse_header(text.data(), text.size(), size - 8 - n, path);

  SafetensorsFile out;
  out.source = path;
  out.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {  // sorted and contiguous, so sequential reads suffice
    Tensor t = Tensor::empty(e.shape);
    read_exact(t.data(), e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tfm
