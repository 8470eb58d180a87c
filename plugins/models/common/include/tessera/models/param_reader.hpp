// Typed, range-checked reads of a model plugin's options (the [model] table,
// already checked against the declared keys and types by the host), with
// errors that name the model and the key.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::model {

// Every accessor throws tessera::Error (invalid argument) with "key '<key>'
// ..." for a value out of range; the host adds where the [model] table came
// from and the model's name ("run.toml: [model]: model 'gpt': key ...").
class ParamReader {
 public:
  explicit ParamReader(const sdk::Options& options) : options_(options) {}

  // An integer >= `min`.
  [[nodiscard]] int64_t integer(const char* key, int64_t min) const {
    const int64_t value = options_.get_int(key);
    if (value < min) fail(key, detail::concat("must be >= ", min, ", got ", value));
    return value;
  }
  // A list of integers each >= `min` (may be empty).
  [[nodiscard]] std::vector<int64_t> integers(const char* key, int64_t min) const {
    std::vector<int64_t> values = options_.get_int_list(key);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] < min) {
        fail(key, detail::concat("item ", i, " must be >= ", min, ", got ", values[i]));
      }
    }
    return values;
  }
  // A number > `above`.
  [[nodiscard]] double number(const char* key, double above) const {
    const double value = options_.get_float(key);
    if (!std::isfinite(value) || !(value > above)) {
      fail(key, detail::concat("must be > ", above, ", got ", value));
    }
    return value;
  }
  [[nodiscard]] bool boolean(const char* key) const { return options_.get_bool(key); }
  // One of `choices`.
  [[nodiscard]] std::string choice(const char* key,
                                   std::initializer_list<std::string_view> choices) const {
    std::string value = options_.get_string(key);
    for (const std::string_view c : choices) {
      if (c == value) return value;
    }
    std::string list;
    for (const std::string_view c : choices) list += (list.empty() ? "" : " | ") + std::string(c);
    fail(key, "must be one of " + list + ", got '" + value + "'");
  }
  // Throws naming the model and `key`.
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("key '", key, "' ", what));
  }

 private:
  const sdk::Options& options_;
};

}  // namespace tessera::model
