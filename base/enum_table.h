#pragma once
// Enums with names, from one list. A list macro names each value once, with its spelling in
// files and flags; BERTLAB_ENUM declares the enum class and its names from it, so the two
// cannot drift apart and no hand-written switch maps one to the other:
//
//   #define BERTLAB_PRECISIONS(X) X(fp32, "fp32") X(bf16, "bf16")
//   BERTLAB_ENUM(Precision, uint8_t, BERTLAB_PRECISIONS)
//
// declares, in the namespace where it stands,
//   enum class Precision : uint8_t { fp32, bf16 };
//   constexpr std::array<const char*, 2> enum_names(Precision);  // in declaration order
//   const char* to_string(Precision);
// and the templates below work on it: enum_count<Precision>, enum_parse<Precision>(s) (no
// throw) and enum_from_string<Precision>(s, what), whose error names `what`, the value and
// every accepted name. enum_names is found by argument-dependent lookup, so the enum may live
// in any namespace. A spelling that differs from the identifier (a keyword, a dash) is just a
// different string in the list. A row may carry more columns after the name (X(id, "name",
// "label")) for the enum's own tables, which expand the same list with a macro of their own.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "base/error.h"

#define BERTLAB_ENUM_ID_(id, name, ...) id,
#define BERTLAB_ENUM_NAME_(id, name, ...) name,
#define BERTLAB_ENUM(E, U, LIST)                                                                      \
  enum class E : U { LIST(BERTLAB_ENUM_ID_) };                                                        \
  [[maybe_unused]] constexpr auto enum_names(E) { return std::to_array<const char*>({LIST(BERTLAB_ENUM_NAME_)}); } \
  [[maybe_unused]] inline const char* to_string(E e) { return ::bertlab::enum_name(e); }

namespace bertlab {

template <typename E>
inline constexpr size_t enum_count = enum_names(E{}).size();

template <typename E>
constexpr const char* enum_name(E e) {
  constexpr auto names = enum_names(E{});
  const auto i = static_cast<size_t>(e);
  return i < names.size() ? names[i] : "?";
}

template <typename E>
constexpr std::optional<E> enum_parse(std::string_view s) {
  constexpr auto names = enum_names(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (s == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

// "WHAT: unknown value 'S' (expected one of: a, b, c)"; `what` names the flag, field or file.
template <typename E>
E enum_from_string(std::string_view s, std::string_view what) {
  if (const auto e = enum_parse<E>(s)) return *e;
  fail("{}: unknown value '{}' (expected one of: {})", what, s, fmt::join(enum_names(E{}), ", "));
}

}  // namespace bertlab
