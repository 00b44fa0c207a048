#pragma once
// Typed fields of the JSON descriptions hwmodel reads (systems, clusters): errors name the file,
// the field's path and what was expected.
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "base/error.h"

namespace bertlab::hw {

// Reads field `key` of object `j` (at `path` inside `origin`); a missing field is an error
// unless a default is given.
template <typename T>
T field(const nlohmann::json& j, const std::string& key, const std::string& path, const std::string& origin) {
  check(j.is_object(), "{}: '{}' must be an object", origin, path);
  check(j.contains(key), "{}: missing field '{}{}'", origin, path.empty() ? "" : path + ".", key);
  // Counts (cores, sizes, ways, ...) must be whole numbers: 2.5 would otherwise be truncated.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    check(j.at(key).is_number_integer(), "{}: field '{}{}' must be a whole number, got {}", origin,
          path.empty() ? "" : path + ".", key, j.at(key).dump());
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: field '{}{}' has the wrong type ({})", origin, path.empty() ? "" : path + ".", key,
         j.at(key).dump());
  }
}

template <typename T>
T field_or(const nlohmann::json& j, const std::string& key, T dflt, const std::string& path,
           const std::string& origin) {
  if (!j.is_object() || !j.contains(key)) return dflt;
  return field<T>(j, key, path, origin);
}

}  // namespace bertlab::hw
