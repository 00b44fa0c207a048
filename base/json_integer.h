#pragma once
// Integers read from JSON of outside origin (graphs, safetensors headers).
#include <cstdint>
#include <nlohmann/json.hpp>

namespace bertlab {

// Whether `v` is a JSON integer in [lo, hi]. Readers of outside data test this before get<>:
// nlohmann converts a float (2e+119 in a graph shape, 4e64 in safetensors data_offsets, both
// found by the fuzzers) or an integer outside the target type with undefined behaviour.
inline bool json_integer_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {  // may exceed int64: compared as unsigned, then against lo
    const uint64_t u = v.get<uint64_t>();
    return hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  }
  return v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

}  // namespace bertlab
