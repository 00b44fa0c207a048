#include "runtime/precision.h"

#include "base/error.h"

namespace bertlab {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

const char* file_key(Precision p) {
  switch (p) {
    case Precision::fp32: return "f32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision precision_from_string(const std::string& s, const std::string& what) {
  if (s == "fp32" || s == "f32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  fail("{}: unknown value '{}' (expected fp32 or bf16)", what, s);
}

}  // namespace bertlab
