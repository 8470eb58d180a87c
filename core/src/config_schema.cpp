#include "config_schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "tessera/sdk/error.hpp"
#include "toml_text.hpp"

namespace tessera::detail {

const std::vector<SectionSchema>& config_schema() {
  static const std::vector<SectionSchema> schema = {
      {"run",
       {"world_size", "steps", "seed", "log_every", "metrics", "log_level", "memory_per_rank",
        "threads_per_rank", "device", "precision", "loss_scale", "loss_scale_window"}},
      {"plugins", {"paths", "allow"}},
      {"backend", {"name", "timeout_s", "check_collectives", "options"}, false, true},
      {"strategy", {"name", "options"}, false, true},
      {"compression", {"name", "options"}, false, true},
      {"model", {"name", "init"}, true},
      {"data", {"kind", "path", "batch_size", "micro_batches", "token_bytes"}},
      {"optimizer",
       {"name", "lr", "weight_decay", "grad_clip", "warmup_steps", "momentum", "beta1", "beta2",
        "eps"}},
      {"checkpoint", {"dir", "every", "resume", "format"}},
  };
  return schema;
}

const SectionSchema* find_section(std::string_view name) {
  for (const auto& section : config_schema()) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

namespace {

std::vector<std::string_view> section_names() {
  std::vector<std::string_view> names;
  for (const auto& section : config_schema()) names.push_back(section.name);
  return names;
}

bool has_key(const SectionSchema& schema, std::string_view key) {
  return std::find(schema.keys.begin(), schema.keys.end(), key) != schema.keys.end();
}

// For a key written outside any section: the section that has it.
std::string owning_section_hint(std::string_view key) {
  for (const auto& section : config_schema()) {
    if (has_key(section, key)) {
      return " (did you mean '" + std::string(section.name) + "." + std::string(key) + "'?)";
    }
  }
  return did_you_mean(key, section_names());
}

std::vector<std::string> split_dotted(std::string_view text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = text.find('.', start);
    parts.emplace_back(trim(text.substr(start, dot - start)));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

}  // namespace

// ---- Problems ----

std::string Problems::where(const toml::node* at) const {
  if (at != nullptr && from_override(*at)) return override_label(*at);
  if (at != nullptr && node_line(*at) > 0) return name_ + ":" + std::to_string(node_line(*at));
  return name_;
}

void Problems::add(const toml::node* at, std::string message) {
  const bool late = at != nullptr && from_override(*at);
  const uint32_t line = at != nullptr && !late ? node_line(*at) : 0;
  entries_.push_back(Entry{late, line, entries_.size(), where(at) + ": " + std::move(message)});
}

void Problems::add_override(const std::string& assignment, std::string message) {
  entries_.push_back(
      Entry{true, 0, entries_.size(), "--set " + assignment + ": " + std::move(message)});
}

void Problems::throw_if_any() const {
  if (entries_.empty()) return;
  std::vector<const Entry*> sorted;
  for (const auto& entry : entries_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->late, a->line, a->seq) < std::tie(b->late, b->line, b->seq);
  });
  std::string message;
  for (const Entry* entry : sorted) message += (message.empty() ? "" : "\n") + entry->text;
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, message);
}

// ---- Section ----

Section::Section(Problems& problems, toml::table& root, std::string_view name)
    : problems_(&problems), name_(name) {
  toml::node* node = root.get(name);
  if (node == nullptr) return;
  table_ = node->as_table();
  if (table_ == nullptr) {
    problems.add(node, "'" + name_ + "' must be a table ([" + name_ + "]), got " +
                           toml_type_phrase(node->type()));
  }
}

std::string Section::dotted(std::string_view key) const { return name_ + "." + std::string(key); }

const toml::node* Section::get(std::string_view key) const {
  return table_ != nullptr ? table_->get(key) : nullptr;
}

void Section::wrong_type(std::string_view key, const toml::node& node, const char* expected) {
  problems_->add(&node, "'" + dotted(key) + "' must be " + expected + ", got " +
                            toml_type_phrase(node.type()));
}

toml::table* Section::table(std::string_view key) {
  toml::node* node = table_ != nullptr ? table_->get(key) : nullptr;
  if (node == nullptr) return nullptr;
  if (node->as_table() == nullptr) wrong_type(key, *node, "a table");
  return node->as_table();
}

bool Section::read(std::string_view key, int64_t& out) {
  const toml::node* node = get(key);
  if (node == nullptr) return false;
  if (const auto* value = node->as_integer()) {
    out = value->get();
    return true;
  }
  wrong_type(key, *node, "an integer");
  return false;
}

bool Section::read(std::string_view key, double& out) {
  double value = 0.0;
  if (!read_number(key, value)) return false;
  if (!std::isfinite(value)) {
    problems_->add(get(key),
                   "'" + dotted(key) + "' must be a finite number, got " + format_float(value));
    return false;
  }
  out = value;
  return true;
}

bool Section::read_number(std::string_view key, double& out) {
  const toml::node* node = get(key);
  if (node == nullptr) return false;
  if (const auto* value = node->as_floating_point()) {
    out = value->get();
    return true;
  }
  if (const auto* value = node->as_integer()) {
    out = static_cast<double>(value->get());
    return true;
  }
  wrong_type(key, *node, "a number");
  return false;
}

bool Section::read(std::string_view key, bool& out) {
  const toml::node* node = get(key);
  if (node == nullptr) return false;
  if (const auto* value = node->as_boolean()) {
    out = value->get();
    return true;
  }
  wrong_type(key, *node, "a boolean (true or false)");
  return false;
}

