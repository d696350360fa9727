#include "tfm/training/checkpoint.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints are written little-endian");

constexpr char kCheckpointMagic[8] = {'T', 'F', 'M', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeaderBytes = 32;
constexpr uint32_t kMaxNameBytes = 64;

template <class V>
void put(std::string& out, V v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// One payload section, by reference.
struct Section {
  std::string name;
  const void* data;
  size_t size;
  // The bytes before the data: u32 name length, name, u64 data length.
  std::string prefix() const {
    std::string out;
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<uint64_t>(out, size);
    return out;
  }
};

// The fixed header: magic, format version, section count, payload size, CRC-32 of the payload.
struct Header {
  uint32_t sections;
  uint64_t payload_size;
  uint32_t crc;
};

// The header's fields, checked against the file's size (`size`, header included): one check for both
// readers, the whole checkpoint and its state alone. `header` holds the first min(size, kHeaderBytes)
// bytes.
Header read_header(const char* header, uint64_t size, const std::string& path) {
  if (size < kHeaderBytes)
    throw IoError(path + ": not a tfm checkpoint (" + std::to_string(size) + " bytes, shorter than the " +
                  std::to_string(kHeaderBytes) + "-byte header)");
  if (std::memcmp(header, kCheckpointMagic, sizeof kCheckpointMagic) != 0)
    throw IoError(path + ": not a tfm checkpoint (wrong magic number)");
  uint32_t version;
  Header h{};
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&h.sections, header + 12, 4);
  std::memcpy(&h.payload_size, header + 16, 8);
  std::memcpy(&h.crc, header + 24, 4);
  if (version != kCheckpointVersion)
    throw IoError(path + ": checkpoint format version " + std::to_string(version) +
                  ", this tfm reads version " + std::to_string(kCheckpointVersion) +
                  (version > kCheckpointVersion ? " (written by a newer tfm)" : ""));
  if (h.sections < 4 || h.sections > kMaxSections)
    throw IoError(path + ": corrupt checkpoint: " + std::to_string(h.sections) + " sections, expected 4 to " +
                  std::to_string(kMaxSections));
  if (h.payload_size != size - kHeaderBytes)
    throw IoError(path + ": truncated or corrupt checkpoint: the header promises " +
                  std::to_string(h.payload_size) + " payload bytes, the file has " +
                  std::to_string(size - kHeaderBytes));
  return h;
}

// Reads sections from the verified payload.
class Reader {
 public:
  Reader(const std::string& path, const char* p, size_t n) : path_(path), p_(p), n_(n) {}
  bool done() const { return pos_ == n_; }
  template <class V>
  V get(const char* what) {
    need(sizeof(V), what);
    V v;
    std::memcpy(&v, p_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string bytes(size_t len, const char* what) {
    need(len, what);
    std::string s(p_ + pos_, len);
    pos_ += len;
    return s;
  }

 private:
  void need(size_t len, const char* what) {
    if (len > n_ - pos_)
      throw IoError(path_ + ": corrupt checkpoint: " + what + " needs " + std::to_string(len) +
                    " bytes at payload offset " + std::to_string(pos_) + ", only " +
                    std::to_string(n_ - pos_) + " remain");
  }
  const std::string& path_;
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

std::vector<float> to_floats(const std::string& path, const std::string& name, const std::string& bytes) {
  if (bytes.size() % sizeof(float) != 0)
    throw IoError(path + ": corrupt checkpoint: section " + name + " has " + std::to_string(bytes.size()) +
                  " bytes, not a whole number of float32 values");
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

nlohmann::json to_json(const std::string& path, const std::string& name, const std::string& bytes) {
  try {
    return nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path + ": corrupt checkpoint: section " + name + " is not valid JSON (" + e.what() + ")");
  }
}

// ---- the state section ----

using nlohmann::json;

// The state's fields, each checked as it is read: IoError "PATH: corrupt checkpoint: the state's
// "FIELD" is VALUE, expected WHAT", or "... the state has no "FIELD"".
class StateFields {
 public:
  explicit StateFields(const std::string& path) : path_(path) {}

  // object[key], named `field` ("optimizer.steps"); `object` is known to be an object.
  const json& at(const json& object, const char* key, const std::string& field) const {
    const auto it = object.find(key);
    if (it == object.end()) throw IoError(path_ + ": corrupt checkpoint: the state has no \"" + field + "\"");
    return *it;
  }
  [[noreturn]] void wrong(const std::string& field, const json& v, const std::string& expected) const {
    throw IoError(path_ + ": corrupt checkpoint: the state's \"" + field + "\" is " + json_excerpt(v) +
                  ", expected " + expected);
  }
  const json& object(const json& v, const std::string& field) const {
    if (!v.is_object()) wrong(field, v, "an object");
    return v;
  }
  // A JSON integer from `lo` that fits int64_t: 1e30 is a float (its conversion would overflow), and
  // an unsigned integer past INT64_MAX would wrap.
  int64_t integer(const json& v, const std::string& field, int64_t lo) const {
    constexpr int64_t hi = std::numeric_limits<int64_t>::max();
    const bool fits = v.is_number_integer() &&
                      (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) : true) &&
                      v.get<int64_t>() >= lo;
    if (!fits) wrong(field, v, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v.get<int64_t>();
  }
  double number(const json& v, const std::string& field, const char* expected) const {
    if (!v.is_number() || !std::isfinite(v.get<double>())) wrong(field, v, expected);
    return v.get<double>();
  }
  Rng::State words(const json& v, const std::string& field) const {
    Rng::State w{};
    const char* expected = "an array of 5 unsigned 64-bit integers (a random stream's state)";
    if (!v.is_array() || v.size() != w.size()) wrong(field, v, expected);
    for (size_t i = 0; i < w.size(); ++i) {
      if (!v[i].is_number_unsigned()) wrong(field, v[i], expected);
      w[i] = v[i].get<uint64_t>();
    }
    return w;
  }
  RankStreams streams(const json& v, const std::string& field) const {
    object(v, field);
    return {words(at(v, "sampler", field + ".sampler"), field + ".sampler"),
            words(at(v, "dropout", field + ".dropout"), field + ".dropout")};
  }

 private:
  const std::string& path_;
};

CheckpointState read_state(const std::string& path, const json& j) {
  if (!j.is_object()) throw IoError(path + ": corrupt checkpoint: the state section is not an object");
  const StateFields f(path);
  CheckpointState s;
  s.step = f.integer(f.at(j, "step", "step"), "step", 0);
  const json& best = f.at(j, "best_val_loss", "best_val_loss");
  if (!best.is_null())
    s.best_val_loss = f.number(best, "best_val_loss", "a number, or null before the first evaluation");
  s.elapsed_s = f.number(f.at(j, "elapsed_s", "elapsed_s"), "elapsed_s", "a number of seconds >= 0");
  if (s.elapsed_s < 0) f.wrong("elapsed_s", j["elapsed_s"], "a number of seconds >= 0");
  s.training_s = s.elapsed_s;  // a checkpoint from before the loop's own clock was kept
  if (j.contains("training_s")) {
    s.training_s = f.number(j["training_s"], "training_s", "a number of seconds >= 0");
    if (s.training_s < 0) f.wrong("training_s", j["training_s"], "a number of seconds >= 0");
  }
  const json& optimizer = f.object(f.at(j, "optimizer", "optimizer"), "optimizer");
  const json& name = f.at(optimizer, "name", "optimizer.name");
  if (!name.is_string()) f.wrong("optimizer.name", name, "a string (the optimizer's name)");
  s.optimizer = name.get<std::string>();
  s.optimizer_steps = f.integer(f.at(optimizer, "steps", "optimizer.steps"), "optimizer.steps", 0);
  // Every rank's streams under rng.ranks when the run had more than one (rank 0's also at the top).
  const json& rng = f.object(f.at(j, "rng", "rng"), "rng");
  s.streams = {f.streams(rng, "rng")};
  const int64_t ranks = j.contains("ranks") ? f.integer(j["ranks"], "ranks", 1) : 1;
  if (ranks > 1) {
    const json& all = f.at(rng, "ranks", "rng.ranks");
    if (!all.is_array() || static_cast<int64_t>(all.size()) != ranks)
      f.wrong("rng.ranks", all, "an array of " + std::to_string(ranks) + " ranks' streams (\"ranks\")");
    s.streams.clear();
    for (size_t r = 0; r < all.size(); ++r)
      s.streams.push_back(f.streams(all[r], "rng.ranks[" + std::to_string(r) + "]"));
  }
  if (j.contains("stopped")) {
    const json& stopped = j["stopped"];
    if (stopped != "target_loss" && stopped != "max_seconds")
      f.wrong("stopped", stopped, "\"target_loss\" or \"max_seconds\"");
    s.stopped = stopped.get<std::string>();
  }
  if (j.contains("ema_in_model")) {
    if (!j["ema_in_model"].is_boolean()) f.wrong("ema_in_model", j["ema_in_model"], "true or false");
    s.ema_in_model = j["ema_in_model"].get<bool>();
  }
  if (j.contains("unlogged")) {
    const json& u = f.object(j["unlogged"], "unlogged");
    s.unlogged.steps = f.integer(f.at(u, "steps", "unlogged.steps"), "unlogged.steps", 0);
    s.unlogged.loss = f.number(f.at(u, "loss", "unlogged.loss"), "unlogged.loss", "a finite number");
    s.unlogged.grad_norm =
        f.number(f.at(u, "grad_norm", "unlogged.grad_norm"), "unlogged.grad_norm", "a finite number");
    s.unlogged.auxiliary =
        f.number(f.at(u, "auxiliary", "unlogged.auxiliary"), "unlogged.auxiliary", "a finite number");
  }
  if (j.contains("data_hash")) {  // written since runs kept it
    const json& h = j["data_hash"];
    const char* expected = "16 hexadecimal digits (the data's hash)";
    if (!h.is_string() || h.get<std::string>().size() != 16 ||
        h.get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
      f.wrong("data_hash", h, expected);
    s.data_hash = h.get<std::string>();
  }
  return s;
}

json state_json(const CheckpointState& s) {
  const auto words = [](const Rng::State& w) { return json(std::vector<uint64_t>(w.begin(), w.end())); };
  const auto streams = [&](const RankStreams& r) {
    return json{{"sampler", words(r.sampler)}, {"dropout", words(r.dropout)}};
  };
  json rng = streams(s.streams.at(0));
  json j = {{"step", s.step},
            {"best_val_loss", s.evaluated() ? json(s.best_val_loss) : json(nullptr)},
            {"elapsed_s", s.elapsed_s},
            {"training_s", s.training_s},
            {"optimizer", {{"name", s.optimizer}, {"steps", s.optimizer_steps}}}};
  if (s.ranks() > 1) {
    json all = json::array();
    for (const RankStreams& r : s.streams) all.push_back(streams(r));
    rng["ranks"] = std::move(all);
    j["ranks"] = s.ranks();
  }
  j["rng"] = std::move(rng);
  if (!s.stopped.empty()) j["stopped"] = s.stopped;
  if (s.ema_in_model) j["ema_in_model"] = true;
  if (!s.data_hash.empty()) j["data_hash"] = s.data_hash;
  if (s.unlogged.steps > 0)
    j["unlogged"] = {{"steps", s.unlogged.steps},
                     {"loss", s.unlogged.loss},
                     {"grad_norm", s.unlogged.grad_norm},
                     {"auxiliary", s.unlogged.auxiliary}};
  return j;
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

void save_checkpoint(const std::string& path, const CheckpointView& ckpt) {
  const std::string config = ckpt.config.dump(2);
  const nlohmann::json vocab = ckpt.tokenizer.to_json();  // symbols, or BPE merges
  const std::string vocab_s = vocab.dump(), state_s = state_json(ckpt.state).dump(2);
  const std::string target_s = ckpt.target_tokenizer ? ckpt.target_tokenizer->to_json().dump() : "";
  std::vector<Section> sections = {{"config", config.data(), config.size()},
                                   {"vocab", vocab_s.data(), vocab_s.size()},
                                   {"state", state_s.data(), state_s.size()},
                                   {"model", ckpt.model, ckpt.parameters * sizeof(float)}};
  if (ckpt.target_tokenizer) sections.push_back({"vocab.target", target_s.data(), target_s.size()});
  for (size_t i = 0; i < ckpt.optimizer.size(); ++i)
    sections.push_back(
        {"optim." + std::to_string(i), ckpt.optimizer[i].data(), ckpt.optimizer[i].size() * sizeof(float)});
  // The header carries the payload's size and CRC, so a first pass computes them over the buffers
  // in place and a second streams the same bytes to the file.
  uint64_t payload_size = 0;
  uint32_t crc = 0;
  for (const Section& s : sections) {
    const std::string prefix = s.prefix();
    payload_size += prefix.size() + s.size;
    crc = crc32(s.data, s.size, crc32(prefix.data(), prefix.size(), crc));
  }
  std::string header(kCheckpointMagic, sizeof kCheckpointMagic);
  put<uint32_t>(header, kCheckpointVersion);
  put<uint32_t>(header, static_cast<uint32_t>(sections.size()));
  put<uint64_t>(header, payload_size);
  put<uint32_t>(header, crc);
  put<uint32_t>(header, 0);

  AtomicFile file(path);  // a temporary beside PATH, fsync'd, renamed over PATH by commit()
  file.write(header.data(), header.size());
  for (const Section& s : sections) {
    const std::string prefix = s.prefix();
    file.write(prefix.data(), prefix.size());
    file.write(s.data, s.size);
  }
  file.commit();
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  save_checkpoint(
      path, CheckpointView{ckpt.config, ckpt.tokenizer, ckpt.state, ckpt.model.data(), ckpt.model.size(),
                           ckpt.optimizer, ckpt.target_tokenizer ? &*ckpt.target_tokenizer : nullptr});
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::string bytes = read_file(path, kMaxCheckpointBytes);  // bounded before allocating
  return parse_checkpoint(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

namespace {

// A checkpoint opened for reads at offsets: a regular file or an error (a FIFO or device at the name is
// refused at once, never waited on: a run list or a resume would hang on one), its size, and its header
// checked against that size.
struct OpenedCheckpoint {
  FileDescriptor fd;
  uint64_t size = 0;
  Header header{};
};

OpenedCheckpoint open_checkpoint(const std::string& path) {
  OpenedCheckpoint c{open_regular_file(path)};
  struct stat st {};
  if (::fstat(c.fd.get(), &st) != 0) throw IoError(path + ": cannot read the checkpoint: " + errno_text());
  c.size = static_cast<uint64_t>(st.st_size);
  char header[kHeaderBytes] = {};
  if (c.size >= kHeaderBytes && read_at(c.fd.get(), header, kHeaderBytes, 0, path) != kHeaderBytes)
    throw IoError(path + ": cannot read the checkpoint's header");
  c.header = read_header(header, c.size, path);
  return c;
}

// The payload's CRC-32 against the header's.
void check_payload_crc(uint32_t computed, const Header& h, const std::string& path) {
  if (computed != h.crc)
    throw IoError(path +
                  ": corrupt checkpoint: checksum mismatch (the file was damaged after it was written)");
}

}  // namespace

CheckpointState load_checkpoint_state(const std::string& path) {
  // Read at offsets: only the header, the sections' heads and the state (the payload's CRC is not
  // checked: that needs every byte).
  const OpenedCheckpoint c = open_checkpoint(path);
  const FileDescriptor& fd = c.fd;
  const uint64_t size = c.size;
  uint64_t pos = kHeaderBytes;
  // Reads n bytes at pos and moves past them; false where the file ends first.
  const auto read = [&](void* out, uint64_t n) {
    if (n > size - std::min(pos, size) || read_at(fd.get(), out, n, pos, path) != n) return false;
    pos += n;
    return true;
  };
  for (uint32_t s = 0; s < c.header.sections; ++s) {
    uint32_t name_len = 0;
    uint64_t len = 0;
    char name[kMaxNameBytes];
    if (!read(&name_len, 4) || name_len == 0 || name_len > kMaxNameBytes || !read(name, name_len) ||
        !read(&len, 8) || len > size - pos)
      throw IoError(path + ": truncated or corrupt checkpoint (section " + std::to_string(s) + ")");
    if (std::string(name, name_len) == "state") {
      std::string data(len, '\0');
      if (!read(data.data(), len)) throw IoError(path + ": truncated checkpoint (the state section)");
      return read_state(path, to_json(path, "state", data));
    }
    pos += len;
  }
  throw IoError(path + ": corrupt checkpoint: no state section");
}

void verify_checkpoint(const std::string& path) {
  const OpenedCheckpoint c = open_checkpoint(path);
  std::vector<char> block(std::min<uint64_t>(c.header.payload_size, uint64_t{4} << 20));
  uint32_t crc = 0;
  for (uint64_t pos = kHeaderBytes; pos < c.size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), c.size - pos));
    if (read_at(c.fd.get(), block.data(), n, pos, path) != n)
      throw IoError(path + ": truncated checkpoint (it ended while being read)");
    crc = crc32(block.data(), n, crc);
    pos += n;
  }
  check_payload_crc(crc, c.header, path);
}

Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& path) {
  const char* header = reinterpret_cast<const char*>(data);
  const Header h = read_header(header, size, path);
  const char* payload = header + kHeaderBytes;
  check_payload_crc(crc32(payload, h.payload_size), h, path);

  Checkpoint ckpt;
  Reader r(path, payload, h.payload_size);
  std::set<std::string> seen;
  for (uint32_t s = 0; s < h.sections; ++s) {
    const uint32_t name_len = r.get<uint32_t>("a section name length");
    if (name_len == 0 || name_len > kMaxNameBytes)
      throw IoError(path + ": corrupt checkpoint: section name of " + std::to_string(name_len) + " bytes");
    const std::string name = r.bytes(name_len, "a section name");
    const uint64_t len = r.get<uint64_t>("a section length");
    const std::string data = r.bytes(len, ("section " + name).c_str());
    // tfm writes each section once: a second one is damage, not a newer value to take.
    if (!seen.insert(name).second)
      throw IoError(path + ": corrupt checkpoint: section \"" + name +
                    "\" appears twice (each is written once)");
    if (name == "config") {
      ckpt.config = to_json(path, name, data);
    } else if (name == "vocab" || name == "vocab.target") {
      const nlohmann::json v = to_json(path, name, data);
      Tokenizer tok;
      try {
        tok = Tokenizer::from_json(v);
      } catch (const nlohmann::json::exception& e) {
        throw IoError(path + ": corrupt checkpoint: bad " + name + " section (" + e.what() + ")");
      } catch (const Error& e) {  // the tokenizer's own check ("tokenizer: the vocabulary must be ...")
        throw IoError(path + ": corrupt checkpoint: bad " + name + " section (" + e.what() + ")");
      }
      // A model of no tokens cannot be built: say so here, not as the model's internal check.
      if (tok.size() <= static_cast<int64_t>(tok.specials().size()))
        throw IoError(path + ": corrupt checkpoint: the " + name + " section holds an empty vocabulary (" +
                      std::to_string(tok.size()) + " tokens, none of them ordinary)");
      if (name == "vocab.target")
        ckpt.target_tokenizer = tok;
      else
        ckpt.tokenizer = tok;
    } else if (name == "state") {
      ckpt.state = read_state(path, to_json(path, name, data));
    } else if (name == "model") {
      ckpt.model = to_floats(path, name, data);
    } else if (name.rfind("optim.", 0) == 0) {
      // The buffers' order is Optimizer::state()'s: optim.1 read as the first would be restored into
      // AdamW's m.
      const std::string expected = "optim." + std::to_string(ckpt.optimizer.size());
      if (name != expected)
        throw IoError(path + ": corrupt checkpoint: section \"" + name + "\" where \"" + expected +
                      "\" belongs (the optimizer's sections are written in order, optim.0 first)");
      ckpt.optimizer.push_back(to_floats(path, name, data));
    } else {
      throw IoError(path + ": corrupt checkpoint: unknown section \"" + name + "\"");
    }
  }
  if (!r.done()) throw IoError(path + ": corrupt checkpoint: bytes after the last section");
  for (const char* needed : {"config", "vocab", "state", "model"})
    if (!seen.count(needed))
      throw IoError(path + ": corrupt checkpoint: no \"" + needed +
                    "\" section (a checkpoint has config, vocab, state and model)");
  return ckpt;
}

}  // namespace tfm
