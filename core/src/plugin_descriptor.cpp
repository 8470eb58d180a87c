// Descriptor checks: what a host of this ABI needs from a plugin before it
// hands the plugin out.
#include "plugin_descriptor.hpp"

#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "tessera/c/backend.h"
#include "tessera/sdk/dtype.hpp"

namespace tessera::detail {
namespace {

// More declared options than any real plugin has; guards against reading far
// past a garbage `options` array.
constexpr uint32_t kMaxOptions = 1024;

bool is_identifier(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (const char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string check_options(const tessera_plugin_descriptor& d) {
  if (d.num_options == 0) return {};
  if (d.options == nullptr) {
    return fmt::format("descriptor declares {} options but its options array is NULL",
                       d.num_options);
  }
  if (d.num_options > kMaxOptions) {
    return fmt::format("descriptor declares {} options, more than the limit of {}", d.num_options,
                       kMaxOptions);
  }
  std::set<std::string_view> seen;
  for (uint32_t i = 0; i < d.num_options; ++i) {
    const tessera_option_decl& o = d.options[i];
    if (o.key == nullptr) return fmt::format("option {} has a NULL key", i);
    const std::string_view key = o.key;
    if (!is_identifier(key)) {
      return fmt::format("option {} has key '{}', which is not of the form [a-z0-9_]+", i, key);
    }
    if (!seen.insert(key).second) return fmt::format("option '{}' is declared twice", key);
    if (o.type < TESSERA_OPT_BOOL || o.type > TESSERA_OPT_STRING) {
      return fmt::format("option '{}' has unknown type {}", key, o.type);
    }
    if (o.default_value == nullptr) return fmt::format("option '{}' has a NULL default", key);
    if (o.help == nullptr) return fmt::format("option '{}' has NULL help text", key);
  }
  return {};
}

// Reason naming the first function of the ABI 1.0 backend table that is
// NULL, or an empty string when all are present.
std::string check_backend_functions(const tessera_backend_api& api) {
  struct Slot {
    const char* name;
    bool present;
  };
  const Slot slots[] = {
      {"create", api.create != nullptr},
      {"destroy", api.destroy != nullptr},
      {"connect", api.connect != nullptr},
      {"comm_rank", api.comm_rank != nullptr},
      {"comm_size", api.comm_size != nullptr},
      {"comm_split", api.comm_split != nullptr},
      {"comm_abort", api.comm_abort != nullptr},
      {"comm_destroy", api.comm_destroy != nullptr},
      {"post", api.post != nullptr},
      {"work_wait", api.work_wait != nullptr},
      {"work_test", api.work_test != nullptr},
      {"work_free", api.work_free != nullptr},
  };
  for (const Slot& slot : slots) {
    if (!slot.present) return fmt::format("backend api function '{}' is NULL", slot.name);
  }
  return {};
}

std::string check_api(const tessera_plugin_descriptor& d) {
  uint32_t api_size = 0;
  std::memcpy(&api_size, d.api, sizeof api_size);  // every table starts with its struct_size
  const std::size_t needed = min_api_size(d.kind);
  if (api_size < needed) {
    return fmt::format("{} api table struct_size {} is smaller than the {} bytes this host needs",
                       plugin_kind_name(d.kind), api_size, needed);
  }
  if (d.kind == TESSERA_KIND_BACKEND) {
    return check_backend_functions(*static_cast<const tessera_backend_api*>(d.api));
  }
  return {};
}

}  // namespace

const char* plugin_kind_name(int kind) noexcept {
  if (kind < 0 || kind >= TESSERA_KIND_COUNT) return nullptr;
  return kind_name(kind).data();  // a string literal, so NUL-terminated
}

std::size_t min_api_size(tessera_plugin_kind kind) noexcept {
  switch (kind) {
    case TESSERA_KIND_BACKEND:
      return offsetof(tessera_backend_api, work_free) + sizeof(void*);
    default:
      return sizeof(uint32_t);
  }
}

std::string check_descriptor(const tessera_plugin_descriptor& d, const std::string& file_kind,
                             const std::string& file_name, PluginRecord& record) {
  record.abi_major = d.abi_major;
  record.abi_minor = d.abi_minor;
  if (d.abi_major != TESSERA_ABI_MAJOR) {
    return fmt::format("ABI {}.{} is incompatible with host ABI {}.{}", d.abi_major, d.abi_minor,
                       TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
  }
  if (d.struct_size < TESSERA_PLUGIN_DESCRIPTOR_MIN_SIZE) {
    return fmt::format(
        "descriptor struct_size {} is smaller than the {} bytes this host needs (ABI {}.{})",
        d.struct_size, TESSERA_PLUGIN_DESCRIPTOR_MIN_SIZE, TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
  }
  const char* kind = plugin_kind_name(d.kind);
  if (kind == nullptr) {
    return fmt::format("descriptor kind {} is not a known plugin kind", d.kind);
  }
  record.kind = kind;
  if (d.version != nullptr) record.version = d.version;
  if (d.summary != nullptr) record.summary = d.summary;
  if (d.name != nullptr) record.name = d.name;
  if (file_kind != kind) {
    return fmt::format("descriptor kind '{}' does not match the file name's kind '{}'", kind,
                       file_kind);
  }
  if (d.name == nullptr) return "descriptor name is NULL";
  if (file_name != d.name) {
    return fmt::format("descriptor name '{}' does not match the file name's name '{}'", d.name,
                       file_name);
  }
  if (d.version == nullptr) return "descriptor version is NULL";
  if (d.api == nullptr) return "descriptor api table is NULL";
  if (std::string reason = check_options(d); !reason.empty()) return reason;
  return check_api(d);
}

}  // namespace tessera::detail
