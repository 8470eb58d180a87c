// Descriptor checks: what a host of this ABI needs from a plugin before it
// hands the plugin out.
#include "plugin_descriptor.hpp"

#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "tessera/c/backend.h"
#include "tessera/c/compressor.h"
#include "tessera/c/model.h"
#include "tessera/c/selector.h"
#include "tessera/c/strategy.h"
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
    if (o.type < TESSERA_OPT_BOOL || o.type > TESSERA_OPT_INT_LIST) {
      return fmt::format("option '{}' has unknown type {}", key, o.type);
    }
    if (o.default_value == nullptr) return fmt::format("option '{}' has a NULL default", key);
    if (o.help == nullptr) return fmt::format("option '{}' has NULL help text", key);
  }
  return {};
}

// A function of an interface table: its name and whether it is non-NULL.
struct Slot {
  const char* name;
  bool present;
};

// Reason naming the first required function of a `kind` table that is NULL,
// or an empty string when all are present.
template <std::size_t N>
std::string first_missing(const char* kind, const Slot (&slots)[N]) {
  for (const Slot& slot : slots) {
    if (!slot.present) return fmt::format("{} api function '{}' is NULL", kind, slot.name);
  }
  return {};
}

// The functions of backend interface 1.0 (raw_post, 1.2, may be NULL).
std::string check_backend_functions(const void* table) {
  const auto& api = *static_cast<const tessera_backend_api*>(table);
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
  return first_missing("backend", slots);
}

// The functions of strategy interface 2.0 (all required).
std::string check_strategy_functions(const void* table) {
  const auto& api = *static_cast<const tessera_strategy_api*>(table);
  const Slot slots[] = {
      {"check", api.check != nullptr},     {"create", api.create != nullptr},
      {"destroy", api.destroy != nullptr}, {"load", api.load != nullptr},
      {"step", api.step != nullptr},       {"save", api.save != nullptr},
  };
  return first_missing("strategy", slots);
}

// The functions of model interface 2.0 (all required; a unit that cannot
// split its backward says so through the call's status).
std::string check_model_functions(const void* table) {
  const auto& api = *static_cast<const tessera_model_api*>(table);
  const Slot slots[] = {
      {"create", api.create != nullptr},
      {"destroy", api.destroy != nullptr},
      {"data_spec", api.data_spec != nullptr},
      {"num_units", api.num_units != nullptr},
      {"unit_name", api.unit_name != nullptr},
      {"unit_flags", api.unit_flags != nullptr},
      {"num_params", api.num_params != nullptr},
      {"param_info", api.param_info != nullptr},
      {"unit_cost", api.unit_cost != nullptr},
      {"init_params", api.init_params != nullptr},
      {"context_create", api.context_create != nullptr},
      {"context_destroy", api.context_destroy != nullptr},
      {"context_bytes", api.context_bytes != nullptr},
      {"forward", api.forward != nullptr},
      {"backward", api.backward != nullptr},
      {"backward_input", api.backward_input != nullptr},
      {"backward_weight", api.backward_weight != nullptr},
  };
  return first_missing("model", slots);
}

// The functions of selector interface 1.0 (all required).
std::string check_selector_functions(const void* table) {
  const auto& api = *static_cast<const tessera_selector_api*>(table);
  const Slot slots[] = {{"select", api.select != nullptr}};
  return first_missing("selector", slots);
}

// The functions of compressor interface 1.0 (all required: the kind decides
// which of encode/decode and reduce a strategy calls, and a table has them
// all).
std::string check_compressor_functions(const void* table) {
  const auto& api = *static_cast<const tessera_compressor_api*>(table);
  const Slot slots[] = {
      {"create", api.create != nullptr},
      {"destroy", api.destroy != nullptr},
      {"kind", api.kind != nullptr},
      {"wire_dtype", api.wire_dtype != nullptr},
      {"bucket_create", api.bucket_create != nullptr},
      {"bucket_destroy", api.bucket_destroy != nullptr},
      {"encoded_bytes", api.encoded_bytes != nullptr},
      {"encode", api.encode != nullptr},
      {"decode", api.decode != nullptr},
      {"reduce", api.reduce != nullptr},
  };
  return first_missing("compressor", slots);
}

// What this host supports of one plugin kind's interface: the major it
// speaks (any minor of it), the smallest table it can use and the check of
// that table's required functions. major 0: no interface for the kind yet.
struct KindInterface {
  int major;
  std::size_t min_size;
  std::string (*check_functions)(const void* table);
};

