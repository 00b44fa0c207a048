#include "runtime/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace bertlab {

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, "cannot write {}: {}", path.string(), std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      std::filesystem::remove(tmp);
      fail("cannot write {}: {}", path.string(), std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  bool ok = ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp);
    fail("cannot write {}: {}", path.string(), ok ? ec.message() : std::strerror(errno));
  }
}

}  // namespace bertlab
