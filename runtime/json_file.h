#pragma once
// Reading a JSON file with errors that name it (configs, machine.json, graphs, profiles,
// system descriptions, inputs, trainer state).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace bertlab {

// Parses `file`. Errors: "cannot open <what> <file><hint>", "<file> is a directory, expected a
// <what>", "<file>: not valid JSON: <parser message><hint>". `hint` says how to get a good file,
// e.g. "; run `bertlab calibrate`".
nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what = "file",
                              std::string_view hint = "");

}  // namespace bertlab
