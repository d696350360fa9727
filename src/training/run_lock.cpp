#include "tfm/training/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"

namespace tfm {
namespace fs = std::filesystem;

namespace {

// The PID text in the lock file ("1234\n"), 0 when empty or unreadable.
long read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::strtol(buf, nullptr, 10) : 0;
}

// `dir` absolute, `.` and `..` resolved by name and no trailing separator: acquire() and release() walk
// the same chain of parents, and a `..` never names a directory outside it (`a/../b/run` is `b/run`).
fs::path chain_start(const std::string& dir, std::error_code& ec) {
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p;
}

}  // namespace

RunLock RunLock::acquire(const std::string& dir) {
  RunLock lock;
  lock.dir_ = dir;
  lock.path_ = dir + "/" + kFileName;
  std::error_code ec;
  for (fs::path p = chain_start(dir, ec); !ec && p.has_relative_path() && !fs::exists(p, ec);
       p = p.parent_path())
    lock.created_top_ = p.string();
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw IoError(
        dir + ": cannot create the run directory (output.dir): " + (ec ? ec.message() : "not a directory"));
  // The file may be unlinked by its previous holder between our open() and flock(): then we would
  // hold a lock on a name-less file. Check that the locked file is still the one under the name.
  for (int attempt = 0; attempt < 100; ++attempt) {
    // Never through a link, and only a regular file (open_lock_file).
    const int fd = open_lock_file(lock.path_).release();
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const long pid = read_pid(fd);
      ::close(fd);
      if (err != EWOULDBLOCK)
        throw IoError(lock.path_ + ": cannot lock the run directory: " + std::strerror(err));
      throw IoError(dir + ": another tfm process (PID " + (pid > 0 ? std::to_string(pid) : "unknown") +
                    ") is training in this run directory and holds " + lock.path_ +
                    "; one writer per run: wait for it to finish or stop it, or train into another --out");
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(lock.path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        const std::string e = std::strerror(errno);
        ::close(fd);
        throw IoError(lock.path_ + ": cannot write the run's lock file: " + e);
      }
      lock.fd_ = fd;
      return lock;
    }
    ::close(fd);  // lost the race with a release: try the new file
  }
  throw IoError(lock.path_ + ": cannot lock the run directory: the lock file keeps changing");
}

long RunLock::holder(const std::string& dir) {
  // Read from /proc/locks, not by trying the lock: a probe would make a writer starting at that moment
  // fail. Lines read "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF" (device in hex, inode).
  struct stat st {};
  if (::stat((dir + "/" + kFileName).c_str(), &st) != 0) return 0;
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    char kind[16] = {}, mode[16] = {};
    long pid = 0;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long inode = 0;
    if (line.find("->") != std::string::npos ||  // a waiter, not a holder
        std::sscanf(line.c_str(), "%*d: %15s %*s %15s %ld %x:%x:%lu", kind, mode, &pid, &dev_major,
                    &dev_minor, &inode) != 6)
      continue;
    if (std::string(kind) == "FLOCK" && inode == st.st_ino && dev_major == major(st.st_dev) &&
        dev_minor == minor(st.st_dev))
      return pid;
  }
  return 0;
}

void RunLock::release() {
  if (fd_ < 0) return;
  // Unlink while still holding it (a process that opened the old file sees the name change and
  // retries); remove the directory too when acquire() made it and the run wrote nothing into it.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
  if (!created_top_.empty()) {
    std::error_code ec;
    for (fs::path p = chain_start(dir_, ec); !ec && fs::is_empty(p, ec) && !ec; p = p.parent_path()) {
      fs::remove(p, ec);
      if (p == created_top_) break;
    }
  }
}

RunLock::~RunLock() {
  release();
}

RunLock::RunLock(RunLock&& other) noexcept
    : dir_(std::move(other.dir_)),
      path_(std::move(other.path_)),
      fd_(other.fd_),
      created_top_(std::move(other.created_top_)) {
  other.fd_ = -1;
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    dir_ = std::move(other.dir_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    created_top_ = std::move(other.created_top_);
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace tfm
