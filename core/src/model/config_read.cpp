// Typed reads of a model's parameter table (see config_read.hpp).
#include "tessera/core/model/config_read.hpp"

#include <algorithm>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::model {

ParamReader::ParamReader(const toml::table& table, std::string where, std::string model)
    : table_(table), where_(std::move(where)), model_(std::move(model)) {}

void ParamReader::fail(std::string_view key, const std::string& what) const {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              detail::concat(where_.empty() ? std::string("[model]") : where_, ": model '", model_,
                             "' key '", key, "' ", what));
}

void ParamReader::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, node] : table_) {
    const std::string_view k = key.str();
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (const auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
      fail(k, "is unknown (known keys: " + list + ")");
    }
  }
}

int64_t ParamReader::integer(std::string_view key, int64_t min,
                             std::optional<int64_t> fallback) const {
  const toml::node* node = table_.get(key);
  if (node == nullptr) {
    if (fallback) return *fallback;
    fail(key, "is missing");
  }
  const auto value = node->value<int64_t>();
  if (!value || !node->is_integer()) fail(key, "must be an integer");
  if (*value < min) fail(key, detail::concat("must be >= ", min, ", got ", *value));
  return *value;
}

std::vector<int64_t> ParamReader::integers(std::string_view key, int64_t min) const {
  const toml::node* node = table_.get(key);
  if (node == nullptr) fail(key, "is missing");
  const toml::array* array = node->as_array();
  if (array == nullptr) fail(key, "must be an array of integers");
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& item = *array->get(i);
    if (!item.is_integer()) fail(key, detail::concat("item ", i, " must be an integer"));
    const int64_t v = *item.value<int64_t>();
    if (v < min) fail(key, detail::concat("item ", i, " must be >= ", min, ", got ", v));
    out.push_back(v);
  }
  return out;
}

bool ParamReader::boolean(std::string_view key, bool fallback) const {
  const toml::node* node = table_.get(key);
  if (node == nullptr) return fallback;
  if (!node->is_boolean()) fail(key, "must be a boolean");
  return *node->value<bool>();
}

std::string ParamReader::choice(std::string_view key,
                                std::initializer_list<std::string_view> choices,
                                std::string_view fallback) const {
  const toml::node* node = table_.get(key);
  if (node == nullptr) return std::string(fallback);
  if (!node->is_string()) fail(key, "must be a string");
  std::string value = *node->value<std::string>();
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string list;
    for (const auto c : choices) list += (list.empty() ? "" : " | ") + std::string(c);
    fail(key, "must be one of " + list + ", got '" + value + "'");
  }
  return value;
}

}  // namespace tessera::model
