// The message of an expected tessera::Error, for tests of error paths.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The message of the tessera::Error `body` throws; fails the test (and
// returns "") if it throws nothing or something else.
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tessera::Error, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected tessera::Error, nothing was thrown";
  return "";
}

}  // namespace tessera::test
