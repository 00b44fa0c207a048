#include "runtime/data/file_util.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "runtime/error.h"

namespace bertlab::data {

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

std::filesystem::path temporary_sibling(const std::filesystem::path& target) {
  static std::atomic<unsigned> counter{0};
  auto name = target.filename().string();
  if (name.empty()) name = target.parent_path().filename().string();
  return target.parent_path() /
         fmt::format(".{}.tmp-{}-{}", name, static_cast<long>(::getpid()), counter++);
}

void write_file_atomic(const std::filesystem::path& file, std::string_view bytes) {
  auto tmp = temporary_sibling(file);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    check(out.good(), "{}: cannot open for writing: {}", tmp.string(), std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail("{}: write failed: {}", file.string(), std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    fail("{}: cannot rename {} into place: {}", file.string(), tmp.string(), ec.message());
  }
}

}  // namespace bertlab::data
