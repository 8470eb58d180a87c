// Scanning directories: which files are examined and in what order, what is
// accepted, duplicates across directories, the allow-list, and the messages
// of get().
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../support/bounded.hpp"
#include "tessera/c/backend.h"
#include "tessera/core/host_api.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/error.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::backend_fixture;
using test::fixture_dir;
using test::fixture_dup_dir;

std::vector<std::string> file_names(const std::vector<PluginRecord>& records) {
  std::vector<std::string> names;
  names.reserve(records.size());
  for (const PluginRecord& r : records) names.push_back(r.path.filename().string());
  return names;
}

const PluginRecord* record_for(const PluginRegistry& registry, const fs::path& file) {
  for (const PluginRecord& r : registry.records()) {
    if (r.path == file) return &r;
  }
  return nullptr;
}

// The message of the tessera::Error that get(kind, name) throws.
std::string get_error(const PluginRegistry& registry, tessera_plugin_kind kind,
                      const std::string& name) {
  try {
    (void)registry.get(kind, name);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "get(" << kind << ", " << name << ") did not throw";
  return {};
}

TEST(Scan, ExaminesEveryPluginFileInNameOrderAndIgnoresOthers) {
  PluginRegistry registry;
  registry.scan({fixture_dir()});
  const std::vector<std::string> expected = {
      "libtessera_backend_abi2.so",      "libtessera_backend_badtype.so",
      "libtessera_backend_good.so",      "libtessera_backend_legacy12.so",
      "libtessera_backend_noentry.so",   "libtessera_backend_nullentry.so",
      "libtessera_backend_nullkey.so",   "libtessera_backend_smallapi.so",
      "libtessera_backend_smalldesc.so", "libtessera_backend_spare.so",
      "libtessera_backend_stripped.so",  "libtessera_backend_text.so",
      "libtessera_backend_truncated.so", "libtessera_backend_unresolved.so",
      "libtessera_backend_wrongkind.so", "libtessera_backend_wrongname.so",
      "libtessera_compressor_newer.so",  "libtessera_model_future.so",
      "libtessera_strategy_nostep.so",   "libtessera_strategy_retired.so",
      "libtessera_widget_thing.so",
  };
  EXPECT_EQ(file_names(registry.records()), expected)
      << "README.txt and libunrelated.so must be ignored";
  for (const PluginRecord& r : registry.records()) {
    const bool good =
        r.name == "good" || r.name == "legacy12" || r.name == "spare" || r.name == "stripped";
    EXPECT_EQ(r.loaded, good) << r.path << ": " << r.reason;
    EXPECT_EQ(r.reason.empty(), good) << r.path;
    EXPECT_EQ(r.path.parent_path(), fixture_dir());
  }
  EXPECT_EQ(registry.names(TESSERA_KIND_BACKEND),
            (std::vector<std::string>{"good", "legacy12", "spare", "stripped"}));
  EXPECT_TRUE(registry.names(TESSERA_KIND_STRATEGY).empty());
  EXPECT_TRUE(registry.names(TESSERA_KIND_MODEL).empty());
  EXPECT_TRUE(registry.names(TESSERA_KIND_COMPRESSOR).empty());
}

TEST(Scan, AcceptedPluginDescriptorReadsBack) {
  PluginRegistry registry;
  registry.scan({fixture_dir()});
  const auto plugin = registry.find(TESSERA_KIND_BACKEND, "good");
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->path(), backend_fixture("good"));
  EXPECT_EQ(plugin->kind(), TESSERA_KIND_BACKEND);
  EXPECT_EQ(plugin->name(), "good");
  const tessera_plugin_descriptor& d = plugin->descriptor();
  EXPECT_EQ(d.abi_major, TESSERA_ABI_MAJOR);
  EXPECT_EQ(d.struct_size, sizeof(tessera_plugin_descriptor));
  EXPECT_STREQ(d.version, "1.0.0");
  EXPECT_STREQ(d.summary, "loader test fixture good");
  ASSERT_EQ(d.num_options, 1U);
  EXPECT_STREQ(d.options[0].key, "depth");
  EXPECT_EQ(d.options[0].type, TESSERA_OPT_INT);
  EXPECT_STREQ(d.options[0].default_value, "3");
  ASSERT_NE(d.api, nullptr);

  const PluginRecord* record = record_for(registry, backend_fixture("good"));
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->kind, "backend");
  EXPECT_EQ(record->version, "1.0.0");
  EXPECT_EQ(record->summary, "loader test fixture good");
  EXPECT_EQ(record->abi_major, TESSERA_ABI_MAJOR);
  EXPECT_EQ(record->abi_minor, TESSERA_ABI_MINOR);
  EXPECT_EQ(record->api_major, TESSERA_BACKEND_API_MAJOR);
  EXPECT_EQ(record->api_minor, TESSERA_BACKEND_API_MINOR);
  const InterfaceVersion version = interface_version(d);
  EXPECT_EQ(version.major, TESSERA_BACKEND_API_MAJOR);
  EXPECT_EQ(version.minor, TESSERA_BACKEND_API_MINOR);

  EXPECT_EQ(registry.get(TESSERA_KIND_BACKEND, "spare")->descriptor().version,
            std::string("0.3.0"));
  EXPECT_EQ(registry.find(TESSERA_KIND_STRATEGY, "good"), nullptr);
  EXPECT_EQ(registry.find(TESSERA_KIND_BACKEND, "abi2"), nullptr);
}

