#pragma once
// One writer per output directory: an exclusive flock(2) on DIR/.bertlab.lock, held for a whole
// run. The kernel releases it when the process ends in any way (exit, exception, kill -9), so a
// lock left by a killed run never blocks the resume.
#include <filesystem>

namespace bertlab {

inline constexpr const char* kLockFile = ".bertlab.lock";

class DirLock {
 public:
  // Creates `dir` if needed and takes its lock without waiting; throws Error naming the process
  // that holds it (its id, written into the lock file) when another one does.
  explicit DirLock(const std::filesystem::path& dir);
  DirLock() = default;  // holds nothing (the other ranks of a data-parallel run)
  DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

 private:
  int fd_ = -1;
};

}  // namespace bertlab
