#include "hwmodel/arrangement.h"

#include <fmt/format.h>

#include "base/error.h"

namespace bertlab::hw {

namespace {

// The rows in list order, each checked to hold its own value (a row copied into the wrong
// file, or a list line out of place, fails here rather than mislabelling estimates).
std::array<ArrangementDesc, enum_count<Arrangement>> build_table() {
#define BERTLAB_ARRANGEMENT_ROW_(id, name) id::desc,
  std::array<ArrangementDesc, enum_count<Arrangement>> t{BERTLAB_ARRANGEMENTS(BERTLAB_ARRANGEMENT_ROW_)};
#undef BERTLAB_ARRANGEMENT_ROW_
  for (size_t i = 0; i < t.size(); ++i)
    check(static_cast<size_t>(t[i].id) == i, "arrangement table: row {} ('{}') holds the row of '{}'", i,
          enum_names(Arrangement{})[i], to_string(t[i].id));
  return t;
}

}  // namespace

// Built on first use: the rows are constant-initialised in their own files, so no order of
// static initialisation can see them empty.
std::span<const ArrangementDesc> arrangements() {
  static const auto table = build_table();
  return table;
}

const ArrangementDesc& arrangement_desc(Arrangement a) {
  const auto all = arrangements();
  const auto i = static_cast<size_t>(a);
  check(i < all.size(), "arrangement {} has no row in the table", i);
  return all[i];
}

Arrangement arrangement_from_string(const std::string& name, const std::string& what) {
  if (const auto a = enum_parse<Arrangement>(name)) return *a;
  fail("{}: unknown arrangement '{}' (expected one of: {})", what, name, fmt::join(enum_names(Arrangement{}), ", "));
}

}  // namespace bertlab::hw
