// The message of an expected tessera::Error, for tests of error paths.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The tessera::Error `body` throws; fails the test (and returns an Error with
// status TESSERA_OK and no message) if it throws nothing or something else.
template <typename Body>
Error thrown_error(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tessera::Error, got: " << e.what();
    return Error(TESSERA_OK, "");
  }
  ADD_FAILURE() << "expected tessera::Error, nothing was thrown";
  return Error(TESSERA_OK, "");
}

// The message of the tessera::Error `body` throws ("" and a failed test if
// it throws nothing or something else).
template <typename Body>
std::string error_of(Body&& body) {
  return thrown_error(std::forward<Body>(body)).what();
}

// Checks that `text` (an error message, usually) mentions every one of
// `words`, naming each one missing.
inline void expect_mentions(const std::string& text, std::initializer_list<std::string> words) {
  for (const auto& w : words) {
    EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' missing from: " << text;
  }
}

}  // namespace tessera::test
