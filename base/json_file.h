#pragma once
// Reading a JSON file with errors that name it (configs, machine.json, graphs, profiles,
// system descriptions, inputs and trainer state).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/error.h"

namespace bertlab {

// Arrays and objects nested deeper than this are refused while parsing: printing or copying
// a value recurses once per level, and 100,000 levels overflow the stack.
inline constexpr int kMaxJsonDepth = 256;

// Parses `file`. Errors: "cannot open <what> <file><hint>", "<file> is a directory, expected a
// <what>", "<file>: not valid JSON: <parser message><hint>". `hint` says how to get a good file,
// e.g. "; run `bertlab calibrate`".
nlohmann::json read_json_file(const std::filesystem::path& file, std::string_view what = "file",
                              std::string_view hint = "");

namespace detail {
struct JsonTooDeep {};
// A parser callback that stops at kMaxJsonDepth levels of arrays and objects.
inline bool limit_json_depth(int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
  if ((event == nlohmann::json::parse_event_t::object_start ||
       event == nlohmann::json::parse_event_t::array_start) && depth >= kMaxJsonDepth)
    throw JsonTooDeep{};
  return true;
}
}  // namespace detail

// Parses JSON from anything nlohmann::json::parse takes (text, a stream); `origin` names the
// source in errors ("<origin>: not valid JSON: ...<hint>"). Refuses nesting deeper than
// kMaxJsonDepth. (Inline: the data library uses it too.)
template <typename Input>
nlohmann::json parse_json_limited(Input&& input, std::string_view origin, std::string_view hint = "") {
  try {
    return nlohmann::json::parse(std::forward<Input>(input), detail::limit_json_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}{}", origin, e.what(), hint);
  } catch (const detail::JsonTooDeep&) {
    fail("{}: not valid JSON: arrays and objects are nested more than {} levels deep{}", origin,
         kMaxJsonDepth, hint);
  }
}

inline nlohmann::json parse_json_text(std::string_view text, std::string_view origin) {
  return parse_json_limited(text, origin);
}

}  // namespace bertlab
