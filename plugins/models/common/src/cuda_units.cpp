// Loading the CUDA units' module (see tessera/models/cuda_units.hpp).
#include "tessera/models/cuda_units.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "tessera/sdk/error.hpp"

extern "C" {
using TesseraCudaUnitsEntry = const tessera::model::cuda::UnitFactory* (*)();
}

namespace tessera::model::cuda {
namespace {

constexpr const char* kModule = "libtessera_cuda_units.so";
#define TESSERA_STRINGIFY_INNER(x) #x
#define TESSERA_STRINGIFY(x) TESSERA_STRINGIFY_INNER(x)

// Where this code was loaded from: the model plugin that links it.
std::filesystem::path own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  return std::filesystem::path(info.dli_fname).parent_path();
}

struct Loaded {
  const UnitFactory* factory = nullptr;
  std::string error;
};

Loaded load() {
  Loaded loaded;
  const std::filesystem::path beside = own_directory() / "cuda" / kModule;
  std::string tried;
  void* handle = nullptr;
  for (const std::string& candidate : {beside.string(), std::string(kModule)}) {
    // Kept for the life of the process: units made by it may live that long.
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + candidate + ": " + (why != nullptr ? why : "not found");
  }
  if (handle == nullptr) {
    loaded.error = "cannot load the CUDA units (" + tried +
                   "); is this tessera built with the CUDA Toolkit and the CUDA libraries "
                   "(libcudart, libcublas) on the library path?";
    return loaded;
  }
  auto* entry = reinterpret_cast<TesseraCudaUnitsEntry>(
      dlsym(handle, TESSERA_STRINGIFY(TESSERA_CUDA_UNITS_ENTRY)));
  const UnitFactory* factory = entry != nullptr ? entry() : nullptr;
  if (factory == nullptr || factory->version != kUnitFactoryVersion) {
    loaded.error = std::string(kModule) + " has no CUDA units of version " +
                   std::to_string(kUnitFactoryVersion);
    return loaded;
  }
  loaded.factory = factory;
  return loaded;
}

}  // namespace

bool wants_cuda(const sdk::Host& host) noexcept {
  return host.compute_device().type == TESSERA_DEVICE_CUDA;
}

const UnitFactory& load_units(std::string_view model) {
  static const Loaded loaded = load();
  TESSERA_CHECK(loaded.factory != nullptr, TESSERA_ERR_UNSUPPORTED, "model '", model,
                "' on run.device = \"cuda\": ", loaded.error);
  return *loaded.factory;
}

}  // namespace tessera::model::cuda
