// File names of plugin libraries and names of plugin kinds.
#include <string>

#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"

namespace tessera {
namespace {

TEST(PluginFilename, SplitsKindAndName) {
  std::string kind;
  std::string name;
  ASSERT_TRUE(parse_plugin_filename("libtessera_backend_inmemory.so", kind, name));
  EXPECT_EQ(kind, "backend");
  EXPECT_EQ(name, "inmemory");
}

TEST(PluginFilename, NameMayContainUnderscoresAndDigits) {
  std::string kind;
  std::string name;
  ASSERT_TRUE(parse_plugin_filename("libtessera_strategy_async_sgd2.so", kind, name));
  EXPECT_EQ(kind, "strategy");
  EXPECT_EQ(name, "async_sgd2");
}

TEST(PluginFilename, UnknownKindStillFollowsThePattern) {
  // The registry rejects the kind with a reason; the name itself is well formed.
  std::string kind;
  std::string name;
  ASSERT_TRUE(parse_plugin_filename("libtessera_widget_thing.so", kind, name));
  EXPECT_EQ(kind, "widget");
  EXPECT_EQ(name, "thing");
}

TEST(PluginFilename, RejectsNamesOutsideThePattern) {
  const char* bad[] = {
      "libtessera_backend.so",          // no name
      "libtessera_backend_.so",         // empty name
      "libtessera__x.so",               // empty kind
      "libtessera_backend_Gloo.so",     // upper case
      "libtessera_backend_gl-oo.so",    // dash
      "libtessera_backend_gloo.so.1",   // versioned suffix
      "libtessera_backend_gloo.dylib",  // other suffix
      "tessera_backend_gloo.so",        // no lib prefix
      "libother_backend_gloo.so",       // other prefix
      "libtessera_core.so",             // the host library, not a plugin
      "README.txt",
      "",
  };
  for (const char* file : bad) {
    std::string kind = "unchanged";
    std::string name = "unchanged";
    EXPECT_FALSE(parse_plugin_filename(file, kind, name)) << file;
    EXPECT_EQ(kind, "unchanged") << file;
    EXPECT_EQ(name, "unchanged") << file;
  }
}

TEST(PluginKind, FromName) {
  EXPECT_EQ(plugin_kind_from_name("backend"), TESSERA_KIND_BACKEND);
  EXPECT_EQ(plugin_kind_from_name("strategy"), TESSERA_KIND_STRATEGY);
  EXPECT_EQ(plugin_kind_from_name("compressor"), TESSERA_KIND_COMPRESSOR);
  EXPECT_EQ(plugin_kind_from_name("selector"), TESSERA_KIND_SELECTOR);
  EXPECT_EQ(plugin_kind_from_name("model"), TESSERA_KIND_MODEL);
  EXPECT_EQ(plugin_kind_from_name("backends"), -1);
  EXPECT_EQ(plugin_kind_from_name("Backend"), -1);
  EXPECT_EQ(plugin_kind_from_name(""), -1);
}

}  // namespace
}  // namespace tessera