// A backend compiled against the frozen ABI 1.2 headers (descriptor without
// per-kind versions) is read as backend interface 1.2 and used: calls reach
// it through the host's table as for a current plugin.
TEST(Scan, BackendBuiltAgainstTheAbi12HeadersStillLoads) {
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(backend_fixture("legacy12"));
  ASSERT_TRUE(record.loaded) << record.reason;
  EXPECT_EQ(record.abi_major, 1);
  EXPECT_EQ(record.abi_minor, 2);
  EXPECT_EQ(record.api_major, 1);
  EXPECT_EQ(record.api_minor, 2);
  const auto plugin = registry.get(TESSERA_KIND_BACKEND, "legacy12");
  const auto* api = static_cast<const tessera_backend_api*>(plugin->descriptor().api);
  tessera_backend* backend = nullptr;
  const tessera_backend_config config{sizeof(tessera_backend_config), 1, 1000, 0};
  EXPECT_EQ(api->create(plugin->host().api(), nullptr, &config, &backend), TESSERA_ERR_UNSUPPORTED);
  EXPECT_EQ(take_thread_error(), "fixture backend legacy12 cannot create backends");
}

TEST(Scan, StrippedLibraryIsFoundThroughItsDynamicSymbols) {
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(backend_fixture("stripped"));
  EXPECT_TRUE(record.loaded) << record.reason;
}

TEST(Scan, FirstDirectoryWinsAndLaterDuplicateNamesIt) {
  PluginRegistry registry;
  registry.scan({fixture_dir(), fixture_dup_dir()});
  const auto plugin = registry.get(TESSERA_KIND_BACKEND, "good");
  EXPECT_EQ(plugin->path(), backend_fixture("good"));
  EXPECT_STREQ(plugin->descriptor().version, "1.0.0");
  const PluginRecord* dup = record_for(registry, fixture_dup_dir() / "libtessera_backend_good.so");
  ASSERT_NE(dup, nullptr);
  EXPECT_FALSE(dup->loaded);
  EXPECT_EQ(dup->reason, "duplicate of " + backend_fixture("good").string());
  EXPECT_EQ(dup->version, "2.0.0") << "a duplicate still shows what it is";
}

TEST(Scan, DirectoryOrderDecidesWhichDuplicateWins) {
  PluginRegistry registry;
  registry.scan({fixture_dup_dir()});
  registry.scan({fixture_dir()});
  EXPECT_STREQ(registry.get(TESSERA_KIND_BACKEND, "good")->descriptor().version, "2.0.0");
  const PluginRecord* later = record_for(registry, backend_fixture("good"));
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->reason,
            "duplicate of " + (fixture_dup_dir() / "libtessera_backend_good.so").string());
}

