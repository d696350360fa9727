// GGUF (ggml's docs/gguf.md): the writer against the reader, the exact header bytes, every metadata
// value kind, alignment and tensor offsets, half and bfloat16 conversions, and malformed files that
// must be rejected with a message naming the file and what is wrong.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/engine/gemm.h"
#include "tfm/engine/gguf.h"

using namespace tfm;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// /tmp/tfm_test_gguf_<pid>_files/NAME, removed when the test binary exits.
std::string temp_path_gguf(const std::string& name) {
  return tfm_test::scratch_file("gguf", name);
}

GgufFile parse_gguf_bytes(const std::string& bytes) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.gguf");
}

template <class T>
T read_at(const std::string& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

template <class T>
void write_at(std::string& bytes, size_t offset, T v) {
  std::memcpy(bytes.data() + offset, &v, sizeof v);
}

// One value of every kind, arrays of scalars, of strings, empty and nested.
std::vector<std::pair<std::string, GgufValue>> every_kind() {
  return {
      {"kind.u8", GgufValue::u8(255)},
      {"kind.i8", GgufValue::i8(-128)},
      {"kind.u16", GgufValue::u16(65535)},
      {"kind.i16", GgufValue::i16(-32768)},
      {"kind.u32", GgufValue::u32(4294967295u)},
      {"kind.i32", GgufValue::i32(-2147483647 - 1)},
      {"kind.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"kind.i64", GgufValue::i64(std::numeric_limits<int64_t>::min())},
      {"kind.f32", GgufValue::f32(-1.5e-7f)},
      {"kind.f64", GgufValue::f64(3.141592653589793)},
      {"kind.bool_true", GgufValue::boolean(true)},
      {"kind.bool_false", GgufValue::boolean(false)},
      {"kind.string", GgufValue::string("ROMEO: \xc4\xa0 \xe2\x80\x94 with UTF-8")},
      {"kind.empty_string", GgufValue::string("")},
      {"kind.strings", GgufValue::strings({"a", "", "\xc4\x8a"})},
      {"kind.int32s", GgufValue::int32s({1, -2, 3})},
      {"kind.float32s", GgufValue::float32s({0.5f, -0.25f})},
      {"kind.empty_array", GgufValue::array(GgufType::UInt64, {})},
      {"kind.bools", GgufValue::array(GgufType::Bool, {GgufValue::boolean(true), GgufValue::boolean(false)})},
      {"kind.nested", GgufValue::array(GgufType::Array, {GgufValue::int32s({7}), GgufValue::int32s({8, 9})})},
  };
}

}  // namespace

TEST_CASE("gguf: every metadata value kind round-trips through the writer and the reader", "[gguf]") {
  GgufFile f;
  f.metadata = every_kind();
  const GgufFile back = parse_gguf_bytes(serialize_gguf(f));
  REQUIRE(back.source == "test.gguf");
  REQUIRE(back.version == 3);
  REQUIRE(back.metadata.size() == f.metadata.size());
  for (size_t i = 0; i < f.metadata.size(); ++i) {
    INFO(f.metadata[i].first);
    REQUIRE(back.metadata[i].first == f.metadata[i].first);  // file order kept
    REQUIRE(back.metadata[i].second == f.metadata[i].second);
  }
  REQUIRE(back.at("kind.nested").items()[1].items()[1].signed_value() == 9);
  REQUIRE(back.at("kind.f32").number() == static_cast<double>(-1.5e-7f));
  REQUIRE(back.alignment() == 32);  // the spec's default without general.alignment
  REQUIRE(back.tensors.empty());
  REQUIRE_THROWS_WITH(back.at("missing.key"), "test.gguf: no metadata key \"missing.key\"");
}

TEST_CASE("gguf: the header and a metadata pair are laid out byte for byte as the spec says", "[gguf]") {
  GgufFile f;
  f.metadata = {{"general.architecture", GgufValue::string("gpt2")}};
  f.tensors.push_back(gguf_tensor("w", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3})));
  const std::string b = serialize_gguf(f);
  REQUIRE(b.substr(0, 4) == "GGUF");
  REQUIRE(read_at<uint32_t>(b, 4) == 3);   // version
  REQUIRE(read_at<uint64_t>(b, 8) == 1);   // tensor_count
  REQUIRE(read_at<uint64_t>(b, 16) == 1);  // metadata_kv_count
  size_t p = 24;
  REQUIRE(read_at<uint64_t>(b, p) == 20);  // key length, then the key without NUL
  REQUIRE(b.substr(p + 8, 20) == "general.architecture");
  p += 28;
  REQUIRE(read_at<uint32_t>(b, p) == 8);  // GGUF_METADATA_VALUE_TYPE_STRING
  REQUIRE(read_at<uint64_t>(b, p + 4) == 4);
  REQUIRE(b.substr(p + 12, 4) == "gpt2");
  p += 16;
  // Tensor info: name, n_dims, dims innermost first (a (2, 3) row-major matrix is ne = [3, 2]), type, offset.
  REQUIRE(read_at<uint64_t>(b, p) == 1);
  REQUIRE(b[p + 8] == 'w');
  p += 9;
  REQUIRE(read_at<uint32_t>(b, p) == 2);
  REQUIRE(read_at<uint64_t>(b, p + 4) == 3);
  REQUIRE(read_at<uint64_t>(b, p + 12) == 2);
  REQUIRE(read_at<uint32_t>(b, p + 20) == 0);  // GGML_TYPE_F32
  REQUIRE(read_at<uint64_t>(b, p + 24) == 0);  // offset into the data section
  p += 32;
  // Padding with zeros to the next multiple of 32, then the data, then padding again.
  const size_t data = (p + 31) / 32 * 32;
  for (size_t i = p; i < data; ++i) REQUIRE(b[i] == '\0');
  REQUIRE(read_at<float>(b, data) == 1.0f);
  REQUIRE(read_at<float>(b, data + 20) == 6.0f);
  REQUIRE(b.size() == data + 32);
}

