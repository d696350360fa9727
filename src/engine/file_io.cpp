#include "tfm/engine/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "tfm/engine/error.h"

namespace tfm {

std::string errno_text() {
  return std::strerror(errno);
}

namespace {

[[noreturn]] void refuse_to_read(const std::string& path, mode_t mode) {
  throw IoError(detail::concat(path, ": is ", file_kind(mode), "; expected a regular file"));
}

[[noreturn]] void refuse_to_write(const std::string& path, mode_t mode) {
  throw IoError(detail::concat(path, ": exists and is ", file_kind(mode),
                               "; tfm writes only regular files: remove it or choose another path"));
}

// Clears O_NONBLOCK, set only so that opening a FIFO cannot block: reads and writes of a regular
// file then behave as usual.
void make_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

// Opens `path` for writing with `flags` added; never follows a link, never waits on a FIFO, and
// refuses anything but a regular file.
FileDescriptor open_for_writing(const std::string& path, int flags) {
  require_regular_or_absent(path);
  // O_NOFOLLOW and O_NONBLOCK: a link or FIFO planted after the check is refused, not followed or
  // waited on.
  FileDescriptor fd(
      ::open(path.c_str(), flags | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644));
  if (!fd) {
    const std::string err = errno_text();
    require_regular_or_absent(path);  // ELOOP, ENXIO: say what is there
    throw IoError(detail::concat(path, ": cannot open for writing: ", err));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    throw IoError(detail::concat(path, ": cannot open for writing: ", errno_text()));
  if (!S_ISREG(st.st_mode)) refuse_to_write(path, st.st_mode);
  make_blocking(fd.get());
  return fd;
}

// Twelve unpredictable characters for a temporary file's name.
std::string random_suffix() {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[12];
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    std::random_device rd;
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rd());
  }
  std::string s;
  for (unsigned char b : bytes) s += kChars[b % (sizeof kChars - 1)];
  return s;
}
}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int FileDescriptor::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

FileDescriptor open_regular_file(const std::string& path) {
  // stat first, so that a device is refused without being opened at all.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  if (!S_ISREG(st.st_mode)) refuse_to_read(path, st.st_mode);
  // O_NONBLOCK: should a FIFO take the name after the stat, opening it still returns at once.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  if (::fstat(fd.get(), &st) != 0) throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  if (!S_ISREG(st.st_mode)) refuse_to_read(path, st.st_mode);
  make_blocking(fd.get());
  return fd;
}

FilePtr open_regular_stream(const std::string& path) {
  FileDescriptor fd = open_regular_file(path);
  FilePtr f(::fdopen(fd.get(), "rb"));
  if (!f) throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  fd.release();  // the stream owns it now
  return f;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  if (!S_ISREG(st.st_mode)) refuse_to_read(path, st.st_mode);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  FilePtr f = open_regular_stream(path);
  // Size from the open file (not the path) so a rename in between cannot fool the bound.
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0)
    throw IoError(detail::concat(path, ": cannot open: ", errno_text()));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw IoError(detail::concat(path, ": file is ", size, " bytes, expected at most ", max_bytes));
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size > 0 && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
    throw IoError(detail::concat(path, ": read failed after fewer than ", size, " bytes"));
  return bytes;
}

size_t read_at(int fd, void* out, size_t size, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t r =
        ::pread(fd, static_cast<char*>(out) + done, size - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(detail::concat(path, ": read failed: ", errno_text()));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

void require_regular_or_absent(const std::string& path) {
  struct stat st;
  // Absent, or not reachable: creating it then reports why.
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISREG(st.st_mode)) refuse_to_write(path, st.st_mode);
}

FileDescriptor open_for_append(const std::string& path, bool truncate) {
  FileDescriptor fd = open_for_writing(path, O_WRONLY | O_APPEND);
  // Emptied only now that it is known to be a regular file.
  if (truncate && ::ftruncate(fd.get(), 0) != 0)
    throw IoError(detail::concat(path, ": cannot empty it: ", errno_text()));
  return fd;
}

FileDescriptor open_lock_file(const std::string& path) {
  return open_for_writing(path, O_RDWR);
}

ExclusiveFileLock::ExclusiveFileLock(const std::string& path) : fd_(open_lock_file(path)) {
  while (::flock(fd_.get(), LOCK_EX) != 0)
    if (errno != EINTR) throw IoError(detail::concat(path, ": cannot lock: ", errno_text()));
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(detail::concat(path, ": write failed: ", errno_text()));
    p += n, size -= static_cast<size_t>(n);
  }
}

