// The plugin probe: a library that crashes, ends the process or hangs while
// it is loaded is rejected with a reason naming what happened, and the host
// goes on; outcomes are cached per file, so a second scan starts no probe
// process until the file changes.
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/error.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::LogCapture;
using test::ScopedEnv;
using test::TempCache;
using test::TempDir;

fs::path crash_fixture(const std::string& name) {
  return test::crash_dir() / ("libtessera_backend_" + name + ".so");
}

// Loads one file with a fresh registry and a fresh cache; returns its record.
PluginRecord load_alone(const fs::path& file) {
  const TempCache cache;
  PluginRegistry registry;
  return registry.load_file(file);
}

// Copies `files` into a new directory of `dir` and returns that directory.
fs::path copy_into(const TempDir& dir, const std::vector<fs::path>& files) {
  const fs::path plugins = dir.path() / "plugins";
  fs::create_directories(plugins);
  for (const fs::path& file : files) fs::copy_file(file, plugins / file.filename());
  return plugins;
}

TEST(Probe, CrashInAConstructorIsRejectedNamingTheSignal) {
  const TempCache cache;
  const LogCapture log;
  PluginRegistry registry;
  const PluginRecord& record = registry.load_file(crash_fixture("segv"));
  EXPECT_FALSE(record.loaded);
  EXPECT_EQ(record.reason, "crashed while loading (signal 11)");
  EXPECT_EQ(record.path, crash_fixture("segv"));
  EXPECT_TRUE(log.contains("warning", {"plugin " + crash_fixture("segv").string() +
                                       " rejected: crashed while loading (signal 11)"}));
  EXPECT_EQ(registry.find(TESSERA_KIND_BACKEND, "segv"), nullptr);
  try {
    (void)registry.get(TESSERA_KIND_BACKEND, "segv");
    ADD_FAILURE() << "get() did not throw";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("libtessera_backend_segv.so in " + test::crash_dir().string() +
                                   " was rejected: crashed while loading (signal 11)"),
        std::string::npos)
        << e.what();
  }
}

TEST(Probe, ExitInAConstructorIsRejectedNamingTheStatus) {
  const PluginRecord record = load_alone(crash_fixture("quits"));
  EXPECT_FALSE(record.loaded);
  EXPECT_EQ(record.reason, "ended the process while loading (exit status 3)");
}

TEST(Probe, CrashInADestructorIsRejected) {
  const PluginRecord record = load_alone(crash_fixture("unloadsegv"));
  EXPECT_FALSE(record.loaded);
  EXPECT_EQ(record.reason, "crashed while unloading (signal 11)");
}

TEST(Probe, HangInAConstructorIsKilledAfterTheTimeout) {
  const ScopedEnv timeout("TESSERA_PLUGIN_PROBE_TIMEOUT_MS", "300");
  const fs::path file = test::hang_dir() / "libtessera_backend_sleeper.so";
  const auto start = std::chrono::steady_clock::now();
  const PluginRecord record = load_alone(file);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(record.loaded);
  EXPECT_EQ(record.reason, "hung while loading (killed after 300 ms)");
  EXPECT_EQ(record.path, file);
  EXPECT_LT(took, std::chrono::seconds(5)) << "the probe must not wait for its default timeout";
}

TEST(Probe, OneScanProbesInOneProcessPlusOnePerCrash) {
  const TempDir dir;
  const fs::path plugins = copy_into(
      dir, {test::backend_fixture("good"), crash_fixture("segv"), test::backend_fixture("spare")});
  const TempCache cache;
  const LogCapture log(true);
  PluginRegistry registry;
  registry.scan({plugins});
  ASSERT_EQ(registry.records().size(), 3U);
  EXPECT_TRUE(registry.records()[0].loaded) << registry.records()[0].reason;
  EXPECT_EQ(registry.records()[1].reason, "crashed while loading (signal 11)");
  EXPECT_TRUE(registry.records()[2].loaded) << registry.records()[2].reason;
  // good and segv in the first process; spare, after the crash, in a second.
  EXPECT_TRUE(log.contains("debug", {"plugin probe: 3 file(s), 0 known from " +
                                     cache.file().string() + ", 3 probed in 2 probe process(es)"}))
      << testing::PrintToString(log.lines());
}

