#pragma once
// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then data.
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

struct SafetensorView {
  std::string name;
  std::string dtype;  // F32, F16, BF16, I32, I64, ...
  Shape shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file; errors name the file and the tensor.
  explicit SafetensorsFile(const std::filesystem::path& path);
  // The same validation of a file's bytes held in memory; `path` names them in errors.
  SafetensorsFile(std::vector<std::byte> bytes, const std::filesystem::path& path);
  // The views point into bytes_: a copy would point into the original's buffer, so copying is
  // not allowed. A move keeps the vector's buffer, and with it the views, valid.
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  const std::filesystem::path& path() const { return path_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafetensorView& at(const std::string& name) const;
  const std::map<std::string, SafetensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Copies a tensor into fp32 (from F32, F16 or BF16), checking its shape.
  void read_f32(const std::string& name, const Shape& expected, float* out) const;

 private:
  void parse();  // bytes_ -> tensors_, metadata_

  std::filesystem::path path_;
  std::vector<std::byte> bytes_;
  std::map<std::string, SafetensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorWrite {
  std::string name;
  std::string dtype;  // F32 or I32
  Shape shape;
  const void* data;
};

// Writes atomically: to a temporary file in the same directory, fsync, rename.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace bertlab