nlohmann::json parse_json_strict(const char* data, size_t size, const std::string& what) {
  using json = nlohmann::json;
  // One set of seen keys per open object; arrays push an empty marker so depth stays aligned.
  // A hash set: GPT-2's encoder.json is one object of 50,257 keys, where a linear scan of the keys seen
  // so far made reading it quadratic (2 s of the 2.1 a `tfm tokenizer encode` took).
  std::vector<std::unordered_set<std::string>> keys;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw IoError(detail::concat(what, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second)
          throw IoError(detail::concat(what, ": duplicate JSON key \"", k, "\""));
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(data, data + size, check);
  } catch (const json::exception& e) {
    // nlohmann's text starts with "[json.exception.parse_error.101] "; keep what follows.
    std::string msg = e.what();
    const size_t close = msg.find("] ");
    if (close != std::string::npos) msg = msg.substr(close + 2);
    throw IoError(detail::concat(what, ": invalid JSON: ", msg));
  }
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  require_regular_or_absent(path_);
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  // First a file without a name (O_TMPFILE, named at commit): a process killed while writing leaves
  // nothing behind. Naming it goes through /proc/self/fd.
  int fd = -1;
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd = ::open(dir.empty() ? "." : dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    // Any other error (a missing or read-only directory) is the same for a named file.
    if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      throw IoError(detail::concat(path_, ": cannot create a temporary file beside it: ", errno_text()));
  }
  if (fd < 0) {  // a file system without unnamed files
    tmp_path_ = claim_temporary_name([&](const std::string& name) {
      fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
      if (fd < 0 && errno != EEXIST)
        throw IoError(detail::concat(path_, ": cannot create a temporary file beside it: ", errno_text()));
      return fd >= 0;
    });
  }
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    const std::string err = errno_text();
    ::close(fd);
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    throw IoError(detail::concat(path_, ": cannot create a temporary file beside it: ", err));
  }
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
  }
}

std::string AtomicFile::claim_temporary_name(const std::function<bool(const std::string&)>& create) const {
  // Fresh unpredictable names, each made exclusively (never through a link): nothing planted in the
  // directory beforehand can be written through or made to take the data.
  const std::filesystem::path target(path_);
  const std::string prefix = "." + target.filename().string() + ".";
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = (target.parent_path() / (prefix + random_suffix())).string();
    if (create(name)) return name;
  }
  throw IoError(detail::concat(path_, ": cannot create a temporary file beside it: every name tried exists"));
}

void AtomicFile::write(const void* data, size_t size) {
  TFM_CHECK(file_, "AtomicFile::write", "file ", path_, " already committed");
  if (size > 0 && std::fwrite(data, 1, size, file_) != size)
    throw IoError(detail::concat(path_, ": write failed: ", errno_text()));
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
  TFM_CHECK(file_, "AtomicFile::write_at", "file ", path_, " already committed");
  if (std::fflush(file_) != 0) throw IoError(detail::concat(path_, ": write failed: ", errno_text()));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(::fileno(file_), p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(detail::concat(path_, ": write failed: ", errno_text()));
    p += n, offset += static_cast<uint64_t>(n), size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  TFM_CHECK(file_, "AtomicFile::commit", "file ", path_, " already committed");
  // fsync before rename: otherwise a power cut can leave the new name pointing at empty data.
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  std::string err = ok ? "" : errno_text();
  if (ok && tmp_path_.empty()) {
    // The unnamed file gets a temporary name (linkat makes it exclusively), then the real one.
    const std::string self = "/proc/self/fd/" + std::to_string(::fileno(file_));
    tmp_path_ = claim_temporary_name([&](const std::string& name) {
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
      if (errno == EEXIST) return false;
      ok = false, err = errno_text();
      return true;  // no name: the write fails below
    });
    if (!ok) tmp_path_.clear();
  }
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) {
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    throw IoError(detail::concat(path_, ": write failed: ", ok ? errno_text() : err));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string e = errno_text();
    ::unlink(tmp_path_.c_str());
    throw IoError(detail::concat(path_, ": cannot rename ", tmp_path_, " to it: ", e));
  }
  // The rename is an entry in the directory: fsync the directory too, or a power cut can bring back
  // the old entry (or none) even though the file's data is on disk.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(detail::concat(path_, ": cannot open its directory to sync it: ", errno_text()));
  // EINVAL: a file system that cannot sync directories (nothing more to do there).
  const bool synced = ::fsync(fd) == 0 || errno == EINVAL;
  const std::string sync_err = synced ? "" : errno_text();
  ::close(fd);
  if (!synced)
    throw IoError(detail::concat(path_, ": cannot sync its directory after the rename: ", sync_err));
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace tfm
