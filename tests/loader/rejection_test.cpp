// Each deliberately broken fixture is rejected, with a reason that names
// what is wrong, a record, and a warning in the "core" log; the host keeps
// running and nothing of the file is handed out.
#include <cctype>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tessera/c/backend.h"
#include "tessera/c/compressor.h"
#include "tessera/c/model.h"
#include "tessera/c/strategy.h"
#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::backend_fixture;
using test::fixture_dir;

struct BrokenCase {
  std::string file;    // file name inside the fixture directory
  std::string reason;  // expected substring of the rejection reason
};

void PrintTo(const BrokenCase& c, std::ostream* out) { *out << c.file; }

std::vector<BrokenCase> broken_cases() {
  const std::string abi_host = fmt::format("{}.{}", TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
  return {
      {"libtessera_backend_text.so", "not a valid shared library: not an ELF file"},
      {"libtessera_backend_truncated.so", "not a valid shared library: truncated or corrupt: "},
      {"libtessera_backend_noentry.so", "does not export tessera_plugin_entry"},
      {"libtessera_backend_unresolved.so", "undefined symbol: tessera_fixture_missing_symbol"},
      {"libtessera_backend_nullentry.so", "entry point tessera_plugin_entry returned NULL"},
      {"libtessera_backend_abi2.so",
       fmt::format("ABI 2.{} is incompatible with host ABI {}", TESSERA_ABI_MINOR, abi_host)},
      {"libtessera_backend_smalldesc.so",
       fmt::format("descriptor struct_size 16 is smaller than the {} bytes this host needs",
                   TESSERA_PLUGIN_DESCRIPTOR_MIN_SIZE)},
      {"libtessera_backend_wrongkind.so",
       "descriptor kind 'strategy' does not match the file name's kind 'backend'"},
      {"libtessera_backend_wrongname.so",
       "descriptor name 'someoneelse' does not match the file name's name 'wrongname'"},
      {"libtessera_backend_smallapi.so",
       fmt::format("backend api table struct_size {} is smaller than the {} bytes this host needs",
                   offsetof(tessera_backend_api, work_test),
                   offsetof(tessera_backend_api, work_free) + sizeof(void*))},
      {"libtessera_backend_nullkey.so", "option 0 has a NULL key"},
      {"libtessera_backend_badtype.so", "option 'depth' has unknown type 42"},
      {"libtessera_model_future.so",
       fmt::format("model interface 3.{} is not supported: this host speaks model {}.x (the "
                   "plugin is newer than this host)",
                   TESSERA_BACKEND_API_MINOR, TESSERA_MODEL_API_MAJOR)},
      {"libtessera_strategy_retired.so",
       fmt::format("strategy interface 1.2 is not supported: this host speaks strategy {}.x "
                   "(rebuild the plugin against the current SDK)",
                   TESSERA_STRATEGY_API_MAJOR)},
      {"libtessera_strategy_nostep.so", "strategy api function 'step' is NULL"},
      {"libtessera_compressor_newer.so",
       fmt::format("compressor interface 2.{} is not supported: this host speaks compressor "
                   "{}.x (the plugin is newer than this host)",
                   TESSERA_BACKEND_API_MINOR, TESSERA_COMPRESSOR_API_MAJOR)},
      {"libtessera_widget_thing.so", "file name names unknown plugin kind 'widget'"},
      {"README.txt", "file name does not follow the pattern libtessera_<kind>_<name>.so"},
  };
}

class BrokenFixture : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenFixture, IsRejectedWithItsReason) {
  const BrokenCase& c = GetParam();
  const fs::path file = fixture_dir() / c.file;
  ASSERT_TRUE(fs::exists(file)) << file;

  const test::LogCapture log;
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(file);

  EXPECT_FALSE(record.loaded);
  EXPECT_NE(record.reason.find(c.reason), std::string::npos)
      << "reason: " << record.reason << "\nexpected to contain: " << c.reason;
  EXPECT_EQ(record.path, file);
  ASSERT_EQ(registry.records().size(), 1U);
  EXPECT_EQ(&registry.records().front(), &record);
  EXPECT_TRUE(registry.names(TESSERA_KIND_BACKEND).empty());
  EXPECT_TRUE(log.contains("warning", {file.string(), record.reason}))
      << "no warning naming the file and the reason in the core log";
}

// Test name from the fixture's file name ("libtessera_backend_abi2_so").
std::string case_name(const ::testing::TestParamInfo<BrokenCase>& param) {
  std::string name;
  for (const char ch : param.param.file) {
    name += std::isalnum(static_cast<unsigned char>(ch)) != 0 ? ch : '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Loader, BrokenFixture, ::testing::ValuesIn(broken_cases()), case_name);

TEST(BrokenFixtureRecord, UnresolvedSymbolReasonComesFromTheDynamicLoader) {
  PluginRegistry registry;
  const fs::path file = backend_fixture("unresolved");
  const PluginRecord& record = registry.load_file(file);
  EXPECT_EQ(record.reason, "cannot be loaded: " + file.string() +
                               ": undefined symbol: tessera_fixture_missing_symbol");
  EXPECT_EQ(record.abi_major, -1) << "the descriptor of a library that did not load is unread";
}

TEST(BrokenFixtureRecord, UnreadFileKeepsTheKindAndNameOfItsFileName) {
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(backend_fixture("text"));
  EXPECT_EQ(record.kind, "backend");
  EXPECT_EQ(record.name, "text");
  EXPECT_TRUE(record.version.empty());
  EXPECT_EQ(record.abi_major, -1);
  EXPECT_EQ(record.abi_minor, -1);
}

TEST(BrokenFixtureRecord, IncompatibleAbiIsRecorded) {
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(backend_fixture("abi2"));
  EXPECT_EQ(record.abi_major, 2);
  EXPECT_EQ(record.abi_minor, TESSERA_ABI_MINOR);
}

TEST(BrokenFixtureRecord, MismatchedDescriptorShowsWhatItClaimed) {
  PluginRegistry registry;
  const PluginRecord& wrong_name = registry.load_file(backend_fixture("wrongname"));
  EXPECT_EQ(wrong_name.name, "someoneelse");
  EXPECT_EQ(wrong_name.version, "1.0.0");
  EXPECT_EQ(wrong_name.summary, "loader test fixture someoneelse");
  const PluginRecord& wrong_kind = registry.load_file(backend_fixture("wrongkind"));
  EXPECT_EQ(wrong_kind.kind, "strategy");
  EXPECT_EQ(wrong_kind.name, "wrongkind");
}

TEST(BrokenFixtureRecord, MissingFileIsRejectedNotThrown) {
  const test::TempDir tmp;
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(tmp.path() / "libtessera_backend_absent.so");
  EXPECT_FALSE(record.loaded);
  EXPECT_NE(record.reason.find("not a valid shared library: cannot open file"), std::string::npos)
      << record.reason;
}

TEST(BrokenFixtureRecord, LoadingTheSameFileTwiceGivesOneRecord) {
  PluginRegistry registry;
  const fs::path file = backend_fixture("abi2");
  registry.load_file(file);
  const PluginRecord& again = registry.load_file(fixture_dir() / "." / file.filename());
  EXPECT_EQ(registry.records().size(), 1U);
  EXPECT_EQ(again.path, file);
}

}  // namespace
}  // namespace tessera