TEST_CASE("gguf: tensors start at multiples of the alignment, packed in order", "[gguf]") {
  Rng rng(3);
  for (uint32_t alignment : {32u, 8u, 64u, 4096u}) {
    INFO("alignment " << alignment);
    GgufFile f;
    if (alignment != 32) f.metadata.emplace_back("general.alignment", GgufValue::u32(alignment));
    const std::vector<Shape> shapes = {{3}, {5, 7}, {1}, {2, 3, 4, 5}, {33}};
    const std::vector<GgmlType> types = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::F32,
                                         GgmlType::F16};
    for (size_t i = 0; i < shapes.size(); ++i)
      f.tensors.push_back(gguf_tensor("t" + std::to_string(i), Tensor::randn(shapes[i], rng), types[i]));
    const std::string path = temp_path_gguf("aligned.gguf");
    save_gguf(path, f);
    REQUIRE(tfm_test::temporaries_beside(path).empty());
    const GgufFile back = load_gguf(path);
    REQUIRE(back.alignment() == alignment);
    REQUIRE(back.data_offset % alignment == 0);
    uint64_t expected = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const GgufTensor& t = back.tensors[i];
      REQUIRE(t.name == "t" + std::to_string(i));
      REQUIRE(t.shape == shapes[i]);
      REQUIRE(t.type == types[i]);
      REQUIRE(t.offset == expected);  // gguf.md's align_offset after the previous tensor: ggml's layout
      REQUIRE(t.data == f.tensors[i].data);
      const uint64_t bytes = f.tensors[i].data.size();
      expected += (bytes + alignment - 1) / alignment * alignment;
    }
    REQUIRE(std::filesystem::file_size(path) == back.data_offset + expected);
  }
}

TEST_CASE("gguf: float32 tensors round-trip exactly, F16 and BF16 round to nearest even", "[gguf]") {
  Rng rng(11);
  const Tensor x = Tensor::randn({4, 9}, rng, 0.0f, 3.0f);
  const std::vector<float> v = x.to_vector();
  REQUIRE(gguf_tensor_values(gguf_tensor("x", x)).to_vector() == v);
  const std::vector<float> h = gguf_tensor_values(gguf_tensor("x", x, GgmlType::F16)).to_vector();
  const std::vector<float> bf = gguf_tensor_values(gguf_tensor("x", x, GgmlType::BF16)).to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    REQUIRE(h[i] == from_f16(to_f16(v[i])));
    REQUIRE(std::abs(h[i] - v[i]) <= std::abs(v[i]) * 0x1p-11f + 0x1p-25f);  // half: 11 significant bits
    REQUIRE(bf[i] == from_bf16(to_bf16(v[i])));
    REQUIRE(std::abs(bf[i] - v[i]) <= std::abs(v[i]) * 0x1p-8f);  // bfloat16: 8 significant bits
  }
}

