#pragma once
// Files are never written half: write a temporary beside the target, fsync, rename.
#include <filesystem>
#include <string_view>

namespace bertlab {

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace bertlab
