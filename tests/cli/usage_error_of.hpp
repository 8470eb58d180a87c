// The message of the UsageError a callable throws, for tests of the CLI's
// refusals.
#pragma once

#include <string>
#include <utility>

#include "cli_error.hpp"

namespace tessera::cli::test {

// The message of the UsageError `fn` throws ("" if it throws none).
template <typename Fn>
std::string usage_error_of(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace tessera::cli::test
