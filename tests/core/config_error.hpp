// The message of the error parse_config throws for a config text and its
// --set overrides, for the tests of config errors.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The error must be TESSERA_ERR_INVALID_ARGUMENT; "" and a failed test if
// parsing succeeds.
inline std::string config_error(const std::string& text,
                                const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_config(text, "run.toml", overrides);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return {};
}

}  // namespace tessera::test
