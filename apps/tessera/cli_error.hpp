// Error type and exit codes shared by every `tessera` subcommand.
//
// A UsageError means the command line itself is wrong (unknown op, bad size,
// missing flag): the CLI exits with kExitUsage. Any other exception is a
// run-time failure (plugin missing, backend error, file not writable) and
// exits with kExitFailure. Both are reported as one line
// "tessera: error: <message>" on stderr.
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Thrown for invalid command-line arguments; `what()` names the flag and the
// offending value.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// Runs `body` and returns what it returns. Running out of memory
// (std::bad_alloc, or a tessera::Error with TESSERA_ERR_OUT_OF_MEMORY from a
// plugin or a rank) is rethrown as a tessera::Error whose message ends with
// " (<hint>)": what the user of this command can change. Whoever allocates
// says how much and for what; the command knows which knobs set it.
template <typename Body>
decltype(auto) with_memory_hint(const std::string& hint, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    throw Error(TESSERA_ERR_OUT_OF_MEMORY, "out of memory (" + hint + ")");
  } catch (const Error& e) {
    if (e.status() != TESSERA_ERR_OUT_OF_MEMORY) throw;
    throw Error(TESSERA_ERR_OUT_OF_MEMORY, std::string(e.what()) + " (" + hint + ")");
  }
}

}  // namespace tessera::cli