KindInterface kind_interface(tessera_plugin_kind kind) noexcept {
  switch (kind) {
    case TESSERA_KIND_BACKEND:
      return {TESSERA_BACKEND_API_MAJOR, offsetof(tessera_backend_api, work_free) + sizeof(void*),
              &check_backend_functions};
    case TESSERA_KIND_STRATEGY:
      return {TESSERA_STRATEGY_API_MAJOR, offsetof(tessera_strategy_api, save) + sizeof(void*),
              &check_strategy_functions};
    case TESSERA_KIND_MODEL:
      return {TESSERA_MODEL_API_MAJOR, offsetof(tessera_model_api, backward_weight) + sizeof(void*),
              &check_model_functions};
    case TESSERA_KIND_SELECTOR:
      return {TESSERA_SELECTOR_API_MAJOR, offsetof(tessera_selector_api, select) + sizeof(void*),
              &check_selector_functions};
    case TESSERA_KIND_COMPRESSOR:
      return {TESSERA_COMPRESSOR_API_MAJOR,
              offsetof(tessera_compressor_api, reduce) + sizeof(void*),
              &check_compressor_functions};
    default:
      return {0, sizeof(uint32_t), nullptr};
  }
}

// Refuses an interface version this host does not speak, naming both.
std::string check_interface_version(const tessera_plugin_descriptor& d) {
  const char* kind = plugin_kind_name(d.kind);
  const InterfaceVersion v = interface_version(d);
  const KindInterface supported = kind_interface(d.kind);
  if (supported.major == 0) {
    return fmt::format("{} interface {}.{}: this host has no {} interface yet", kind, v.major,
                       v.minor, kind);
  }
  if (v.major == supported.major) return {};
  return fmt::format("{} interface {}.{} is not supported: this host speaks {} {}.x ({})", kind,
                     v.major, v.minor, kind, supported.major,
                     v.major < supported.major ? "rebuild the plugin against the current SDK"
                                               : "the plugin is newer than this host");
}

std::string check_api(const tessera_plugin_descriptor& d) {
  if (std::string reason = check_interface_version(d); !reason.empty()) return reason;
  uint32_t api_size = 0;
  std::memcpy(&api_size, d.api, sizeof api_size);  // every table starts with its struct_size
  const KindInterface supported = kind_interface(d.kind);
  if (api_size < supported.min_size) {
    return fmt::format("{} api table struct_size {} is smaller than the {} bytes this host needs",
                       plugin_kind_name(d.kind), api_size, supported.min_size);
  }
  return supported.check_functions != nullptr ? supported.check_functions(d.api) : std::string();
}

}  // namespace

int kind_interface_major(int kind) noexcept { return kind_interface(kind).major; }

const char* plugin_kind_name(int kind) noexcept {
  if (kind < 0 || kind >= TESSERA_KIND_COUNT) return nullptr;
  return kind_name(kind).data();  // a string literal, so NUL-terminated
}

std::size_t min_api_size(tessera_plugin_kind kind) noexcept {
  return kind_interface(kind).min_size;
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
  const InterfaceVersion api_version = interface_version(d);
  record.api_major = api_version.major;
  record.api_minor = api_version.minor;
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

void touch_descriptor(const tessera_plugin_descriptor& d) noexcept {
  volatile std::size_t sink = 0;
  const auto touch = [&sink](const char* text) {
    if (text != nullptr) sink = sink + std::strlen(text);
  };
  if (d.abi_major != TESSERA_ABI_MAJOR || d.struct_size < TESSERA_PLUGIN_DESCRIPTOR_MIN_SIZE ||
      plugin_kind_name(d.kind) == nullptr) {
    return;
  }
  sink = sink + static_cast<std::size_t>(interface_version(d).major);
  touch(d.version);
  touch(d.summary);
  touch(d.name);
  if (d.options != nullptr && d.num_options <= kMaxOptions) {
    for (uint32_t i = 0; i < d.num_options; ++i) {
      const tessera_option_decl& o = d.options[i];
      if (o.key == nullptr) return;
      touch(o.key);
      if (o.type < TESSERA_OPT_BOOL || o.type > TESSERA_OPT_INT_LIST) return;
      sink = sink + static_cast<std::size_t>(o.default_value != nullptr) +
             static_cast<std::size_t>(o.help != nullptr);
    }
  }
  const KindInterface supported = kind_interface(d.kind);
  if (d.api == nullptr || supported.major == 0 || interface_version(d).major != supported.major) {
    return;
  }
  uint32_t api_size = 0;
  std::memcpy(&api_size, d.api, sizeof api_size);
  if (api_size < supported.min_size) return;
  const auto* table = static_cast<const volatile unsigned char*>(d.api);
  for (std::size_t i = 0; i < supported.min_size; ++i) sink = sink + table[i];
}

}  // namespace tessera::detail

namespace tessera {

InterfaceVersion interface_version(const tessera_plugin_descriptor& d) noexcept {
  // Before ABI 1.3 the two fields were one zero `reserved0`, and the whole
  // ABI had one version: a table of then was version 1.<abi_minor> of its kind.
  if (d.abi_major == 1 && d.abi_minor < 3) return {1, d.abi_minor};
  return {d.api_major, d.api_minor};
}

std::string supported_interfaces() {
  std::string text;
  for (int kind = 0; kind < TESSERA_KIND_COUNT; ++kind) {
    const int major = detail::kind_interface_major(kind);
    if (!text.empty()) text += ", ";
    text += detail::plugin_kind_name(kind);
    text += major == 0 ? std::string(" none yet") : fmt::format(" {}.x", major);
  }
  return text;
}

}  // namespace tessera