TEST_CASE("gguf: half conversion is exact on every half and rounds ties to even", "[gguf]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float x = from_f16(h);
    if (std::isnan(x)) {
      REQUIRE(std::isnan(from_f16(to_f16(x))));
      continue;
    }
    INFO("half 0x" << std::hex << bits);
    REQUIRE(to_f16(x) == h);
  }
  REQUIRE(to_f16(1.0f) == 0x3c00);
  REQUIRE(to_f16(65504.0f) == 0x7bff);  // the largest half
  REQUIRE(to_f16(65519.0f) == 0x7bff);  // below the midpoint to 65536
  REQUIRE(to_f16(65520.0f) == 0x7c00);  // the midpoint rounds to even: infinity
  REQUIRE(to_f16(-1e10f) == 0xfc00);
  REQUIRE(to_f16(0x1p-24f) == 0x0001);           // the smallest subnormal
  REQUIRE(to_f16(0x1p-25f) == 0x0000);           // halfway to it: even is zero
  REQUIRE(to_f16(0x1.8p-24f) == 0x0002);         // 1.5 ulp: to even, 2
  REQUIRE(to_f16(1.0f + 0x1p-11f) == 0x3c00);    // halfway between 1 and 1 + 2^-10: even
  REQUIRE(to_f16(1.0f + 0x1.8p-10f) == 0x3c02);  // 1.5 ulp above 1: to even
  REQUIRE(to_f16(0x1.ffcp-15f) == 0x0400);       // rounds up from the subnormals into the first normal
  REQUIRE(std::isnan(from_f16(to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("gguf: the writer refuses what the spec forbids", "[gguf]") {
  auto refuses = [](GgufFile f, const std::string& what) {
    REQUIRE_THROWS_WITH(serialize_gguf(f, "out.gguf"), StartsWith("out.gguf: ") && Contains(what));
  };
  GgufFile f;
  f.metadata = {{"General.Name", GgufValue::string("x")}};
  refuses(f, "lower_snake_case");
  f.metadata = {{"a..b", GgufValue::u8(1)}};
  refuses(f, "lower_snake_case");
  f.metadata = {{"a.b", GgufValue::u8(1)}, {"a.b", GgufValue::u8(2)}};
  refuses(f, "duplicate metadata key \"a.b\"");
  f.metadata = {{"general.alignment", GgufValue::u64(32)}};
  refuses(f, "general.alignment is a uint64, expected a uint32");
  f.metadata = {{"general.alignment", GgufValue::u32(48)}};
  refuses(f, "general.alignment is 48, expected a power of two >= 8");
  f.metadata.clear();
  f.tensors = {gguf_tensor(std::string(64, 'n'), Tensor::zeros({1}))};
  refuses(f, "must have 1 to 63 bytes");
  f.tensors = {gguf_tensor("a", Tensor::zeros({1})), gguf_tensor("a", Tensor::zeros({1}))};
  refuses(f, "duplicate tensor name \"a\"");
  f.tensors = {gguf_tensor("a", Tensor::zeros({1, 1, 1, 1, 1}))};
  refuses(f, "rank 5 is outside [1, 4]");
  f.tensors = {gguf_tensor("a", Tensor::zeros({2, 2}))};
  f.tensors[0].data.pop_back();
  refuses(f, "tensor \"a\": 15 bytes of data, shape [2, 2] of F32 needs 16");
  REQUIRE_THROWS_WITH(GgufValue::array(GgufType::Int32, {GgufValue::u8(1)}),
                      "GgufValue::array: item 0 is uint8, the array holds int32");
}

TEST_CASE("gguf: truncated files are rejected at every length with the file and the missing item named",
          "[gguf]") {
  GgufFile f;
  f.metadata = every_kind();
  f.tensors.push_back(gguf_tensor("blk.0.attn_qkv.weight", Tensor::ones({3, 5}), GgmlType::F16));
  f.tensors.push_back(gguf_tensor("output_norm.weight", Tensor::ones({5})));
  const std::string full = serialize_gguf(f);
  REQUIRE_NOTHROW(parse_gguf_bytes(full));
  // Every proper prefix that cuts into the data (the last tensor's padding is not data).
  const size_t needed = full.size() - (32 - 5 * 4);
  for (size_t n = 0; n < needed; ++n) {
    INFO("prefix of " << n << " bytes");
    REQUIRE_THROWS_AS(parse_gguf_bytes(full.substr(0, n)), IoError);
    REQUIRE_THROWS_WITH(parse_gguf_bytes(full.substr(0, n)), StartsWith("test.gguf: "));
  }
  REQUIRE_THROWS_WITH(parse_gguf_bytes(full.substr(0, 30)),
                      "test.gguf: header claims 20 metadata pairs, more than the 6 bytes "
                      "after the header can hold");
  REQUIRE_THROWS_WITH(parse_gguf_bytes(full.substr(0, 300)),
                      "test.gguf: truncated: metadata key 11 of 15 bytes at offset 299 "
                      "runs past the end of the file at 300");
  REQUIRE_THROWS_WITH(
      parse_gguf_bytes(full.substr(0, needed - 1)),
      Contains("truncated: tensor \"output_norm.weight\" needs bytes [32, 52) of the data section"));
}

TEST_CASE("gguf: corrupt headers, metadata and tensor infos are rejected with what is wrong", "[gguf]") {
  GgufFile f;
  f.metadata = {{"general.architecture", GgufValue::string("gpt2")}, {"flag", GgufValue::boolean(true)}};
  f.tensors.push_back(gguf_tensor("a", Tensor::ones({2, 3})));
  f.tensors.push_back(gguf_tensor("b", Tensor::ones({4})));
  const std::string good = serialize_gguf(f);
  REQUIRE_NOTHROW(parse_gguf_bytes(good));
  // Offsets of the fields below, found by walking the layout.
  const size_t key0 = 24, value0_type = key0 + 8 + 20, key1 = value0_type + 4 + 8 + 4;
  const size_t flag_value = key1 + 8 + 4 + 4;
  const size_t info_a = flag_value + 1, info_a_type = info_a + 8 + 1 + 4 + 16,
               info_a_offset = info_a_type + 4;
  const size_t info_b = info_a_offset + 8, info_b_offset = info_b + 8 + 1 + 4 + 8 + 4;
  REQUIRE(good.substr(key1 + 8, 4) == "flag");
  REQUIRE(read_at<uint64_t>(good, info_b_offset) == 32);

  auto corrupt = [&](auto edit, const std::string& message) {
    std::string b = good;
    edit(b);
    INFO(message);
    REQUIRE_THROWS_AS(parse_gguf_bytes(b), IoError);
    REQUIRE_THROWS_WITH(parse_gguf_bytes(b), StartsWith("test.gguf: ") && Contains(message));
  };
  corrupt([](std::string& b) { b[0] = 'X'; }, "not a GGUF file");
  corrupt([](std::string& b) { write_at<uint32_t>(b, 4, 1); }, "GGUF version 1, expected 3");
  corrupt([](std::string& b) { write_at<uint32_t>(b, 4, 0x03000000u); }, "big-endian");
  corrupt([](std::string& b) { write_at<uint64_t>(b, 16, uint64_t{1} << 40); }, "metadata pairs, more than");
  corrupt([](std::string& b) { write_at<uint64_t>(b, 8, uint64_t{1} << 40); }, "tensors, more than");
  corrupt([&](std::string& b) { write_at<uint64_t>(b, key0, uint64_t{1} << 20); },
          "metadata key 0 is 1048576 bytes long, more than the limit of 65535");
  corrupt([&](std::string& b) { write_at<uint64_t>(b, key0, 1000); }, "runs past the end of the file");
  corrupt([&](std::string& b) { write_at<uint32_t>(b, value0_type, 13); },
          "metadata \"general.architecture\" has type 13, not a GGUF value type");
  corrupt([&](std::string& b) { b[flag_value] = 2; }, "metadata \"flag\" is a bool of byte value 2");
  corrupt([&](std::string& b) { write_at<uint32_t>(b, info_a + 9, 5); },
          "tensor \"a\" has rank 5, expected 1 to 4");
  corrupt([&](std::string& b) { write_at<uint64_t>(b, info_a + 13, 0); }, "tensor \"a\" dimension 0 is 0");
  corrupt([&](std::string& b) { write_at<uint32_t>(b, info_a_type, 12); },
          "tensor \"a\" has ggml type 12 (Q4_K); tfm reads F32, F16 and BF16 tensors only");
  corrupt([&](std::string& b) { write_at<uint64_t>(b, info_a_offset, 4); },
          "tensor \"a\" has offset 4, not a multiple of the alignment 32");
  corrupt([&](std::string& b) { write_at<uint64_t>(b, info_b_offset, 0); },
          "tensor \"b\" at data offset 0 overlaps tensor \"a\", which ends at 24");
  corrupt([&](std::string& b) { b[info_b + 8] = 'a'; }, "duplicate tensor name \"a\"");
}

TEST_CASE("gguf: duplicate keys, arrays larger than the file and deep nesting are refused before allocating",
          "[gguf]") {
  GgufFile f;
  f.metadata = {{"a.b", GgufValue::u8(1)}, {"a.c", GgufValue::u8(2)}};
  std::string b = serialize_gguf(f);
  b[24 + 8 + 3 + 4 + 1 + 8 + 2] = 'b';  // the second key becomes "a.b" too
  REQUIRE_THROWS_WITH(parse_gguf_bytes(b), "test.gguf: duplicate metadata key \"a.b\"");

  GgufFile g;
  g.metadata = {{"tokens", GgufValue::strings({"x"})}};
  std::string big = serialize_gguf(g);
  write_at<uint64_t>(big, 24 + 8 + 6 + 4 + 4, uint64_t{1} << 62);  // the array's length
  REQUIRE_THROWS_WITH(parse_gguf_bytes(big),
                      Contains("metadata \"tokens\" claims 4611686018427387904 elements of string, "
                               "more than the"));

  GgufValue v = GgufValue::u8(1);
  for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) v = GgufValue::array(v.type(), {v});
  GgufFile deep;
  deep.metadata = {{"deep", v}};
  REQUIRE_THROWS_WITH(serialize_gguf(deep, "out.gguf"), Contains("arrays nested deeper than 8 levels"));
}

TEST_CASE("gguf: load_gguf names the path, and a missing file is an IoError", "[gguf]") {
  REQUIRE_THROWS_WITH(load_gguf("/nonexistent/x.gguf"), StartsWith("/nonexistent/x.gguf: cannot open"));
  const std::string path = temp_path_gguf("short.gguf");
  std::ofstream(path, std::ios::binary) << "GGUF";
  REQUIRE_THROWS_WITH(load_gguf(path),
                      path + ": truncated: the version needs 4 bytes at offset 4, the file ends at 4");
}

TEST_CASE("gguf: a file written by another writer (Python struct, from the spec) reads as written",
          "[gguf]") {
  // tests/fuzz/corpus/gguf/every_kind.gguf: general.architecture, general.alignment, one pair of each
  // scalar kind but uint32, an array of strings, nested int32 arrays; tensors a (2, 3) F32, b (4) F16,
  // c (2) BF16 at offsets 0, 32, 64.
  const GgufFile f = load_gguf(std::string(TFM_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/every_kind.gguf");
  REQUIRE(f.metadata.size() == 14);
  CHECK(f.at("general.architecture").str() == "gpt2");
  CHECK(f.at("k.i8").signed_value() == -7);
  CHECK(f.at("k.u16").unsigned_value() == 65535);
  CHECK(f.at("k.u64").unsigned_value() == uint64_t{1} << 63);
  CHECK(f.at("k.i64").signed_value() == -(int64_t{1} << 62));
  CHECK(f.at("k.f64").number() == 1e-300);
  CHECK(f.at("k.bool").boolean_value());
  CHECK(f.at("k.strings").items()[1].str() ==
        "\xc4\xa0"
        "b");
  CHECK(f.at("k.nested").element_type() == GgufType::Array);
  CHECK(f.at("k.nested").items()[1].items().empty());
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensor("a").shape == Shape{2, 3});
  CHECK(gguf_tensor_values(f.tensor("a")).to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(gguf_tensor_values(f.tensor("b")).to_vector() == std::vector<float>{1, -2, 0.5f, 65504});
  CHECK(gguf_tensor_values(f.tensor("c")).to_vector() == std::vector<float>{1, -2});
  CHECK(f.tensor("c").offset == 64);
}
