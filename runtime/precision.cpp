#include "runtime/precision.h"

#include <array>

namespace bertlab {

namespace {
#define BERTLAB_PRECISION_FILE_KEY(id, name, key) key,
constexpr std::array<const char*, enum_count<Precision>> kFileKeys{BERTLAB_PRECISIONS(BERTLAB_PRECISION_FILE_KEY)};
#undef BERTLAB_PRECISION_FILE_KEY
}  // namespace

const char* file_key(Precision p) { return kFileKeys.at(static_cast<size_t>(p)); }

Precision precision_from_string(const std::string& s, const std::string& what) {
  for (size_t i = 0; i < kFileKeys.size(); ++i)
    if (s == kFileKeys[i]) return static_cast<Precision>(i);
  return enum_from_string<Precision>(s, what);
}

}  // namespace bertlab
