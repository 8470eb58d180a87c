// Helpers shared by the C tables the host implements for strategy plugins
// (model, optimizer, state reader/writer): turning exceptions into a status
// plus the host-call error message, and C strings that outlive any model.
#pragma once

#include <exception>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <utility>

#include "tessera/c/common.h"
#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train::detail {

// Records "<describe()>: <reason>" for host last_error; never throws.
template <typename Describe>
void record_host_call_error(Describe&& describe, const char* reason) noexcept {
  try {
    const std::string what = std::forward<Describe>(describe)();
    set_host_call_error(what.empty() ? std::string(reason) : what + ": " + reason);
  } catch (...) {
    set_host_call_error(reason);  // no memory for the prefix: the reason alone
  }
}

// Runs `fn` (returning void) and maps what it throws to a status, leaving
// "<describe()>: <message>" for host last_error; `describe` (returning
// std::string) runs only on failure, so a successful call builds no text.
// Nothing escapes: a table function may return the result directly across
// the C boundary.
//   tessera::Error        -> its status
//   std::bad_alloc        -> TESSERA_ERR_OUT_OF_MEMORY
//   other std::exception  -> TESSERA_ERR_INTERNAL
//   anything else         -> TESSERA_ERR_INTERNAL ("unknown exception")
template <typename Describe, typename Fn>
tessera_status guard_host_call(Describe&& describe, Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return TESSERA_OK;
  } catch (const Error& e) {
    // A refusal is for the user: its message without the source location.
    const std::string message = e.status() == TESSERA_ERR_INTERNAL ? e.what() : e.message();
    record_host_call_error(describe, message.c_str());
    return e.status() == TESSERA_OK ? TESSERA_ERR_INTERNAL : e.status();
  } catch (const std::bad_alloc&) {
    record_host_call_error(describe, "out of memory");
    return TESSERA_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    record_host_call_error(describe, e.what());
    return TESSERA_ERR_INTERNAL;
  } catch (...) {
    record_host_call_error(describe, "unknown exception");
    return TESSERA_ERR_INTERNAL;
  }
}

// A NUL-terminated copy of `text` that stays valid until the process ends.
// Equal texts share one copy, so the table grows only with distinct names
// (parameter and slot names), never with the number of models built.
// Thread-safe; throws std::bad_alloc only.
inline const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> strings;  // node-based: c_str() never moves
  const std::lock_guard<std::mutex> lock(mutex);
  return strings.insert(text).first->c_str();
}

}  // namespace tessera::train::detail
