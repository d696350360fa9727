// Whole-file input and output that cannot hurt a run: reads are size-bounded before anything is
// allocated, writes go to `path.tmp` and are renamed over `path` only once complete and on disk,
// so a crash or full disk never leaves a half-written file under the real name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tfm {

// The size of a regular file; IoError naming the file when it is missing or not a regular file.
uint64_t file_size(const std::string& path);

// The bytes of `path`; IoError naming the file when it is unreadable or larger than max_bytes.
std::string read_file(const std::string& path, uint64_t max_bytes);

// Nesting limit for JSON read from files: deep enough for any config or header, shallow enough that
// a hostile file cannot exhaust the stack.
constexpr int kMaxJsonDepth = 64;

// Parses JSON read from a file. Beyond nlohmann's checks (syntax with position, UTF-8), rejects
// duplicate object keys (nlohmann silently keeps the last one) and nesting deeper than kMaxJsonDepth.
// Errors are IoError("<what>: ...").
nlohmann::json parse_json_strict(const char* data, size_t size, const std::string& what);

// Writes a file atomically: `AtomicFile f(path); f.write(...); f.commit();`. Until commit() the
// data is in `path.tmp`; commit() flushes it to disk, renames it over `path` and fsyncs the directory
// (so the new name itself survives a power cut). Destroying an uncommitted AtomicFile removes the
// temporary and leaves `path` as it was.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  // Overwrites bytes already written at `offset` (a header whose fields are known only at the end).
  void write_at(uint64_t offset, const void* data, size_t size);
  void commit();

 private:
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
};

// A whole file written through AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace tfm
