#include "tessera/core/options.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "toml_text.hpp"

namespace tessera {
namespace {

const char* type_phrase(tessera_option_type type) noexcept {
  switch (type) {
    case TESSERA_OPT_BOOL:
      return "a bool";
    case TESSERA_OPT_INT:
      return "an int";
    case TESSERA_OPT_FLOAT:
      return "a float";
    case TESSERA_OPT_STRING:
      return "a string";
    case TESSERA_OPT_INT_LIST:
      return "an array of ints";
    default:
      return "an unknown type";
  }
}

// `node` as a value of `type`, or std::nullopt when it has another type. An
// integer is accepted for a float.
std::optional<tessera_options::Value> convert(const toml::node& node, tessera_option_type type) {
  switch (type) {
    case TESSERA_OPT_BOOL:
      if (const auto* b = node.as_boolean()) return tessera_options::Value(b->get());
      break;
    case TESSERA_OPT_INT:
      if (const auto* i = node.as_integer()) return tessera_options::Value(i->get());
      break;
    case TESSERA_OPT_FLOAT:
      if (const auto* f = node.as_floating_point()) return tessera_options::Value(f->get());
      if (const auto* i = node.as_integer()) {
        return tessera_options::Value(static_cast<double>(i->get()));
      }
      break;
    case TESSERA_OPT_STRING:
      if (const auto* s = node.as_string()) return tessera_options::Value(s->get());
      break;
    case TESSERA_OPT_INT_LIST:
      if (const auto* a = node.as_array()) {
        std::vector<int64_t> values;
        for (const toml::node& item : *a) {
          const auto* i = item.as_integer();
          if (i == nullptr) return std::nullopt;
          values.push_back(i->get());
        }
        return tessera_options::Value(std::move(values));
      }
      break;
    default:
      break;
  }
  return std::nullopt;
}

// The declared default of `decl`. A string default is its text as written
// ("ring"), or a quoted TOML string; every other type must be a TOML literal
// of that type. Anything else is a bug in the plugin.
tessera_options::Value parse_default(const tessera_option_decl& decl, const std::string& where) {
  const std::string key = decl.key;
  auto bad = [&](const std::string& why) {
    return Error(TESSERA_ERR_INTERNAL, where + ": plugin option '" + key + "' " + why);
  };
  if (decl.default_value == nullptr) throw bad("declares no default value");
  const std::string_view text = decl.default_value;
  if (decl.type == TESSERA_OPT_STRING && !text.starts_with('"') && !text.starts_with('\'')) {
    return tessera_options::Value(std::string(text));
  }
  try {
    const toml::table parsed = toml::parse("v = " + std::string(text));
    if (parsed.size() == 1) {
      if (const toml::node* node = parsed.get("v")) {
        if (auto value = convert(*node, decl.type)) {
          const auto* number = std::get_if<double>(&*value);
          if (number != nullptr && !std::isfinite(*number)) {
            throw bad("has default '" + std::string(text) + "', which is not a finite number");
          }
          return *std::move(value);
        }
      }
    }
  } catch (const toml::parse_error&) {
    // reported below
  }
  throw bad("has default '" + std::string(text) + "', which is not " + type_phrase(decl.type));
}

// Checks the declarations themselves: keys present and unique, known types.
void check_decls(std::span<const tessera_option_decl> decls, const std::string& where) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < decls.size(); ++i) {
    const auto& decl = decls[i];
    if (decl.key == nullptr || *decl.key == '\0') {
      throw Error(TESSERA_ERR_INTERNAL,
                  where + ": plugin option #" + std::to_string(i) + " has no key");
    }
    if (decl.type < TESSERA_OPT_BOOL || decl.type > TESSERA_OPT_INT_LIST) {
      throw Error(TESSERA_ERR_INTERNAL, where + ": plugin option '" + decl.key +
                                            "' has unknown type " + std::to_string(decl.type));
    }
    if (!seen.insert(decl.key).second) {
      throw Error(TESSERA_ERR_INTERNAL,
                  where + ": plugin option '" + decl.key + "' is declared twice");
    }
  }
}

std::string declared_list(std::span<const tessera_option_decl> decls) {
  if (decls.empty()) return "none";
  std::string out;
  for (const auto& decl : decls) out += (out.empty() ? "" : ", ") + std::string(decl.key);
  return out;
}

}  // namespace

