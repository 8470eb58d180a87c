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

// The largest value of a size key (a width, a vocabulary, a sequence
// length): 2^40, past any memory, so that the products of sizes the models
// form stay far inside 64 bits.
inline constexpr int64_t kMostSize = int64_t{1} << 40;
// The most layers of a model: each is a unit, with contexts, a plan entry
// and bookkeeping of its own (real models have at most a few hundred).
inline constexpr int64_t kMostLayers = 65536;
// The most parameters a model may declare: 2^40 values, 4 TiB in f32.
inline constexpr double kMostParameters = 1099511627776.0;

// Every accessor throws tessera::Error (invalid argument) with "key '<key>'
// ..." for a value out of range; the host adds where the [model] table came
// from and the model's name ("run.toml: [model]: model 'gpt': key ...").
class ParamReader {
 public:
  explicit ParamReader(const sdk::Options& options) : options_(options) {}

  // An integer in [min, max].
  [[nodiscard]] int64_t integer(const char* key, int64_t min, int64_t max = kMostSize) const {
    const int64_t value = options_.get_int(key);
    if (value < min) fail(key, detail::concat("must be >= ", min, ", got ", value));
    if (value > max) fail(key, detail::concat("must be <= ", max, ", got ", value));
    return value;
  }
  // A list of at most `most` integers each in [min, kMostSize] (may be
  // empty).
  [[nodiscard]] std::vector<int64_t> integers(const char* key, int64_t min,
                                              int64_t most = kMostLayers) const {
    std::vector<int64_t> values = options_.get_int_list(key);
    if (static_cast<int64_t>(values.size()) > most) {
      fail(key, detail::concat("has ", values.size(), " items, more than ", most));
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] < min || values[i] > kMostSize) {
        fail(key, detail::concat("item ", i, " must be in [", min, ", ", kMostSize, "], got ",
                                 values[i]));
      }
    }
    return values;
  }
  // Refuses sizes that give the model more than kMostParameters
  // parameters: `count` (in double, exact to 2^53) is what `keys` make.
  void parameters(double count, std::string_view keys) const {
    if (count <= kMostParameters) return;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("keys ", keys, " make ", count, " parameters, more than 2^40 = ",
                               static_cast<int64_t>(kMostParameters), " (4 TiB in f32)"));
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
