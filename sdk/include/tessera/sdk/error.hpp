// Exceptions used on each side of the plugin boundary (never across it).
//
// Inside a plugin, throw tessera::Error (or use TESSERA_CHECK); the SDK's
// forwarders turn it into a status code plus message at the C boundary. On the
// host side the core turns a failed status back into the same exception type.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "tessera/c/common.h"

namespace tessera {

// Human-readable name of a status code ("timeout", "peer lost", ...).
inline const char* status_name(tessera_status status) noexcept {
  switch (status) {
    case TESSERA_OK:
      return "ok";
    case TESSERA_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case TESSERA_ERR_UNSUPPORTED:
      return "unsupported";
    case TESSERA_ERR_TIMEOUT:
      return "timeout";
    case TESSERA_ERR_PEER_LOST:
      return "peer lost";
    case TESSERA_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case TESSERA_ERR_MISMATCH:
      return "mismatch";
    case TESSERA_ERR_INTERNAL:
      return "internal error";
    case TESSERA_ERR_IN_PROGRESS:
      return "in progress";
    default:
      return "unknown status";
  }
}

// An error with the status code it maps to at the C boundary, and
// optionally the source location that raised it (TESSERA_CHECK's file:line).
// what() is the message followed by " (<location>)" when there is one;
// message() is the message alone.
class Error : public std::runtime_error {
 public:
  Error(tessera_status status, const std::string& message)
      : std::runtime_error(message), status_(status), message_size_(message.size()) {}
  Error(tessera_status status, const std::string& message, const std::string& location)
      : std::runtime_error(location.empty() ? message : message + " (" + location + ")"),
        status_(status),
        message_size_(message.size()) {}
  [[nodiscard]] tessera_status status() const noexcept { return status_; }
  // The message without the source location.
  [[nodiscard]] std::string message() const { return {what(), message_size_}; }

 private:
  tessera_status status_;
  std::size_t message_size_;  // what() starts with the message
};

namespace detail {
// Concatenates arguments with operator<< (no dependency on fmt, so the SDK
// works with any standard library).
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}
}  // namespace detail

}  // namespace tessera

// Throws tessera::Error(status, message, "file:line") unless `cond` holds:
// what() is "<message> (file:line)". The message is built from the remaining
// arguments with operator<<. (A strategy's check() reports the message
// without the location: see StrategyAdapter::check in strategy.hpp.)
#define TESSERA_CHECK(cond, status, ...)                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      throw ::tessera::Error((status), ::tessera::detail::concat(__VA_ARGS__),    \
                             ::tessera::detail::concat(__FILE__, ":", __LINE__)); \
    }                                                                             \
  } while (0)