TEST(Probe, SecondScanStartsNoProcessUntilAFileChanges) {
  const TempDir dir;
  const fs::path plugins = copy_into(dir, {test::backend_fixture("good"), crash_fixture("segv")});
  const TempCache cache;
  {
    const LogCapture log(true);
    PluginRegistry registry;
    registry.scan({plugins});
    EXPECT_TRUE(log.contains("debug", {"2 probed in 1 probe process(es)"}))
        << testing::PrintToString(log.lines());
  }
  ASSERT_TRUE(fs::exists(cache.file()));
  {
    const LogCapture log(true);
    PluginRegistry registry;
    registry.scan({plugins});
    EXPECT_TRUE(log.contains("debug", {"plugin probe: 2 file(s), all known from " +
                                       cache.file().string() + "; no probe process started"}))
        << testing::PrintToString(log.lines());
    ASSERT_EQ(registry.records().size(), 2U);
    EXPECT_TRUE(registry.records()[0].loaded);
    EXPECT_EQ(registry.records()[1].reason, "crashed while loading (signal 11)")
        << "a cached crash is still a rejection";
  }
  // A new modification time makes the file unknown again.
  const fs::path good = plugins / "libtessera_backend_good.so";
  fs::last_write_time(good, fs::last_write_time(good) + std::chrono::seconds(2));
  {
    const LogCapture log(true);
    PluginRegistry registry;
    registry.scan({plugins});
    EXPECT_TRUE(
        log.contains("debug", {"2 file(s), 1 known from", "1 probed in 1 probe process(es)"}))
        << testing::PrintToString(log.lines());
    EXPECT_TRUE(registry.records()[0].loaded);
  }
}

TEST(Probe, UnusableCacheOnlyCostsAProbe) {
  const TempDir dir;
  // XDG_CACHE_HOME below a regular file: the cache can be neither read nor
  // written.
  test::write_bytes(dir.path() / "file", {'x'});
  const ScopedEnv env("XDG_CACHE_HOME", (dir.path() / "file" / "cache").string());
  const LogCapture log(true);
  PluginRegistry registry;
  EXPECT_TRUE(registry.load_file(test::backend_fixture("good")).loaded);
  EXPECT_TRUE(log.contains("debug", {"plugin probe: results not cached: cannot create"}))
      << testing::PrintToString(log.lines());
}

TEST(Probe, CorruptCacheFileIsReplaced) {
  const TempCache cache;
  fs::create_directories(cache.file().parent_path());
  test::write_bytes(cache.file(), {'n', 'o', 't', ' ', 'a', ' ', 'c', 'a', 'c', 'h', 'e', '\n'});
  {
    PluginRegistry registry;
    EXPECT_TRUE(registry.load_file(test::backend_fixture("good")).loaded);
  }
  const std::vector<char> text = test::read_bytes(cache.file());
  const std::string written(text.begin(), text.end());
  EXPECT_EQ(written.rfind("tessera plugin probe cache 1\nL 0 ", 0), 0U) << written;
  EXPECT_NE(written.find(fs::canonical(test::backend_fixture("good")).string()), std::string::npos);
}

TEST(Probe, CanBeTurnedOff) {
  const TempCache cache;
  const ScopedEnv off("TESSERA_PLUGIN_PROBE", "0");
  const LogCapture log(true);
  PluginRegistry registry;
  EXPECT_TRUE(registry.load_file(test::backend_fixture("good")).loaded);
  for (const std::string& line : log.lines()) {
    EXPECT_EQ(line.find("plugin probe"), std::string::npos) << line;
  }
  EXPECT_FALSE(fs::exists(cache.file()));
}

TEST(Probe, InvalidSettingsAreWarnedAboutAndDefaulted) {
  const TempCache cache;
  const ScopedEnv probe("TESSERA_PLUGIN_PROBE", "yes");
  const ScopedEnv timeout("TESSERA_PLUGIN_PROBE_TIMEOUT_MS", "soon");
  const LogCapture log;
  PluginRegistry registry;
  EXPECT_TRUE(registry.load_file(test::backend_fixture("good")).loaded);
  EXPECT_TRUE(log.contains("warning", {"TESSERA_PLUGIN_PROBE='yes' is not 0 or 1"}));
  EXPECT_TRUE(log.contains("warning", {"TESSERA_PLUGIN_PROBE_TIMEOUT_MS='soon'", "using 5000"}));
}

}  // namespace
}  // namespace tessera
