// Typed reads of a model's [model] parameter table with errors that name the
// key and where it came from.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

namespace tessera::model {

// Reads keys of one model's parameter table. Every accessor throws
// tessera::Error (invalid argument) with "<where>: model '<model>' key
// '<key>' ..." when the key is missing (required ones), of the wrong type or
// out of range.
class ParamReader {
 public:
  ParamReader(const toml::table& table, std::string where, std::string model);

  // Throws naming the first key of the table that is not in `known`.
  void reject_unknown(std::initializer_list<std::string_view> known) const;
  // An integer >= `min`; `fallback` when absent (required when nullopt).
  [[nodiscard]] int64_t integer(std::string_view key, int64_t min,
                                std::optional<int64_t> fallback = std::nullopt) const;
  // An array of integers each >= `min` (required; may be empty).
  [[nodiscard]] std::vector<int64_t> integers(std::string_view key, int64_t min) const;
  // A boolean; `fallback` when absent.
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const;
  // One of `choices`; `fallback` when absent.
  [[nodiscard]] std::string choice(std::string_view key,
                                   std::initializer_list<std::string_view> choices,
                                   std::string_view fallback) const;

 private:
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;

  const toml::table& table_;
  std::string where_;
  std::string model_;
};

}  // namespace tessera::model
