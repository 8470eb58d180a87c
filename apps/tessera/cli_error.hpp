// Error type and exit codes shared by every `tessera` subcommand.
//
// A UsageError means the command line itself is wrong (unknown op, bad size,
// missing flag): the CLI exits with kExitUsage. Any other exception is a
// run-time failure (plugin missing, backend error, file not writable) and
// exits with kExitFailure. Both are reported as one line
// "tessera: error: <message>" on stderr.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace tessera::cli
