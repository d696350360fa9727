#include "tfm/engine/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "tfm/engine/error.h"

namespace tfm {

namespace {
std::string errno_str() {
  return std::strerror(errno);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;
}  // namespace

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw IoError(detail::concat(path, ": cannot open: ", errno_str()));
  if (!S_ISREG(st.st_mode)) throw IoError(detail::concat(path, ": expected a regular file"));
  return static_cast<uint64_t>(st.st_size);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw IoError(detail::concat(path, ": cannot open: ", errno_str()));
  // Size from the open file (not the path) so a rename in between cannot fool the bound.
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
    throw IoError(detail::concat(path, ": expected a regular file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw IoError(detail::concat(path, ": file is ", size, " bytes, expected at most ", max_bytes));
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size > 0 && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
    throw IoError(detail::concat(path, ": read failed after fewer than ", size, " bytes"));
  return bytes;
}

nlohmann::json parse_json_strict(const char* data, size_t size, const std::string& what) {
  using json = nlohmann::json;
  // One set of seen keys per open object; arrays push an empty marker so depth stays aligned.
  std::vector<std::vector<std::string>> keys;
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
        auto& seen = keys.back();
        // Linear scan: objects in our files are small; a sorted set would cost more for them.
        for (const auto& s : seen)
          if (s == k) throw IoError(detail::concat(what, ": duplicate JSON key \"", k, "\""));
        seen.push_back(k);
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

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_path_(path + ".tmp") {
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) throw IoError(detail::concat(tmp_path_, ": cannot create: ", errno_str()));
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t size) {
  TFM_CHECK(file_, "AtomicFile::write", "file ", path_, " already committed");
  if (size > 0 && std::fwrite(data, 1, size, file_) != size)
    throw IoError(detail::concat(tmp_path_, ": write failed: ", errno_str()));
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
  TFM_CHECK(file_, "AtomicFile::write_at", "file ", path_, " already committed");
  if (std::fflush(file_) != 0) throw IoError(detail::concat(tmp_path_, ": write failed: ", errno_str()));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(::fileno(file_), p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(detail::concat(tmp_path_, ": write failed: ", errno_str()));
    p += n, offset += static_cast<uint64_t>(n), size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  TFM_CHECK(file_, "AtomicFile::commit", "file ", path_, " already committed");
  // fsync before rename: otherwise a power cut can leave the new name pointing at empty data.
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const std::string err = ok ? "" : errno_str();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) {
    std::remove(tmp_path_.c_str());
    throw IoError(detail::concat(tmp_path_, ": write failed: ", ok ? errno_str() : err));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string e = errno_str();
    std::remove(tmp_path_.c_str());
    throw IoError(detail::concat(path_, ": cannot rename ", tmp_path_, " to it: ", e));
  }
  // The rename is an entry in the directory: fsync the directory too, or a power cut can bring back
  // the old entry (or none) even though the file's data is on disk.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(detail::concat(path_, ": cannot open its directory to sync it: ", errno_str()));
  // EINVAL: a file system that cannot sync directories (nothing more to do there).
  const bool synced = ::fsync(fd) == 0 || errno == EINVAL;
  const std::string sync_err = synced ? "" : errno_str();
  ::close(fd);
  if (!synced) throw IoError(detail::concat(path_, ": cannot sync its directory after the rename: ", sync_err));
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace tfm
