#include "base/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "base/error.h"

namespace bertlab {

std::string read_file(const std::filesystem::path& file) {
  std::error_code ec;
  auto status = std::filesystem::status(file, ec);
  check(!ec && std::filesystem::exists(status), "{}: no such file", file.string());
  check(!std::filesystem::is_directory(status), "{}: is a directory, expected a file",
        file.string());
  std::ifstream in(file, std::ios::binary);
  check(in.good(), "{}: cannot open for reading: {}", file.string(), std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!in.bad(), "{}: read error", file.string());
  return bytes;
}

std::string read_file_prefix(const std::filesystem::path& file, std::size_t bytes) {
  std::error_code ec;
  check(std::filesystem::is_regular_file(file, ec), "{}: no such file", file.string());
  std::ifstream in(file, std::ios::binary);
  check(in.good(), "{}: cannot open for reading: {}", file.string(), std::strerror(errno));
  std::string out(bytes, '\0');
  in.read(out.data(), static_cast<std::streamsize>(bytes));
  out.resize(static_cast<std::size_t>(in.gcount()));
  return out;
}

void check_output_writable(const std::string& path, const char* option) {
  if (path.empty() || path == "-") return;
  std::error_code ec;
  check(!std::filesystem::is_directory(path, ec), "{} {}: is a directory, expected a file name", option, path);
  std::filesystem::path probe = path;
  probe += fmt::format(".probe{}", ::getpid());
  {
    std::ofstream out(probe);
    check(out.good(), "{} {}: cannot write there (directory missing or not writable)", option, path);
  }
  std::filesystem::remove(probe, ec);
}

std::vector<std::filesystem::path> files_newer_than(const std::filesystem::path& target,
                                                    const std::vector<std::filesystem::path>& files) {
  std::error_code ec;
  const auto built = std::filesystem::last_write_time(target, ec);
  const bool missing = static_cast<bool>(ec);
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> newer;
  for (const auto& f : files) {
    const auto t = std::filesystem::last_write_time(f, ec);
    check(!ec, "{}: cannot read its modification time: {}", f.string(), ec.message());
    if (missing || t > built) newer.emplace_back(t, f);
  }
  std::sort(newer.begin(), newer.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::filesystem::path> out;
  for (auto& [t, f] : newer) out.push_back(std::move(f));
  return out;
}

std::filesystem::path temporary_sibling(const std::filesystem::path& target) {
  static std::atomic<unsigned> counter{0};
  auto name = target.filename().string();
  if (name.empty()) name = target.parent_path().filename().string();
  return target.parent_path() /
         fmt::format(".{}.tmp-{}-{}", name, static_cast<long>(::getpid()), counter++);
}

namespace {

// Writes all of `bytes` to fd; false (errno set) on a failed or short write.
bool write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& file, std::string_view bytes) {
  std::error_code ec_status;
  const auto status = std::filesystem::status(file, ec_status);
  if (!ec_status && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // A device or pipe (/dev/stdout, /dev/full, a FIFO) is written in place, never replaced by
    // a regular file; a directory is refused.
    check(!std::filesystem::is_directory(status), "{}: is a directory, expected a file", file.string());
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    check(fd >= 0, "{}: cannot open for writing: {}", file.string(), std::strerror(errno));
    const bool ok = write_all(fd, bytes);
    const int err = errno;
    const bool closed = ::close(fd) == 0;
    check(ok, "{}: write failed: {}", file.string(), std::strerror(err));
    check(closed, "{}: write failed: {}", file.string(), std::strerror(errno));
    return;
  }
  const auto tmp = temporary_sibling(file);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, "{}: cannot open {} for writing: {}", file.string(), tmp.string(), std::strerror(errno));
  if (!write_all(fd, bytes)) {
    const int err = errno;
    ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    fail("{}: write failed: {}", file.string(), std::strerror(err));
  }
  // Durable before it becomes visible: fsync, then rename over the target.
  bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ok = ::close(fd) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, file, ec);
  if (!ok || ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    fail("{}: cannot write {} into place: {}", file.string(), tmp.string(),
         ok ? ec.message() : std::strerror(err));
  }
}

}  // namespace bertlab
