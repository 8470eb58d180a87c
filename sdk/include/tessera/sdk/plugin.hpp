// Plugin-side helpers shared by every plugin kind: the exception guard used by
// all C forwarders and the macro that emits the exported entry point.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>

#include "tessera/c/plugin.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk::detail {

// How guard() words a tessera::Error for the host.
enum class ErrorText {
  kWithLocation,  // what(): the message and TESSERA_CHECK's source location
  // The message alone, unless the status is INTERNAL (a bug, where the
  // location helps whoever fixes it): for calls whose errors are answers
  // to the user's configuration, such as a strategy's check().
  kForUser,
};

// Runs `fn` and converts anything it throws into a status code, reporting the
// message through the host. This is the only place exceptions are caught on
// the plugin side of the boundary.
template <typename Fn>
tessera_status guard(const tessera_host_api* host, Fn&& fn,
                     ErrorText text = ErrorText::kWithLocation) noexcept {
  const Host h(host);
  try {
    fn();
    return TESSERA_OK;
  } catch (const Error& e) {
    if (text == ErrorText::kForUser && e.status() != TESSERA_ERR_INTERNAL) {
      h.set_error(e.status(), e.message().c_str());
    } else {
      h.set_error(e.status(), e.what());
    }
    return e.status();
  } catch (const std::bad_alloc&) {
    h.set_error(TESSERA_ERR_OUT_OF_MEMORY, "out of memory");
    return TESSERA_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    h.set_error(TESSERA_ERR_INTERNAL, e.what());
    return TESSERA_ERR_INTERNAL;
  } catch (...) {
    h.set_error(TESSERA_ERR_INTERNAL, "unknown exception inside plugin");
    return TESSERA_ERR_INTERNAL;
  }
}

// A copy of a versioned C struct (one starting with uint32_t struct_size)
// from a caller that may have been built with a smaller version of it: the
// fields it lacks read as zero, and the copy's struct_size is this build's.
template <typename T>
T copy_versioned(const T* in) noexcept {
  T out{};
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof out));
  out.struct_size = sizeof out;
  return out;
}

// Pointer to and length of a plugin's option declarations; a registration
// macro accepts a static array or TESSERA_NO_OPTIONS.
template <unsigned N>
constexpr const tessera_option_decl* options_ptr(const tessera_option_decl (&decls)[N]) noexcept {
  return decls;
}
constexpr const tessera_option_decl* options_ptr(std::nullptr_t /*none*/) noexcept {
  return nullptr;
}
template <unsigned N>
constexpr uint32_t options_count(const tessera_option_decl (&/*decls*/)[N]) noexcept {
  return N;
}
constexpr uint32_t options_count(std::nullptr_t /*none*/) noexcept { return 0; }

}  // namespace tessera::sdk::detail

// Declares a plugin without options: `TESSERA_NO_OPTIONS` in place of the
// options array of a registration macro.
#define TESSERA_NO_OPTIONS nullptr

#define TESSERA_DETAIL_OPTIONS_PTR(options) ::tessera::sdk::detail::options_ptr(options)
#define TESSERA_DETAIL_OPTIONS_COUNT(options) ::tessera::sdk::detail::options_count(options)

// A tessera_plugin_descriptor initialiser for a plugin of `kind` whose
// interface table `api_ptr` has version api_major.api_minor. Used by the
// kind-specific registration macros.
#define TESSERA_DETAIL_DESCRIPTOR(kind, api_major, api_minor, name_str, version_str, summary_str, \
                                  options, api_ptr)                                               \
  {                                                                                               \
    sizeof(tessera_plugin_descriptor), TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR, kind, api_major,     \
        api_minor, name_str, version_str, summary_str, TESSERA_DETAIL_OPTIONS_PTR(options),       \
        TESSERA_DETAIL_OPTIONS_COUNT(options), 0, api_ptr                                         \
  }

// Emits the exported entry point returning `descriptor_expr`. Used by the
// kind-specific registration macros; not meant to be called directly.
#define TESSERA_DETAIL_DEFINE_ENTRY(descriptor_expr)                                  \
  extern "C" TESSERA_EXPORT const tessera_plugin_descriptor* tessera_plugin_entry() { \
    return &(descriptor_expr);                                                        \
  }
