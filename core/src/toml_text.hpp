// Small TOML helpers shared by the config loader and the option resolver:
// where a node came from, type names for messages, "did you mean" hints,
// literal parsing of "key=value" overrides and literal printing.
//
// Provenance convention: nodes parsed from a file carry the file's display
// name as their source path; nodes parsed from a command-line assignment carry
// a label starting with "--" (e.g. "--set run.steps=10"), so messages can name
// the override instead of a line.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

namespace tessera::detail {

// True when `node` was parsed from a command-line assignment.
inline bool from_override(const toml::node& node) noexcept {
  const auto& path = node.source().path;
  return path != nullptr && path->starts_with("--");
}

// The override label of `node` ("--set run.steps=10"), or empty.
inline std::string override_label(const toml::node& node) {
  return from_override(node) ? *node.source().path : std::string();
}

// 1-based line where `node` begins, 0 when unknown (built in code or copied:
// toml++ does not copy source positions).
inline uint32_t node_line(const toml::node& node) noexcept { return node.source().begin.line; }

// " (line N)", " (--set backend.options.x=1)" or empty: where a value came
// from, for messages.
inline std::string node_origin(const toml::node& node) {
  if (from_override(node)) return " (" + override_label(node) + ")";
  const uint32_t line = node_line(node);
  return line > 0 ? " (line " + std::to_string(line) + ")" : std::string();
}

// Name of a TOML value type as used in messages ("an integer", "a string").
inline const char* toml_type_phrase(toml::node_type type) noexcept {
  switch (type) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// Optimal-string-alignment distance (Levenshtein plus adjacent swaps).
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `word` when it is close enough to be a likely
// typo (distance at most a third of the word, at least 1, at most 3).
inline std::optional<std::string> nearest_word(std::string_view word,
                                               const std::vector<std::string_view>& candidates) {
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string_view candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best;
}

// " (did you mean 'x'?)" or empty.
inline std::string did_you_mean(std::string_view word,
                                const std::vector<std::string_view>& candidates) {
  const auto hint = nearest_word(word, candidates);
  return hint ? " (did you mean '" + *hint + "'?)" : std::string();
}

// `text` as a TOML basic string literal, quotes included.
inline std::string quote_toml_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += "\\u00";
          out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xF];
          out += kHex[static_cast<unsigned char>(c) & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// Shortest text that reads back as the same double, always a TOML float
// literal ("0.0003", "2.0", "1e-08", "1e+300", "inf", "nan").
inline std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Plain decimals for everyday magnitudes ("0.0003", not "3e-04").
  const double magnitude = std::fabs(value);
  const bool fixed = magnitude == 0.0 || (magnitude >= 1e-5 && magnitude < 1e15);
  char buffer[512];
  const auto result =
      fixed ? std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed)
            : std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// A key as TOML writes it: bare when possible, quoted otherwise.
inline std::string toml_key(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  return bare ? std::string(key) : quote_toml_string(key);
}

// Any value as an inline TOML literal (tables become inline tables).
inline std::string toml_literal(const toml::node& node) {
  if (const auto* s = node.as_string()) return quote_toml_string(s->get());
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return format_float(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* array = node.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < array->size(); ++i) {
      out += (i == 0 ? "" : ", ") + toml_literal(*array->get(i));
    }
    return out + "]";
  }
  if (const auto* table = node.as_table()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : *table) {
      out += (first ? " " : ", ") + toml_key(key.str()) + " = " + toml_literal(value);
      first = false;
    }
    return out + (first ? "}" : " }");
  }
  std::ostringstream out;  // dates and times: toml++ prints them in TOML form
  out << toml::toml_formatter(node);
  return out.str();
}

// The range of a TOML integer, for messages.
inline constexpr std::string_view kIntegerRange = "(-9223372036854775808 to 9223372036854775807)";

// True when `text` is written as an integer (decimal with an optional sign
// and '_' between digits, or 0x/0o/0b) whose value does not fit 64 bits:
// TOML refuses it, and it must not pass for a string.
inline bool integer_out_of_range(std::string_view text) {
  std::string digits;
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) i = 1;
  int base = 10;
  if (text.size() > i + 2 && text[i] == '0' &&
      (text[i + 1] == 'x' || text[i + 1] == 'o' || text[i + 1] == 'b')) {
    if (negative || i != 0) return false;  // TOML: no sign on these
    base = text[i + 1] == 'x' ? 16 : (text[i + 1] == 'o' ? 8 : 2);
    i += 2;
  }
  for (; i < text.size(); ++i) {
    if (text[i] == '_' && !digits.empty() && i + 1 < text.size() && text[i + 1] != '_') continue;
    digits += text[i];
  }
  if (digits.empty()) return false;
  // from_chars reads the digits of `base` only; anything else is not an integer.
  if (negative) digits.insert(digits.begin(), '-');
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  return ec == std::errc::result_out_of_range && end == digits.data() + digits.size();
}

// Parses the value of an assignment as a TOML literal; text that is not one
// becomes a string. The node is returned inside a one-key table (key "v"),
// and every node carries `label` as its source path.
inline toml::table parse_assignment_value(std::string_view text, const std::string& label) {
  try {
    toml::table parsed = toml::parse("v = " + std::string(text), std::string_view(label));
    if (parsed.size() == 1 && parsed.contains("v")) return parsed;
  } catch (const toml::parse_error&) {
    // not a TOML literal: taken as a string below
  }
  return toml::parse("v = " + quote_toml_string(text), std::string_view(label));
}

// Trims spaces and tabs from both ends.
inline std::string_view trim(std::string_view text) noexcept {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

}  // namespace tessera::detail
