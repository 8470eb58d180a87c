// The host's handle on a compressor plugin (see compressor_host.hpp).
#include "tessera/core/train/compressor_host.hpp"

#include <span>

#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {

CompressorPlugin::CompressorPlugin(const PluginRegistry& registry, const std::string& name,
                                   const toml::table* options, const std::string& where)
    : plugin_(registry.get(TESSERA_KIND_COMPRESSOR, name)),
      api_(static_cast<const tessera_compressor_api*>(plugin_->descriptor().api)),
      name_(name) {
  // The registry checked the table's version, size and functions.
  const auto& d = plugin_->descriptor();
  options_ = resolve_options(std::span<const tessera_option_decl>(d.options, d.num_options),
                             options, where);
}

std::unique_ptr<CompressorPlugin::Instance> CompressorPlugin::create() const {
  tessera_compressor* c = nullptr;
  throw_if_failed(api_->create(plugin_->host().api(), &options_, &c),
                  "compressor '" + name_ + "' (" + path().string() + ") refused its options");
  TESSERA_CHECK(c != nullptr, TESSERA_ERR_INTERNAL, "compressor '", name_,
                "' returned no compressor from create");
  return std::make_unique<Instance>(api_, c);
}

}  // namespace tessera::train
