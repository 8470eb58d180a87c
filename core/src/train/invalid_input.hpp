// Bad input found while planning a run or reading, writing and converting
// its checkpoints: an Error with TESSERA_ERR_INVALID_ARGUMENT.
#pragma once

#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::train {

[[noreturn]] inline void fail(const std::string& message) {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, message);
}

}  // namespace tessera::train
