// The one home for opening the files a user names. Reads accept only regular files and never block
// (a FIFO or device is refused before anything is read) and are size-bounded before anything is
// allocated. Writes never follow a symbolic link and never replace anything but a regular file: a
// whole file goes to a temporary beside it (AtomicFile) and is renamed over the target only once
// complete and on disk; logs are appended to without following a link. Every refusal is an IoError
// naming the file and saying what it is.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace tfm {

// An open file descriptor, closed when destroyed.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Gives up ownership (the caller closes it).
  int release();

 private:
  int fd_ = -1;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// The text of errno ("No such file or directory"), for messages after a failed system call.
std::string errno_text();

// What a stat mode names, for messages: "a regular file", "a FIFO", "a character device", ...
const char* file_kind(mode_t mode);

// Opens `path` for reading: IoError naming it when it is missing or unreadable ("cannot open: ...")
// or not a regular file ("is a FIFO; expected a regular file"). A FIFO or device is refused at once,
// never waited on.
FileDescriptor open_regular_file(const std::string& path);
// The same as a buffered stream.
FilePtr open_regular_stream(const std::string& path);

// The size of a regular file; IoError naming the file when it is missing or not a regular file.
uint64_t file_size(const std::string& path);

// The bytes of `path`; IoError naming the file when it is unreadable or larger than max_bytes.
std::string read_file(const std::string& path, uint64_t max_bytes);

// Reads `size` bytes at `offset` of an open file into `out` (pread, retried until done); fewer only
// where the file ends. Returns how many were read; IoError "PATH: read failed: ..." on an error.
size_t read_at(int fd, void* out, size_t size, uint64_t offset, const std::string& path);

// IoError naming `path` when something other than a regular file is there (checked without
// following a symbolic link, which counts as one): tfm writes only regular files.
void require_regular_or_absent(const std::string& path);

// Opens `path` for appending, created when missing and emptied first when `truncate`. A symbolic
// link or any other non-regular file there is refused (IoError naming it), never followed.
FileDescriptor open_for_append(const std::string& path, bool truncate);

// Opens `path` read-write for an flock, created when missing; refused like open_for_append.
FileDescriptor open_lock_file(const std::string& path);

// Holds an exclusive flock(2) on `path` (open_lock_file) while it lives, waiting until another holder
// lets go; IoError naming `path` when it cannot be had. One process does a piece of work (builds a
// token cache, times the GEMM peak) while the others wait and then use what it made.
class ExclusiveFileLock {
 public:
  explicit ExclusiveFileLock(const std::string& path);

 private:
  FileDescriptor fd_;  // closing it lets go
};

// Writes all `size` bytes to `fd`; IoError naming `path` when that fails.
void write_all(int fd, const void* data, size_t size, const std::string& path);

// Nesting limit for JSON read from files: deep enough for any config or header, shallow enough that
// a hostile file cannot exhaust the stack.
constexpr int kMaxJsonDepth = 64;

// Parses JSON read from a file. Beyond nlohmann's checks (syntax with position, UTF-8), rejects
// duplicate object keys (nlohmann silently keeps the last one) and nesting deeper than kMaxJsonDepth.
// Errors are IoError("<what>: ...").
nlohmann::json parse_json_strict(const char* data, size_t size, const std::string& what);

// Writes a file atomically: `AtomicFile f(path); f.write(...); f.commit();`. A `path` that exists and
// is not a regular file (a symbolic link, FIFO, device, directory) is refused before anything is
// created. Until commit() the data is in a file without a name in the directory of `path` (O_TMPFILE;
// a process killed meanwhile leaves nothing behind), or where the file system has no such files in a
// named one; commit() flushes it to disk, gives it an unpredictable name `.NAME.XXXXXXXXXXXX` beside
// `path`, made exclusively (never through a link), renames that over `path` and fsyncs the directory
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
  // A name beside path_ that `create` made (it returns false when the name exists: another is tried).
  std::string claim_temporary_name(const std::function<bool(const std::string&)>& create) const;

  std::string path_, tmp_path_;  // tmp_path_: "" while the file has no name
  std::FILE* file_ = nullptr;
};

// A whole file written through AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace tfm
