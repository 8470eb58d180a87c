// The default search path: configured directories, then TESSERA_PLUGIN_PATH,
// then the build or install tree's own plugin directory; each directory once.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::ScopedEnv;
using test::TempDir;

TEST(BuiltinDir, IsThePluginDirectoryOfTheBuildTree) {
  // This executable lives in <build>/bin; plugins in <build>/lib/tessera/plugins.
  const fs::path dir = PluginRegistry::builtin_dir();
  EXPECT_EQ(dir, dir.lexically_normal());
  EXPECT_EQ(fs::weakly_canonical(dir), fs::weakly_canonical(TESSERA_TEST_BUILTIN_DIR));
}

TEST(SearchPath, ConfigThenEnvironmentThenBuiltin) {
  const TempDir tmp;
  const fs::path a = tmp.path() / "a";
  const fs::path b = tmp.path() / "b";
  const fs::path c = tmp.path() / "c";
  const fs::path d = tmp.path() / "d";
  const ScopedEnv env("TESSERA_PLUGIN_PATH", c.string() + ":" + d.string());
  const std::vector<fs::path> expected = {b, a, c, d, PluginRegistry::builtin_dir()};
  EXPECT_EQ(PluginRegistry::search_path({b, a}), expected);
}

TEST(SearchPath, UnsetEnvironmentAddsNothing) {
  const ScopedEnv env("TESSERA_PLUGIN_PATH", std::nullopt);
  const std::vector<fs::path> expected = {"first", PluginRegistry::builtin_dir()};
  EXPECT_EQ(PluginRegistry::search_path({"first"}), expected);
  EXPECT_EQ(PluginRegistry::search_path({}), std::vector<fs::path>{PluginRegistry::builtin_dir()});
}

TEST(SearchPath, EmptyEnvironmentEntriesAreSkipped) {
  const TempDir tmp;
  const fs::path c = tmp.path() / "c";
  const fs::path d = tmp.path() / "d";
  const ScopedEnv env("TESSERA_PLUGIN_PATH", ":" + c.string() + "::" + d.string() + ":");
  const std::vector<fs::path> expected = {c, d, PluginRegistry::builtin_dir()};
  EXPECT_EQ(PluginRegistry::search_path({}), expected);
  const ScopedEnv empty("TESSERA_PLUGIN_PATH", std::string());
  EXPECT_EQ(PluginRegistry::search_path({}), std::vector<fs::path>{PluginRegistry::builtin_dir()});
}

TEST(SearchPath, EachDirectoryAppearsOnce) {
  const TempDir tmp;
  const fs::path real = tmp.path() / "real";
  const fs::path other = tmp.path() / "other";
  fs::create_directory(real);
  fs::create_directory(other);
  fs::create_directory_symlink(real, tmp.path() / "alias");
  const ScopedEnv env("TESSERA_PLUGIN_PATH", other.string() + ":" + (real / ".").string() + ":" +
                                                 (tmp.path() / "alias").string() + ":" +
                                                 PluginRegistry::builtin_dir().string());
  const std::vector<fs::path> expected = {real, other, PluginRegistry::builtin_dir()};
  EXPECT_EQ(PluginRegistry::search_path({real, real / "x" / "..", other, real}), expected)
      << "a repeated, relative-dotted or symlinked spelling of a directory is dropped";
}

TEST(SearchPath, MissingEnvironmentDirectoryIsOnlyAWarning) {
  const TempDir tmp;
  const fs::path missing = tmp.path() / "missing";
  const ScopedEnv env("TESSERA_PLUGIN_PATH", missing.string());
  const test::LogCapture log;
  const std::vector<fs::path> expected = {missing, PluginRegistry::builtin_dir()};
  EXPECT_EQ(PluginRegistry::search_path({}), expected);
  EXPECT_TRUE(log.contains(
      "warning", {"TESSERA_PLUGIN_PATH entry '" + missing.string() + "' does not exist; ignored"}))
      << testing::PrintToString(log.lines());
}

TEST(SearchPath, EnvironmentDirectoryIsScanned) {
  const ScopedEnv env("TESSERA_PLUGIN_PATH", test::fixture_dir().string());
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({}));
  const auto plugin = registry.find(TESSERA_KIND_BACKEND, "good");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->path(), test::backend_fixture("good"));
}

TEST(SearchPath, ConfiguredDirectoryWinsOverEnvironment) {
  const ScopedEnv env("TESSERA_PLUGIN_PATH", test::fixture_dir().string());
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({test::fixture_dup_dir()}));
  EXPECT_STREQ(registry.get(TESSERA_KIND_BACKEND, "good")->descriptor().version, "2.0.0");
}

}  // namespace
}  // namespace tessera
