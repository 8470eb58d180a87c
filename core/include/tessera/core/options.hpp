// A plugin's validated options: its TOML sub-table checked against the
// options it declares, with defaults filled in. Implements the opaque
// tessera_options handed across the boundary.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <toml++/toml.h>

#include "tessera/c/plugin.h"

// The ABI's opaque handle is this host class.
struct tessera_options {
  using Value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;
  std::map<std::string, Value, std::less<>> values;
};

namespace tessera {

using OptionValues = tessera_options;

// Checks `table` (may be null: all defaults) against `decls`. Unknown keys,
// wrong types and unparsable defaults throw tessera::Error naming `where`
// (e.g. "run.toml: [backend.options]"), the key and, when known, the line;
// every problem of the table is reported, one per line, in the file's order.
// An int given for a float option is accepted. Keys in `skip` are not
// options (the table holds them for another reader) and are passed over.
OptionValues resolve_options(std::span<const tessera_option_decl> decls, const toml::table* table,
                             const std::string& where, std::span<const std::string_view> skip = {});

// Parses "key=value" overrides (value as a TOML literal or a bare string)
// into a table; used by the CLI for --option flags.
toml::table parse_option_overrides(std::span<const std::string> assignments);

// Text form of a value for display ("true", "25", "0.5", "ring").
std::string option_value_text(const tessera_options::Value& value);

// The values as a TOML table (bool, integer, float, string, integer array), e.g. to print
// a plugin's resolved options as its [<section>.options] table.
toml::table options_table(const OptionValues& values);

// Name of an option type ("bool", "int", "float", "string", "int list").
const char* option_type_name(tessera_option_type type) noexcept;

}  // namespace tessera