bool Section::read(std::string_view key, std::string& out) {
  const toml::node* node = get(key);
  if (node == nullptr) return false;
  if (const auto* value = node->as_string()) {
    out = value->get();
    return true;
  }
  wrong_type(key, *node, "a string");
  return false;
}

bool Section::read_strings(std::string_view key,
                           std::vector<std::pair<std::string, const toml::node*>>& out) {
  const toml::node* node = get(key);
  if (node == nullptr) return false;
  const auto* array = node->as_array();
  if (array == nullptr) {
    wrong_type(key, *node, "an array of strings");
    return false;
  }
  bool ok = true;
  out.clear();
  for (const toml::node& element : *array) {
    if (const auto* value = element.as_string()) {
      out.emplace_back(value->get(), &element);
    } else {
      problems_->add(&element, "'" + dotted(key) + "' must contain only strings, got " +
                                   toml_type_phrase(element.type()));
      ok = false;
    }
  }
  return ok;
}

void Section::require(std::string_view key, bool ok, const std::string& message) {
  if (!ok) problems_->add(get(key), "'" + dotted(key) + "' " + message);
}

void Section::at_least(std::string_view key, int64_t value, int64_t min) {
  require(key, value >= min,
          "must be >= " + std::to_string(min) + ", got " + std::to_string(value));
}

void Section::at_most(std::string_view key, int64_t value, int64_t max) {
  require(key, value <= max,
          "must be <= " + std::to_string(max) + ", got " + std::to_string(value));
}

void Section::at_least(std::string_view key, double value, double min) {
  require(key, value >= min, "must be >= " + format_float(min) + ", got " + format_float(value));
}

void Section::above(std::string_view key, double value, double bound) {
  require(key, value > bound, "must be > " + format_float(bound) + ", got " + format_float(value));
}

void Section::one_of(std::string_view key, const std::string& value,
                     std::initializer_list<std::string_view> allowed) {
  one_of(key, value, std::vector<std::string_view>(allowed));
}

void Section::one_of(std::string_view key, const std::string& value,
                     const std::vector<std::string_view>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (const auto name : allowed) list += (list.empty() ? "" : ", ") + std::string(name);
  require(key, false,
          "must be one of " + list + "; got '" + value + "'" + did_you_mean(value, allowed));
}

// ---- unknown keys and overrides ----

void check_unknown_keys(const toml::table& root, Problems& problems) {
  for (const auto& [key, node] : root) {
    const SectionSchema* schema = find_section(key.str());
    if (schema == nullptr) {
      if (node.is_table()) {
        problems.add(&node, "unknown section '" + std::string(key.str()) + "'" +
                                did_you_mean(key.str(), section_names()));
      } else {
        problems.add(&node, "unknown key '" + std::string(key.str()) + "' outside any section" +
                                owning_section_hint(key.str()));
      }
      continue;
    }
    const toml::table* table = node.as_table();
    if (table == nullptr || schema->open) continue;  // a non-table is reported by Section
    for (const auto& [sub, value] : *table) {
      if (has_key(*schema, sub.str())) continue;
      problems.add(&value, "unknown key '" + std::string(key.str()) + "." + std::string(sub.str()) +
                               "'" + did_you_mean(sub.str(), schema->keys));
    }
  }
}

void apply_override(toml::table& root, const std::string& assignment, Problems& problems) {
  const size_t eq = assignment.find('=');
  const std::vector<std::string> parts =
      split_dotted(std::string_view(assignment).substr(0, std::min(eq, assignment.size())));
  const bool empty_part =
      std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); });
  if (eq == std::string::npos || parts.size() < 2 || empty_part) {
    problems.add_override(assignment, "expected section.key=value");
    return;
  }
  std::string dotted = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) dotted += "." + parts[i];

  const SectionSchema* schema = find_section(parts[0]);
  if (schema == nullptr) {
    problems.add_override(
        assignment, "unknown section '" + parts[0] + "'" + did_you_mean(parts[0], section_names()));
    return;
  }
  const bool known = has_key(*schema, parts[1]);
  if (!known && !schema->open) {
    problems.add_override(assignment, "unknown key '" + parts[0] + "." + parts[1] + "'" +
                                          did_you_mean(parts[1], schema->keys));
    return;
  }
  // Depth: section.key everywhere; section.options.key in plugin sections;
  // any depth below an extra key of an open section (model parameters).
  const bool options_key = schema->has_options && parts[1] == "options";
  const size_t max_depth = options_key ? 3 : (known ? 2 : SIZE_MAX);
  if (parts.size() > max_depth) {
    problems.add_override(assignment, "key '" + dotted + "' is too deep; '" + parts[0] + "." +
                                          parts[1] + "' has no sub-keys");
    return;
  }

  // Walk down, creating tables that do not exist yet.
  toml::table* table = &root;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (i == 0 ? "" : ".") + parts[i];
    toml::node* next = table->get(parts[i]);
    if (next == nullptr) {
      table = table->insert(parts[i], toml::table{}).first->second.as_table();
    } else if (next->is_table()) {
      table = next->as_table();
    } else {
      problems.add_override(
          assignment, "'" + walked + "' is " + toml_type_phrase(next->type()) + ", not a table");
      return;
    }
  }
  const std::string_view text = trim(std::string_view(assignment).substr(eq + 1));
  if (integer_out_of_range(text)) {
    problems.add_override(assignment, "'" + dotted + "' = " + std::string(text) +
                                          " is out of range for an integer " +
                                          std::string(kIntegerRange));
    return;
  }
  toml::table parsed = parse_assignment_value(text, "--set " + assignment);
  table->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
}

}  // namespace tessera::detail
