#pragma once
// Whole-file reads and atomic writes (temporary name, then rename) with errors naming the file.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace bertlab {

std::string read_file(const std::filesystem::path& file);
// At most the first `bytes` bytes of a file.
std::string read_file_prefix(const std::filesystem::path& file, std::size_t bytes);

// Writes `bytes` to file.tmp-<pid> and renames it over `file`, so readers never see a
// partial file.
void write_file_atomic(const std::filesystem::path& file, std::string_view bytes);

// Fails now, before minutes of work, if `path` cannot be written: the error names `option`
// (the command-line flag that gave the path). "-" (standard output) and "" are always fine.
void check_output_writable(const std::string& path, const char* option);

// The files of `files` last written after `target` (all of them if `target` does not exist),
// newest first: the sources a built program is older than.
std::vector<std::filesystem::path> files_newer_than(const std::filesystem::path& target,
                                                    const std::vector<std::filesystem::path>& files);

// A sibling name for building a file or directory before renaming it into place.
std::filesystem::path temporary_sibling(const std::filesystem::path& target);

}  // namespace bertlab
