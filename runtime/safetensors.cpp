#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"
#include "base/json_integer.h"

namespace bertlab {

namespace {

int64_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return -1;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

// The reference implementation refuses headers over 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Parses the header, refusing duplicate names (the format forbids them; a JSON parser keeps
// the last) and nesting deeper than kMaxJsonDepth.
nlohmann::json parse_header(std::string_view text, const std::string& file) {
  std::set<std::string> names;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return detail::limit_json_depth(depth, event, parsed);
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  } catch (const detail::JsonTooDeep&) {
    fail("{}: header is not valid JSON: nested more than {} levels deep", file, kMaxJsonDepth);
  }
  check(duplicate.empty(), "{}: tensor '{}' appears twice in the header (the format forbids duplicate names)", file,
        duplicate);
  return header;
}

// The integer arrays of a header entry ('shape', 'data_offsets'). Each element must be a JSON
// integer that fits int64 (json_integer_in: fuzz_safetensors crash-44b2b83c had 4e64); floats
// are refused, even 2.0, as the format's reference reader refuses them.
std::vector<int64_t> header_integers(const nlohmann::json& entry, const char* field, const std::string& file,
                                     const std::string& name) {
  const auto& a = entry.at(field);
  check(a.is_array(), "{}: tensor '{}': malformed header entry: '{}' must be an array of integers, got {}", file, name,
        field, a.type_name());
  std::vector<int64_t> out;
  for (const auto& v : a) {
    check(json_integer_in(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()),
          "{}: tensor '{}': '{}' holds {}, expected an integer from -2^63 to 2^63-1", file, name, field,
          v.is_number() ? v.dump() : std::string(v.type_name()));
    out.push_back(v.get<int64_t>());
  }
  return out;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);  // follows symlinks; a loop is an error
  check(!ec || ec == std::errc::no_such_file_or_directory, "cannot open safetensors file {}: {}", file, ec.message());
  check(std::filesystem::exists(status), "cannot open safetensors file {}: no such file", file);
  check(std::filesystem::is_regular_file(status), "safetensors file {} is {}, expected a regular file", file,
        std::filesystem::is_directory(status) ? "a directory" : "not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  check(in.good(), "cannot open safetensors file {}", file);
  const auto size = static_cast<size_t>(in.tellg());
  check(size >= 8, "{}: truncated safetensors file ({} bytes, expected at least 8)", file, size);
  bytes_.resize(size);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(size));
  check(in.good(), "{}: read error", file);
  parse();
}

SafetensorsFile::SafetensorsFile(std::vector<std::byte> bytes, const std::filesystem::path& path)
    : path_(path), bytes_(std::move(bytes)) {
  parse();
}

