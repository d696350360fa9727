// safetensors: round trips, the exact byte layout, and a catalogue of malformed files that must be
// rejected with a message naming the file and the problem.

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "tfm/engine/safetensors.h"

using namespace tfm;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// /tmp/tfm_test_st_<pid>_files/NAME, removed when the test binary exits.
std::string temp_path_safetensors(const std::string& name) {
  return tfm_test::scratch_file("st", name);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes_safetensors(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header text and a data section, with the header length field filled in.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

std::string length_field(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

// "1,1,...,1" with n ones: a shape of rank n and one element.
std::string ones(int n) {
  std::string out = "1";
  for (int i = 1; i < n; ++i) out += ",1";
  return out;
}

SafetensorsFile parse_safetensors_bytes(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.safetensors");
}

void require_same(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.to_vector() == b.to_vector());
}

}  // namespace

TEST_CASE("safetensors: round trip keeps names, order, shapes, values and metadata", "[safetensors]") {
  Rng rng(7);
  const NamedTensors tensors = {
      {"emb.weight", Tensor::randn({5, 3}, rng)},
      {"scalar", Tensor::from_vector({3.5f}, {})},  // 0-d
      {"empty", Tensor::empty({0})},
      {"empty2d", Tensor::empty({4, 0})},
      {"blocks.0.ln1.bias", Tensor::randn({7}, rng)},
      {"cube", Tensor::randn({2, 3, 4}, rng)},
  };
  const std::map<std::string, std::string> metadata = {{"config", "{\"d_model\": 3}"}, {"format", "pt"}};
  const std::string path = temp_path_safetensors("round_trip.safetensors");
  save_safetensors(path, tensors, metadata);
  REQUIRE(tfm_test::temporaries_beside(path).empty());

  const SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.source == path);
  REQUIRE(f.metadata == metadata);
  REQUIRE(f.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    REQUIRE(f.tensors[i].first == tensors[i].first);
    require_same(f.tensors[i].second, tensors[i].second);
  }
  REQUIRE(f.at("scalar").dim() == 0);
  REQUIRE(f.at("scalar").item() == 3.5f);
  REQUIRE(f.contains("cube"));
  REQUIRE_FALSE(f.contains("nope"));
  REQUIRE_THROWS_WITH(f.at("nope"), StartsWith(path) && Contains("no tensor named \"nope\""));

  // The buffer parser sees the same thing.
  const SafetensorsFile g = parse_safetensors_bytes(read_bytes(path));
  REQUIRE(g.tensors.size() == tensors.size());
  require_same(g.at("cube"), tensors[5].second);
}

TEST_CASE("safetensors: byte layout matches the format", "[safetensors]") {
  const std::string path = temp_path_safetensors("layout.safetensors");
  save_safetensors(path,
                   {{"b", Tensor::from_vector({1.0f, -2.0f}, {2})}, {"a", Tensor::from_vector({0.5f}, {1})}},
                   {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  REQUIRE(n % 8 == 0);  // padded so the data section is 8-byte aligned
  REQUIRE(bytes.size() == 8 + n + 12);
  const std::string header = bytes.substr(8, n);
  const std::string expected =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  REQUIRE(header.substr(0, expected.size()) == expected);
  REQUIRE(header.find_first_not_of(' ', expected.size()) == std::string::npos);
  float values[3];
  std::memcpy(values, bytes.data() + 8 + n, sizeof values);
  REQUIRE(values[0] == 1.0f);
  REQUIRE(values[1] == -2.0f);
  REQUIRE(values[2] == 0.5f);
}

TEST_CASE("safetensors: non-contiguous views are saved by value", "[safetensors]") {
  Rng rng(3);
  Tensor base = Tensor::randn({3, 4}, rng);
  // A transposed view: same storage, permuted strides.
  Tensor view = Tensor::view_of(base.storage(), {4, 3}, 0);
  view.impl()->strides = {1, 4};
  const std::string path = temp_path_safetensors("view.safetensors");
  save_safetensors(path, {{"t", view}});
  const SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.at("t").to_vector() == view.to_vector());
}

TEST_CASE("safetensors: an empty file list and no metadata", "[safetensors]") {
  const std::string path = temp_path_safetensors("nothing.safetensors");
  save_safetensors(path, {});
  const SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.empty());
  REQUIRE(f.metadata.empty());
}

TEST_CASE("safetensors: invalid arguments to save are refused and leave no file", "[safetensors]") {
  const std::string path = temp_path_safetensors("bad_save.safetensors");
  const Tensor t = Tensor::zeros({2});
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"a", t}, {"a", t}}), Contains("duplicate tensor name \"a\""));
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"__metadata__", t}}), Contains("invalid tensor name"));
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"", t}}), Contains("invalid tensor name"));
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"x", Tensor()}}), Contains("undefined"));
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"bad\xff", t}}),
                      StartsWith(path) && Contains("cannot encode"));
  REQUIRE_FALSE(std::filesystem::exists(path));
  REQUIRE(tfm_test::temporaries_beside(path).empty());
  REQUIRE_THROWS_WITH(save_safetensors("/nonexistent-dir/x.safetensors", {{"a", t}}),
                      StartsWith("/nonexistent-dir/x.safetensors: cannot create"));
}

