#include "runtime/json_file.h"

#include <fstream>

#include "base/error.h"

namespace bertlab {

nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what, std::string_view hint) {
  // Reading a directory throws std::ios_base::failure from inside the JSON parser.
  check(!std::filesystem::is_directory(file), "{} is a directory, expected a {}", file.string(), what);
  std::ifstream in(file);
  check(in.good(), "cannot open {} {}{}", what, file.string(), hint);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}{}", file.string(), e.what(), hint);
  }
}

}  // namespace bertlab