TEST(Scan, RescanningADirectoryAddsNothing) {
  PluginRegistry registry;
  registry.scan({fixture_dir()});
  const std::size_t count = registry.records().size();
  registry.scan(
      {fixture_dir(), fixture_dir() / ".", fixture_dir() / ".." / fixture_dir().filename()});
  EXPECT_EQ(registry.records().size(), count);
  EXPECT_EQ(registry.names(TESSERA_KIND_BACKEND).size(), 4U);
}

TEST(Scan, MissingDirectoryIsNotAnError) {
  const test::TempDir tmp;
  PluginRegistry registry;
  EXPECT_NO_THROW(registry.scan({tmp.path() / "absent", tmp.path()}));
  EXPECT_TRUE(registry.records().empty());
}

// An entry named like a plugin that is not one (a name of other
// characters, a directory) is listed as rejected with what is wrong, so a
// user who named a plugin "my-sgd" learns why it is not found.
TEST(Scan, ListsWhatIsNamedLikeAPluginButIsNotOne) {
  const test::TempDir tmp;
  const fs::path good = backend_fixture("good");
  for (const char* name : {"libtessera_strategy_My-Sgd.so", "libtessera_strategy_.so",
                           "libtessera_strategy.so", "libtessera_Strategy_x.so"}) {
    fs::copy_file(good, tmp.path() / name);
  }
  fs::create_directory(tmp.path() / "libtessera_strategy_isdir.so");
  fs::copy_file(good, tmp.path() / "libunrelated.so");
  PluginRegistry registry;
  registry.scan({tmp.path()});
  const auto reason = [&](const char* name) {
    const PluginRecord* r = record_for(registry, tmp.path() / name);
    if (r == nullptr) return std::string("(not listed)");
    EXPECT_FALSE(r->loaded) << name;
    return r->reason;
  };
  const std::string pattern = "file name does not follow the pattern libtessera_<kind>_<name>.so";
  EXPECT_EQ(reason("libtessera_strategy_My-Sgd.so"),
            pattern + ": the name 'My-Sgd' must be lowercase letters, digits and '_'");
  EXPECT_EQ(reason("libtessera_strategy_.so"), pattern + ": no name after the kind 'strategy'");
  EXPECT_EQ(reason("libtessera_strategy.so"), pattern + ": no name after the kind 'strategy'");
  EXPECT_EQ(reason("libtessera_Strategy_x.so"),
            pattern + ": the kind 'Strategy' must be lowercase letters and digits");
  EXPECT_EQ(reason("libtessera_strategy_isdir.so"),
            "is a directory, not a plugin's shared library");
  EXPECT_EQ(record_for(registry, tmp.path() / "libunrelated.so"), nullptr);
  EXPECT_EQ(registry.records().size(), 5U);
  const std::string missing = get_error(registry, TESSERA_KIND_STRATEGY, "isdir");
  EXPECT_NE(missing.find("libtessera_strategy_isdir.so in " + tmp.path().string() +
                         " was rejected: is a directory"),
            std::string::npos)
      << missing;
}

// A FIFO named like a plugin is rejected with the reason, not opened: open()
// on it would wait for a writer forever.
TEST(Scan, RejectsAFifoWithoutBlocking) {
  const test::TempDir tmp;
  const fs::path fifo = tmp.path() / "libtessera_backend_pipe.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string reason = test::error_within(10, [&] {
    PluginRegistry registry;
    registry.scan({tmp.path()});
    const PluginRecord& record = registry.records().at(0);
    throw Error(record.loaded ? TESSERA_OK : TESSERA_ERR_INVALID_ARGUMENT, record.reason);
  });
  EXPECT_EQ(reason,
            "not a valid shared library: cannot open file for reading: the file is a FIFO, not a "
            "regular file");
}