TEST_CASE("safetensors: malformed files are rejected with a clear message", "[safetensors]") {
  const std::string f4(4, '\0'), f8(8, '\0');  // data sections of one and two floats
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    const char* name;
    std::string bytes;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"empty file", "", "file is 0 bytes, expected at least 8"},
      {"length field cut", std::string(5, '\0'), "file is 5 bytes, expected at least 8"},
      {"header length over the limit", length_field(100'000'001) + "{}", "exceeds the limit of 100000000"},
      {"header length past the end", length_field(64) + "{}", "header length 64 exceeds the 2 bytes"},
      {"huge header length", length_field(~uint64_t{0}) + "{}", "exceeds the limit"},
      {"empty header", make_file(""), "invalid JSON"},
      {"bad JSON", make_file("{\"w\": {"), "invalid JSON"},
      {"trailing garbage", make_file("{} x"), "invalid JSON"},
      {"not an object", make_file("[1, 2]"), "header must be a JSON object, got array"},
      {"invalid UTF-8 in JSON", make_file("{\"\xff\": 1}"), "invalid JSON"},
      {"deep nesting", make_file(std::string(10000, '[') + std::string(10000, ']')), "nested deeper than 64"},
      {"duplicate tensor", make_file("{" + ok_entry + "," + ok_entry + "}", f8), "duplicate JSON key \"w\""},
      {"entry not an object", make_file(R"({"w": 3})"), "tensor \"w\": expected an object, got number"},
      {"missing dtype", make_file(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", f8), "missing \"dtype\""},
      {"missing shape", make_file(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", f8), "missing \"shape\""},
      {"missing offsets", make_file(R"({"w":{"dtype":"F32","shape":[2]}})", f8), "missing \"data_offsets\""},
      {"unknown field", make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f8),
       "unknown field \"x\""},
      {"dtype not a string", make_file(R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", f8),
       "dtype must be a string, got number"},
      {"wrong dtype", make_file(R"({"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", f8),
       "unsupported dtype F16 for tensor \"w\""},
      {"shape not an array", make_file(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", f8),
       "shape must be an array, got number"},
      {"negative dim", make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f8),
       "negative dimension -2"},
      {"fractional dim", make_file(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f8),
       "non-negative integers, got 2.0"},
      {"too many dims",
       make_file(R"({"w":{"dtype":"F32","shape":[)" + ones(65) + R"(],"data_offsets":[0,4]}})", f4),
       "shape has 65 dimensions, expected at most 64"},
      {"shape product overflows",
       make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", f8),
       "has more than"},
      {"zero dim with huge dims",
       make_file(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "has more than"},
      {"shape/offset mismatch", make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8),
       "shape [3] needs 12 bytes of F32, data_offsets [0, 8] give 8"},
      {"offsets not a pair", make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f8),
       "data_offsets must be [begin, end]"},
      {"negative offset", make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", f8),
       "data_offsets must be [begin, end]"},
      {"offsets reversed", make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f8),
       "begin after end"},
      {"offsets out of range", make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f8),
       "data_offsets [0, 16] exceed the data section of 8 bytes"},
      {"huge offsets",
       make_file(
           R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}})",
           f8),
       "exceed the data section"},
      {"overlapping",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 f8),
       "tensor \"b\" at data_offsets [4, 8] overlaps tensor \"a\" at [0, 8]"},
      {"gap", make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f8),
       "bytes [0, 4) of the data section belong to no tensor"},
      {"trailing data", make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f8),
       "data section has 8 bytes, tensors cover 4"},
      {"metadata not an object", make_file(R"({"__metadata__":[1]})"), "__metadata__ must be an object"},
      {"metadata value not a string", make_file(R"({"__metadata__":{"k":1}})"),
       "__metadata__ value for key \"k\" must be a string, got number"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    REQUIRE_THROWS_AS(parse_safetensors_bytes(c.bytes), IoError);
    REQUIRE_THROWS_WITH(parse_safetensors_bytes(c.bytes),
                        StartsWith("test.safetensors: ") && Contains(c.fragment));
  }
}

TEST_CASE("safetensors: a file truncated anywhere is rejected, never crashes", "[safetensors]") {
  Rng rng(11);
  const std::string path = temp_path_safetensors("full.safetensors");
  save_safetensors(path, {{"a", Tensor::randn({4, 4}, rng)}, {"b", Tensor::randn({3}, rng)}},
                   {{"step", "10"}});
  const std::string bytes = read_bytes(path);
  const std::string cut_path = temp_path_safetensors("cut.safetensors");
  // Every cut point: inside the length field, the header, and the data section.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    INFO("cut at " << cut << " of " << bytes.size());
    write_bytes_safetensors(cut_path, bytes.substr(0, cut));
    REQUIRE_THROWS_WITH(load_safetensors(cut_path), StartsWith(cut_path + ": "));
  }
  REQUIRE_THROWS_WITH(load_safetensors(temp_path_safetensors("missing.safetensors")),
                      Contains("cannot open"));
  REQUIRE_THROWS_WITH(load_safetensors(std::filesystem::temp_directory_path().string()),
                      Contains("is a directory; expected a regular file"));
}

TEST_CASE("safetensors: files with foreign but valid layouts load", "[safetensors]") {
  // Unpadded header, tensors listed out of data order, no metadata: all allowed by the format.
  std::string data(12, '\0');
  const float v[3] = {1.0f, 2.0f, 3.0f};
  std::memcpy(data.data(), v, sizeof v);
  const SafetensorsFile f = parse_safetensors_bytes(make_file(
      R"({"second":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"first":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})",
      data));
  REQUIRE(f.tensors.size() == 2);
  REQUIRE(f.tensors[0].first == "first");  // data order
  REQUIRE(f.at("first").to_vector() == std::vector<float>{1.0f, 2.0f});
  REQUIRE(f.at("second").to_vector() == std::vector<float>{3.0f});
}