OptionValues resolve_options(std::span<const tessera_option_decl> decls, const toml::table* table,
                             const std::string& where, std::span<const std::string_view> skip) {
  check_decls(decls, where);
  OptionValues out;
  for (const auto& decl : decls) out.values.insert_or_assign(decl.key, parse_default(decl, where));
  if (table == nullptr) return out;

  // Visit the given keys in the order they were written, so the problems
  // are reported in the file's order.
  std::vector<std::pair<std::string_view, const toml::node*>> given;
  for (const auto& [key, node] : *table) {
    if (std::find(skip.begin(), skip.end(), key.str()) == skip.end()) {
      given.emplace_back(key.str(), &node);
    }
  }
  std::stable_sort(given.begin(), given.end(), [](const auto& a, const auto& b) {
    const bool a_late = detail::from_override(*a.second);
    const bool b_late = detail::from_override(*b.second);
    if (a_late != b_late) return b_late;  // the file first, then overrides
    return detail::node_line(*a.second) < detail::node_line(*b.second);
  });

  // Every problem, in that order, one per line (as the config's own).
  std::vector<std::string> problems;
  for (const auto& entry : given) {
    const std::string_view key = entry.first;
    const auto& node = entry.second;
    const auto decl = std::find_if(decls.begin(), decls.end(),
                                   [&](const tessera_option_decl& d) { return key == d.key; });
    if (decl == decls.end()) {
      std::vector<std::string_view> names;
      for (const auto& d : decls) names.emplace_back(d.key);
      const auto hint = detail::nearest_word(key, names);
      problems.push_back(where + ": unknown option '" + std::string(key) + "'" +
                         detail::node_origin(*node) + "; declared: " + declared_list(decls) +
                         (hint ? "; did you mean '" + *hint + "'?" : std::string()));
      continue;
    }
    auto value = convert(*node, decl->type);
    if (!value) {
      problems.push_back(where + ": option '" + std::string(key) + "'" +
                         detail::node_origin(*node) + " must be " + type_phrase(decl->type) +
                         ", got " + detail::toml_type_phrase(node->type()));
      continue;
    }
    if (const auto* number = std::get_if<double>(&*value); number && !std::isfinite(*number)) {
      problems.push_back(where + ": option '" + std::string(key) + "'" +
                         detail::node_origin(*node) + " must be a finite number, got " +
                         detail::format_float(*number));
      continue;
    }
    out.values.insert_or_assign(std::string(key), *std::move(value));
  }
  if (!problems.empty()) {
    std::string text;
    for (const std::string& p : problems) text += (text.empty() ? "" : "\n") + p;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, text);
  }
  return out;
}

toml::table parse_option_overrides(std::span<const std::string> assignments) {
  toml::table out;
  for (const std::string& assignment : assignments) {
    const auto eq = assignment.find('=');
    const std::string_view key =
        detail::trim(std::string_view(assignment).substr(0, std::min(eq, assignment.size())));
    if (eq == std::string::npos || key.empty()) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  "option override '" + assignment + "' is not of the form key=value");
    }
    if (key.find('.') != std::string_view::npos) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT, "option override '" + assignment +
                                                    "': option keys are not dotted ('" +
                                                    std::string(key) + "')");
    }
    const std::string_view text = detail::trim(std::string_view(assignment).substr(eq + 1));
    if (detail::integer_out_of_range(text)) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT, "option override '" + assignment + "': '" +
                                                    std::string(key) + "' = " + std::string(text) +
                                                    " is out of range for an integer " +
                                                    std::string(detail::kIntegerRange));
    }
    toml::table parsed = detail::parse_assignment_value(text, "--option " + assignment);
    out.insert_or_assign(std::string(key), std::move(*parsed.get("v")));
  }
  return out;
}

std::string option_value_text(const tessera_options::Value& value) {
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return detail::format_float(*d);
  if (const auto* list = std::get_if<std::vector<int64_t>>(&value)) {
    std::string text = "[";
    for (std::size_t i = 0; i < list->size(); ++i) {
      text += (i == 0 ? "" : ", ") + std::to_string((*list)[i]);
    }
    return text + "]";
  }
  return std::get<std::string>(value);
}

toml::table options_table(const OptionValues& values) {
  toml::table table;
  for (const auto& entry : values.values) {
    const std::string& key = entry.first;
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::vector<int64_t>>) {
            toml::array list;
            for (const int64_t x : v) list.push_back(x);
            table.insert(key, std::move(list));
          } else {
            table.insert(key, v);
          }
        },
        entry.second);
  }
  return table;
}

const char* option_type_name(tessera_option_type type) noexcept {
  switch (type) {
    case TESSERA_OPT_BOOL:
      return "bool";
    case TESSERA_OPT_INT:
      return "int";
    case TESSERA_OPT_FLOAT:
      return "float";
    case TESSERA_OPT_STRING:
      return "string";
    case TESSERA_OPT_INT_LIST:
      return "int list";
    default:
      return "unknown";
  }
}

}  // namespace tessera
