// Private to the config loader: the known sections and keys, the collector
// of problems (each with file and line, or the override that caused it),
// typed reads of one section, and --set overrides.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

namespace tessera::detail {

// A section of the config and the keys it accepts. An open section (model)
// accepts any other key as well.
struct SectionSchema {
  std::string_view name;
  std::vector<std::string_view> keys;
  bool open = false;
  bool has_options = false;  // a plugin section with an "options" sub-table
};

// Every section, in the order the documentation lists them.
const std::vector<SectionSchema>& config_schema();

// The schema of section `name`, or nullptr.
const SectionSchema* find_section(std::string_view name);

// Problems found while loading one config. Every problem is kept so the user
// sees all of them at once; throw_if_any reports them in file order (lines of
// the file first, then overrides in the order given).
class Problems {
 public:
  explicit Problems(std::string name) : name_(std::move(name)) {}

  // The display name of the file ("run.toml").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  // Where `at` was written: its override label ("--set run.steps=5"), else
  // file and line ("run.toml:4"), else the file alone (at == nullptr or no
  // line known).
  [[nodiscard]] std::string where(const toml::node* at) const;

  // A problem at `at`, located as where() says.
  void add(const toml::node* at, std::string message);

  // A problem with the override `assignment` itself ("--set <assignment>").
  void add_override(const std::string& assignment, std::string message);

  // Throws tessera::Error(TESSERA_ERR_INVALID_ARGUMENT) whose message has
  // one "<where>: <problem>" line per problem; does nothing if none.
  void throw_if_any() const;

 private:
  struct Entry {
    bool late;      // from an override
    uint32_t line;  // 0 when unknown
    size_t seq;     // order of discovery
    std::string text;
  };
  std::string name_;
  std::vector<Entry> entries_;
};

// Typed reads of one section of the parsed document. Every read checks the
// type (an integer is accepted where a float is expected) and records a
// problem naming the dotted key when it is wrong. A missing section or key
// leaves the output untouched.
class Section {
 public:
  // Looks up [name] in `root`; a non-table value there is a problem.
  Section(Problems& problems, toml::table& root, std::string_view name);

  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  [[nodiscard]] Problems& problems() const noexcept { return *problems_; }
  // The section's table, or nullptr when it is absent.
  [[nodiscard]] toml::table* table() const noexcept { return table_; }
  // The section's node, for problems about the section as a whole.
  [[nodiscard]] const toml::node* node() const noexcept { return table_; }
  // The value of `key`, or nullptr.
  [[nodiscard]] const toml::node* get(std::string_view key) const;
  // Where `key` was written (Problems::where), for a check made later.
  [[nodiscard]] std::string where(std::string_view key) const { return problems_->where(get(key)); }
  // The sub-table `key`, or nullptr when absent (or not a table: a problem).
  toml::table* table(std::string_view key);

  // Each returns true when the key is present with the right type. A float
  // must be finite: inf and nan are refused ("must be a finite number").
  bool read(std::string_view key, int64_t& out);
  bool read(std::string_view key, double& out);
  // Any float, inf and nan included, for a key that words its own range.
  bool read_number(std::string_view key, double& out);
  bool read(std::string_view key, bool& out);
  bool read(std::string_view key, std::string& out);
  // An array of strings; each string is paired with its node.
  bool read_strings(std::string_view key,
                    std::vector<std::pair<std::string, const toml::node*>>& out);

  // Records "'<section>.<key>' <message>" at the key when `ok` is false.
  void require(std::string_view key, bool ok, const std::string& message);
  void at_least(std::string_view key, int64_t value, int64_t min);
  void at_most(std::string_view key, int64_t value, int64_t max);
  void at_least(std::string_view key, double value, double min);
  void above(std::string_view key, double value, double bound);
  void one_of(std::string_view key, const std::string& value,
              std::initializer_list<std::string_view> allowed);
  void one_of(std::string_view key, const std::string& value,
              const std::vector<std::string_view>& allowed);

 private:
  [[nodiscard]] std::string dotted(std::string_view key) const;
  void wrong_type(std::string_view key, const toml::node& node, const char* expected);

  Problems* problems_;
  std::string name_;
  toml::table* table_ = nullptr;
};

// Records a problem for every unknown section and every unknown key of a
// known, closed section, with a suggestion when one is close.
void check_unknown_keys(const toml::table& root, Problems& problems);

// Applies one "section.key=value" (or "section.options.key=value", or
// "model.<key...>=value") to `root`. The value is a TOML literal, or a
// string when it does not parse as one; its nodes carry the label
// "--set <assignment>". A malformed assignment, an unknown section or key,
// or an integer literal outside the 64-bit range is recorded as a problem
// and not applied.
void apply_override(toml::table& root, const std::string& assignment, Problems& problems);

}  // namespace tessera::detail
