// Lifetime: an accepted library stays mapped while anything holds its
// LoadedPlugin, even after the registry is gone, and is unmapped after the
// last holder lets go; a rejected library is never kept.
#include <dlfcn.h>

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tessera/c/backend.h"
#include "tessera/core/host_api.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

using test::backend_fixture;

// Whether the dynamic loader currently has `file` mapped (without mapping it).
bool is_mapped(const std::filesystem::path& file) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

std::shared_ptr<LoadedPlugin> load_good_and_drop_registry() {
  PluginRegistry registry;
  registry.scan({test::fixture_dir()});
  return registry.get(TESSERA_KIND_BACKEND, "good");
}

TEST(Lifetime, PluginOutlivesItsRegistryAndStillWorks) {
  ASSERT_FALSE(is_mapped(backend_fixture("good")));
  std::shared_ptr<LoadedPlugin> plugin = load_good_and_drop_registry();
  ASSERT_NE(plugin, nullptr);
  EXPECT_TRUE(is_mapped(backend_fixture("good")));

  const tessera_plugin_descriptor& d = plugin->descriptor();
  EXPECT_STREQ(d.name, "good");
  const auto* api = static_cast<const tessera_backend_api*>(d.api);
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->struct_size, sizeof(tessera_backend_api));
  EXPECT_EQ(api->capabilities, static_cast<uint32_t>(TESSERA_BACKEND_CAP_CPU_BUFFERS));

  // Call into the plugin through its table, with the host API it was given.
  EXPECT_EQ(plugin->host().logger()->name(), "backend.good");
  const tessera_backend_config config{sizeof(tessera_backend_config), 1, 1000, 0};
  tessera_backend* backend = nullptr;
  (void)take_thread_error();
  EXPECT_EQ(api->create(plugin->host().api(), nullptr, &config, &backend), TESSERA_ERR_UNSUPPORTED);
  EXPECT_EQ(backend, nullptr);
  EXPECT_EQ(take_thread_error(), "fixture backend good cannot create backends");
  EXPECT_EQ(api->comm_size(nullptr), -1);

  plugin.reset();
  EXPECT_FALSE(is_mapped(backend_fixture("good"))) << "the last holder unmaps the library";
}

TEST(Lifetime, EveryHolderKeepsTheLibrary) {
  std::shared_ptr<LoadedPlugin> first = load_good_and_drop_registry();
  std::shared_ptr<LoadedPlugin> second = first;
  first.reset();
  EXPECT_TRUE(is_mapped(backend_fixture("good")));
  EXPECT_STREQ(second->descriptor().version, "1.0.0");
  second.reset();
  EXPECT_FALSE(is_mapped(backend_fixture("good")));
}

TEST(Lifetime, RejectedLibraryIsNotKept) {
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(backend_fixture("abi2"));
  ASSERT_FALSE(record.loaded);
  EXPECT_FALSE(is_mapped(backend_fixture("abi2")));
  const PluginRecord& duplicate_source = registry.load_file(backend_fixture("good"));
  ASSERT_TRUE(duplicate_source.loaded);
  const PluginRecord& dup =
      registry.load_file(test::fixture_dup_dir() / "libtessera_backend_good.so");
  ASSERT_FALSE(dup.loaded);
  EXPECT_FALSE(is_mapped(test::fixture_dup_dir() / "libtessera_backend_good.so"));
  EXPECT_TRUE(is_mapped(backend_fixture("good")));
}

TEST(Lifetime, NoEntryLibraryIsNeverMapped) {
  // Rejected from its exports alone: the dynamic loader never ran its code.
  PluginRegistry registry;
  ASSERT_FALSE(registry.load_file(backend_fixture("noentry")).loaded);
  EXPECT_FALSE(is_mapped(backend_fixture("noentry")));
}

}  // namespace
}  // namespace tessera