TEST(Scan, FollowsSymlinksAndRejectsDirectories) {
  const test::TempDir tmp;
  fs::create_symlink(backend_fixture("good"), tmp.path() / "libtessera_backend_good.so");
  fs::create_symlink(tmp.path() / "nowhere.so", tmp.path() / "libtessera_backend_dangling.so");
  fs::create_directory(tmp.path() / "libtessera_backend_folder.so");
  PluginRegistry registry;
  registry.scan({tmp.path()});
  ASSERT_EQ(registry.records().size(), 3U);
  const PluginRecord& dangling = registry.records()[0];
  EXPECT_EQ(dangling.path, tmp.path() / "libtessera_backend_dangling.so");
  EXPECT_FALSE(dangling.loaded);
  EXPECT_NE(dangling.reason.find("cannot open file"), std::string::npos) << dangling.reason;
  const PluginRecord& folder = registry.records()[1];
  EXPECT_EQ(folder.path, tmp.path() / "libtessera_backend_folder.so");
  EXPECT_FALSE(folder.loaded);
  EXPECT_EQ(folder.reason, "is a directory, not a plugin's shared library");
  const PluginRecord& linked = registry.records()[2];
  EXPECT_TRUE(linked.loaded) << linked.reason;
  EXPECT_EQ(registry.get(TESSERA_KIND_BACKEND, "good")->path(),
            tmp.path() / "libtessera_backend_good.so");
}

TEST(AllowList, OnlyListedNamesAreLoaded) {
  const test::LogCapture log;
  PluginRegistry registry;
  registry.set_allow_list({"spare", "abi2"});
  registry.scan({fixture_dir()});
  EXPECT_EQ(registry.names(TESSERA_KIND_BACKEND), std::vector<std::string>{"spare"});
  const PluginRecord* good = record_for(registry, backend_fixture("good"));
  ASSERT_NE(good, nullptr);
  EXPECT_FALSE(good->loaded);
  EXPECT_EQ(good->reason, "not in [plugins] allow");
  EXPECT_TRUE(good->version.empty()) << "an excluded library is not even loaded";
  EXPECT_TRUE(log.contains("info", {backend_fixture("good").string(), "not in [plugins] allow"}));
  // Listed but broken: still rejected for what is wrong with it.
  const PluginRecord* abi2 = record_for(registry, backend_fixture("abi2"));
  ASSERT_NE(abi2, nullptr);
  EXPECT_NE(abi2->reason.find("is incompatible with host ABI"), std::string::npos);
  EXPECT_NE(get_error(registry, TESSERA_KIND_BACKEND, "good").find("not in [plugins] allow"),
            std::string::npos);
}

TEST(AllowList, EmptyListAllowsEverything) {
  PluginRegistry registry;
  registry.set_allow_list({});
  registry.scan({fixture_dir()});
  EXPECT_EQ(registry.names(TESSERA_KIND_BACKEND).size(), 4U);
}

TEST(Get, UnknownNameListsAvailableNamesAndSearchedDirectories) {
  PluginRegistry registry;
  registry.scan({fixture_dir()});
  const std::string message = get_error(registry, TESSERA_KIND_BACKEND, "mpi");
  EXPECT_NE(
      message.find("no backend plugin named 'mpi' (available: good, legacy12, spare, stripped)"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("searched " + fixture_dir().string()), std::string::npos) << message;
}

TEST(Get, NameOfARejectedFileNamesTheFileAndReason) {
  PluginRegistry registry;
  registry.scan({fixture_dir()});
  const std::string message = get_error(registry, TESSERA_KIND_BACKEND, "abi2");
  EXPECT_NE(
      message.find("no backend plugin named 'abi2' (available: good, legacy12, spare, stripped); "
                   "libtessera_backend_abi2.so in " +
                   fixture_dir().string() + " was rejected: ABI 2."),
      std::string::npos)
      << message;
  // A descriptor that claimed the name from a file of another name counts too.
  const std::string other = get_error(registry, TESSERA_KIND_BACKEND, "someoneelse");
  EXPECT_NE(other.find("libtessera_backend_wrongname.so in"), std::string::npos) << other;
}

TEST(Get, KindWithoutPluginsSaysNone) {
  PluginRegistry registry;
  const std::string message = get_error(registry, TESSERA_KIND_STRATEGY, "ddp");
  EXPECT_NE(message.find("no strategy plugin named 'ddp' (available: none)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("no plugin directory was scanned"), std::string::npos) << message;
}

}  // namespace
}  // namespace tessera
