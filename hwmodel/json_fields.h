#pragma once
// Typed fields of the JSON descriptions hwmodel reads (systems, clusters): errors name the file,
// the field's path and what was expected.
#include <nlohmann/json.hpp>
#include <algorithm>
#include <string>
#include <vector>
#include <type_traits>

#include "base/enum_table.h"
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

// Reads string field `key` as enum E (a BERTLAB_ENUM, base/enum_table.h); a name not of E is
// refused naming the field and every accepted name. `alias` maps other spellings first.
template <typename E>
E enum_field_or(const nlohmann::json& j, const std::string& key, E dflt, const std::string& path,
                const std::string& origin, std::string (*alias)(const std::string&) = nullptr) {
  if (!j.is_object() || !j.contains(key)) return dflt;
  std::string s = field<std::string>(j, key, path, origin);
  if (alias) s = alias(s);
  return enum_from_string<E>(s, fmt::format("{}: field '{}{}'", origin, path.empty() ? "" : path + ".", key));
}

// The known field nearest to `key` by edit distance (a misspelling's likely intent).
inline std::string nearest_field(const std::string& key, const std::vector<const char*>& known) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const char* k : known) {
    const std::string b = k;
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= key.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (key[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    if (row[b.size()] < best_d) best_d = row[b.size()], best = b;
  }
  return best;
}

// Refuses a field of object `j` (at `path` inside `origin`) that is not in `known`, naming it
// and the nearest known one: a misspelt field would otherwise be ignored and its default used.
inline void check_known_fields(const nlohmann::json& j, const std::vector<const char*>& known,
                               const std::string& path, const std::string& origin) {
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    check(ok, "{}: unknown field '{}{}' (did you mean '{}{}'?)", origin, path.empty() ? "" : path + ".", key,
          path.empty() ? "" : path + ".", nearest_field(key, known));
  }
}

}  // namespace bertlab::hw
