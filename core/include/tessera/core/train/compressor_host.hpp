// The host's handle on a gradient compressor plugin ([compression] in the
// config) and on one rank's compressor object, which the host hands to the
// strategy in its environment (strategy interface 2.4).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <toml++/toml.h>

#include "tessera/c/compressor.h"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

namespace tessera::train {

class CompressorPlugin {
 public:
  // Loads compressor `name` from `registry` and checks `options` (the
  // [compression.options] table, may be null) against what it declares.
  // Throws tessera::Error naming `where`, the key and the plugin for bad
  // options, and listing the installed compressors for an unknown name.
  CompressorPlugin(const PluginRegistry& registry, const std::string& name,
                   const toml::table* options, const std::string& where);

  // One rank's compressor: created on the rank's thread, destroyed with
  // this object (before the plugin is unloaded).
  class Instance {
   public:
    Instance(const tessera_compressor_api* api, tessera_compressor* c) noexcept
        : api_(api), c_(c) {}
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;
    ~Instance() { api_->destroy(c_); }
    [[nodiscard]] const tessera_compressor_api* api() const noexcept { return api_; }
    [[nodiscard]] tessera_compressor* get() const noexcept { return c_; }

   private:
    const tessera_compressor_api* api_;
    tessera_compressor* c_;
  };
  // Calls the plugin's create. Throws tessera::Error with the plugin's
  // message (naming the plugin) when it refuses its options.
  [[nodiscard]] std::unique_ptr<Instance> create() const;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return plugin_->path(); }
  [[nodiscard]] const OptionValues& options() const noexcept { return options_; }
  [[nodiscard]] const tessera_compressor_api* api() const noexcept { return api_; }
  [[nodiscard]] const LoadedPlugin& plugin() const noexcept { return *plugin_; }

 private:
  std::shared_ptr<LoadedPlugin> plugin_;
  const tessera_compressor_api* api_;
  std::string name_;
  OptionValues options_;
};

}  // namespace tessera::train
