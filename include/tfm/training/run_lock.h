// One writer per run directory: `tfm train` (new or --resume) holds an exclusive flock(2) on
// DIR/train.lock for its whole life. The kernel drops the lock when the process dies however it dies,
// so a crashed run never leaves a stale lock behind. Readers (eval, sample, export, ...) take no lock:
// checkpoints are replaced by an atomic rename, so they always see a complete file.
#pragma once
#include <string>

namespace tfm {

class RunLock {
 public:
  RunLock() = default;  // holds nothing (e.g. on MPI ranks other than 0)
  // Creates DIR when missing and locks DIR/train.lock, writing this process's PID into it. A directory
  // another process holds throws IoError("DIR: ... PID n ...") at once (no waiting).
  static RunLock acquire(const std::string& dir);
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // The PID of the process holding DIR/train.lock (from /proc/locks), else 0. Never takes the lock,
  // so it can be polled while a writer starts.
  static long holder(const std::string& dir);
  static constexpr const char* kFileName = "train.lock";

 private:
  std::string dir_, path_;
  int fd_ = -1;
  // The outermost directory acquire() made, DIR or an ancestor (`--out a/b/run` with no a/): on
  // release, DIR and each parent up to it are removed again if nothing else went in. "" when DIR was there.
  std::string created_top_;
  void release();
};

}  // namespace tfm
