#include "base/json_file.h"

#include <fstream>

#include "base/error.h"

namespace bertlab {

nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what, std::string_view hint) {
  // Reading a directory throws std::ios_base::failure from inside the JSON parser.
  std::error_code ec;
  check(!std::filesystem::is_directory(file, ec), "{} is a directory, expected a {}", file.string(), what);
  std::ifstream in(file);
  check(in.good(), "cannot open {} {}{}", what, file.string(), hint);
  return parse_json_limited(in, file.string(), hint);
}

}  // namespace bertlab
