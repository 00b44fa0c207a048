#include "base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/error.h"

namespace bertlab {

namespace {

// The process id the holder wrote into the lock file. The holder writes it right after taking
// the lock, so a loser that reads an empty file reads again for a moment.
std::string holder_of(int fd) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0 && buf[n - 1] == '\n') return std::string(buf, static_cast<size_t>(n - 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return "?";
}

}  // namespace

DirLock::DirLock(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "cannot create output directory {}: {}", dir.string(), ec.message());
  const auto file = dir / kLockFile;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  check(fd_ >= 0, "{}: cannot open the lock file: {}", file.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = err == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    check(err != EWOULDBLOCK,
          "output directory {} is in use by another bertlab run (process {}; lock {}); wait for it to end or "
          "choose another --out", dir.string(), pid, file.string());
    fail("{}: cannot lock: {}", file.string(), std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == ssize_t(pid.size());
  check(written, "{}: cannot write the lock file: {}", file.string(), std::strerror(errno));
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace bertlab
