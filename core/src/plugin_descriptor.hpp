// Checks of a plugin's descriptor against this host's ABI and the name of the
// file it came from. Used by the registry after the entry point returned.
#pragma once

#include <cstddef>
#include <string>

#include "tessera/c/plugin.h"
#include "tessera/core/plugin_registry.hpp"

namespace tessera::detail {

// Name of a plugin kind ("backend", "strategy", ...), or nullptr when `kind`
// is not one of TESSERA_KIND_*.
const char* plugin_kind_name(int kind) noexcept;

// Interface major this host speaks for plugins of `kind`; 0 when it has no
// interface for the kind yet.
int kind_interface_major(int kind) noexcept;

// Smallest `struct_size` of the interface table of `kind` that this host can
// use: for backends, the 1.0 table up to and including work_free; for
// strategies and models, the 2.0 table; otherwise just its struct_size field.
std::size_t min_api_size(tessera_plugin_kind kind) noexcept;

// Checks `descriptor` in this order: ABI major, descriptor struct_size, kind
// in range and equal to `file_kind`, name present and equal to `file_name`,
// version and api present, declared options well formed (non-NULL key of
// [a-z0-9_]+, unique, known type, default and help present), the interface
// version of the kind (a major this host speaks), and the api table's
// struct_size and required functions (backend, strategy and model tables). Copies
// what it could read into `record` (ABI and interface versions, kind, name,
// version, summary) so a rejected plugin still shows what it claimed.
// Returns the reason for the first failed check, or an empty string when the
// descriptor is acceptable. Only reads fields that the descriptor's
// struct_size says exist; never throws for a bad descriptor.
std::string check_descriptor(const tessera_plugin_descriptor& descriptor,
                             const std::string& file_kind, const std::string& file_name,
                             PluginRecord& record);

// Reads the memory that check_descriptor reads of `descriptor` (its fields,
// strings, options and interface table, under the same conditions) without
// allocating or checking anything: for the probe process, where a garbage
// pointer in a descriptor should crash the probe rather than the host.
void touch_descriptor(const tessera_plugin_descriptor& descriptor) noexcept;

}  // namespace tessera::detail