void SafetensorsFile::parse() {
  const std::string file = path_.string();
  const size_t size = bytes_.size();
  check(size >= 8, "{}: truncated safetensors file ({} bytes, expected at least 8)", file, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes_.data(), 8);  // little-endian host (x86-64)
  check(header_len <= size - 8, "{}: header length {} exceeds the file size {}", file, header_len,
        size);
  check(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the format's limit of {} bytes", file,
        header_len, kMaxHeaderBytes);
  check(header_len >= 2 && static_cast<char>(bytes_[8]) == '{',
        "{}: the header must begin with '{{' (the safetensors format)", file);
  const nlohmann::json header = parse_header(
      std::string_view(reinterpret_cast<const char*>(bytes_.data()) + 8, header_len), file);
  check(header.is_object(), "{}: header must be a JSON object", file);
  const size_t data_start = 8 + header_len, data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (v.is_object())
        for (auto m = v.begin(); m != v.end(); ++m)
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    SafetensorView t;
    t.name = name;
    try {
      t.dtype = v.at("dtype").get<std::string>();
      t.shape = header_integers(v, "shape", file, name);
      const std::vector<int64_t> signed_offsets = header_integers(v, "data_offsets", file, name);
      check(signed_offsets.size() == 2, "{}: tensor '{}': data_offsets must have two entries", file, name);
      check(signed_offsets[0] >= 0 && signed_offsets[1] >= 0, "{}: tensor '{}': data_offsets [{}, {}] must not be negative",
            file, name, signed_offsets[0], signed_offsets[1]);
      const std::vector<uint64_t> offsets(signed_offsets.begin(), signed_offsets.end());
      check(offsets[0] <= offsets[1] && offsets[1] <= data_size,
            "{}: tensor '{}': data_offsets [{}, {}] lie beyond the {} data bytes (truncated file?)",
            file, name, offsets[0], offsets[1], data_size);
      int64_t eb = dtype_bytes(t.dtype);
      check(eb > 0, "{}: tensor '{}': unknown dtype '{}'", file, name, t.dtype);
      // Huge dimensions must not overflow into a small byte count that matches the offsets.
      const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
      uint64_t need = empty ? 0 : static_cast<uint64_t>(eb);
      for (auto d : t.shape) {
        check(d >= 0, "{}: tensor '{}': negative dimension", file, name);
        if (empty) continue;
        check(need <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d),
              "{}: tensor '{}': shape {} is too large (its byte count overflows)", file, name,
              shape_str(t.shape));
        need *= static_cast<uint64_t>(d);
      }
      check(need == offsets[1] - offsets[0],
            "{}: tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", file, name,
            shape_str(t.shape), t.dtype, need, offsets[1] - offsets[0]);
      t.data = bytes_.data() + data_start + offsets[0];
      t.nbytes = offsets[1] - offsets[0];
    } catch (const nlohmann::json::exception& e) {
      fail("{}: tensor '{}': malformed header entry: {}", file, name, e.what());
    }
    tensors_.emplace(name, std::move(t));
  }
  // The format: the data buffer is indexed entirely, without holes or overlaps (no aliased
  // tensors, no hidden bytes, no polyglot files). Alignment is not required (reads copy).
  std::vector<std::pair<uint64_t, const SafetensorView*>> spans;
  for (const auto& [name, t] : tensors_)
    spans.emplace_back(static_cast<uint64_t>(t.data - (bytes_.data() + data_start)), &t);
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->nbytes < b.second->nbytes;
  });
  uint64_t covered = 0;
  for (const auto& [begin, t] : spans) {
    check(begin == covered, "{}: tensor '{}': data_offsets [{}, {}] {} (the format requires the tensors to fill "
          "the data without holes or overlaps)", file, t->name, begin, begin + t->nbytes,
          begin < covered ? fmt::format("overlap the tensor data before byte {}", covered)
                          : fmt::format("leave bytes {} to {} unused", covered, begin));
    covered = begin + t->nbytes;
  }
  check(covered == data_size, "{}: {} trailing bytes after the last tensor's data (the format requires the tensors "
        "to fill the data exactly)", file, data_size - covered);
}

const SafetensorView& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors_.find(name);
  check(it != tensors_.end(), "{}: no tensor named '{}'", path_.string(), name);
  return it->second;
}

void SafetensorsFile::read_f32(const std::string& name, const Shape& expected, float* out) const {
  const auto& t = at(name);
  check(t.shape == expected, "{}: tensor '{}' has shape {}, expected {}", path_.string(), name,
        shape_str(t.shape), shape_str(expected));
  const int64_t n = numel(t.shape);
  if (t.dtype == "F32") {
    std::memcpy(out, t.data, n * sizeof(float));
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = t.dtype == "BF16" ? std::bit_cast<float>(uint32_t(h) << 16) : half_to_float(h);
    }
  } else {
    fail("{}: tensor '{}' has dtype {}, expected F32, F16 or BF16", path_.string(), name, t.dtype);
  }
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    // A second entry of a name would replace the first in the header and leave its bytes as a hole.
    check(!header.contains(t.name), "{}: cannot write tensor '{}' twice", path.string(), t.name);
    int64_t eb = dtype_bytes(t.dtype);
    check(eb > 0, "cannot write tensor '{}' with dtype '{}'", t.name, t.dtype);
    uint64_t n = static_cast<uint64_t>(numel(t.shape) * eb);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string blob(8, '\0');
  uint64_t len = h.size();
  std::memcpy(blob.data(), &len, 8);
  blob += h;
  blob.reserve(blob.size() + offset);
  for (const auto& t : tensors)
    blob.append(static_cast<const char*>(t.data), numel(t.shape) * dtype_bytes(t.dtype));
  write_file_atomic(path, blob);
}

}  // namespace bertlab
