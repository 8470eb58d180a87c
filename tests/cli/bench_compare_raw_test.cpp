// `bench collectives --compare-raw` end to end below the command line:
// launch_bench over real plugins loaded from the build tree. The one-rank
// process backend cli_solo_raw (fixtures/solo_raw_backend.cpp) has a raw
// call, so every op is timed and checked on both paths; inmemory has none,
// and an op the fixture refuses is the same usage error.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "bench_launch.hpp"
#include "bench_ops.hpp"
#include "cli_error.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/plugin_registry.hpp"

namespace tessera::cli {
namespace {

// The build tree's plugins plus the CLI test fixtures.
const PluginRegistry& registry() {
  static const std::unique_ptr<PluginRegistry> r = [] {
    auto reg = std::make_unique<PluginRegistry>();
    reg->scan({TESSERA_CLI_PLUGIN_DIR, TESSERA_CLI_FIXTURE_DIR});
    return reg;
  }();
  return *r;
}

std::unique_ptr<Backend> open_fixture(const std::string& name, const toml::table& options,
                                      int ranks) {
  BackendSettings settings;
  settings.world_size = ranks;
  settings.timeout = std::chrono::milliseconds(20000);
  return open_backend(registry(), name, &options, "test", settings);
}

// Keeps what the benchmark reports.
class RecordingReporter final : public BenchReporter {
 public:
  void begin(const BenchPlan& /*plan*/, bool /*thread_ranks*/) override { ++begun; }
  void row(const BenchRow& r) override { rows.push_back(r); }
  void end() override { ++ended; }
  int begun = 0;
  int ended = 0;
  std::vector<BenchRow> rows;
};

BenchSpec compare_spec(tessera_coll_type op) {
  BenchSpec spec;
  spec.op = op;
  spec.iters = 2;
  spec.warmup = 1;
  spec.compare_raw = true;
  return spec;
}

// Runs `spec` and expects a UsageError whose message contains `text`,
// thrown before the reporter began.
void expect_usage_error(Backend& backend, int ranks, const BenchSpec& spec,
                        const std::string& text) {
  RecordingReporter reporter;
  try {
    launch_bench(backend, ranks, spec, {1024}, reporter);
    FAIL() << "expected a usage error containing: " << text;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
  EXPECT_EQ(reporter.begun, 0);
  EXPECT_TRUE(reporter.rows.empty());
}

TEST(BenchCompareRaw, EveryOpIsTimedAndCheckedOnBothPaths) {
  auto backend = open_fixture("cli_solo_raw", toml::table{}, -1);
  ASSERT_FALSE(backend->thread_ranks());
  for (const auto op : {TESSERA_COLL_ALLREDUCE, TESSERA_COLL_ALLGATHER, TESSERA_COLL_REDUCE_SCATTER,
                        TESSERA_COLL_BROADCAST, TESSERA_COLL_REDUCE, TESSERA_COLL_ALLTOALL,
                        TESSERA_COLL_GATHER, TESSERA_COLL_SCATTER}) {
    SCOPED_TRACE(std::string(coll_name(op)));
    RecordingReporter reporter;
    launch_bench(*backend, -1, compare_spec(op), {1024, 4096}, reporter);
    EXPECT_EQ(reporter.begun, 1);
    EXPECT_EQ(reporter.ended, 1);
    ASSERT_EQ(reporter.rows.size(), 2U);
    for (const BenchRow& row : reporter.rows) {
      EXPECT_TRUE(row.compared_raw);
      EXPECT_GT(row.time_us, 0.0);
      EXPECT_GT(row.raw_time_us, 0.0);
      EXPECT_EQ(row.wrong, 0U);
      EXPECT_EQ(row.raw_wrong, 0U);
    }
  }
}

TEST(BenchCompareRaw, WrongRawResultsAreCounted) {
  auto backend = open_fixture("cli_solo_raw", toml::table{{"raw_corrupt", true}}, -1);
  RecordingReporter reporter;
  launch_bench(*backend, -1, compare_spec(TESSERA_COLL_ALLREDUCE), {1024, 2048}, reporter);
  ASSERT_EQ(reporter.rows.size(), 2U);
  for (const BenchRow& row : reporter.rows) {
    EXPECT_EQ(row.wrong, 0U);
    EXPECT_EQ(row.raw_wrong, 1U);  // the fixture spoils the first element only
  }
}

TEST(BenchCompareRaw, WithoutTheFlagNothingRunsRaw) {
  // raw_corrupt would show in raw_wrong if the raw call ran.
  auto backend = open_fixture("cli_solo_raw", toml::table{{"raw_corrupt", true}}, -1);
  BenchSpec spec = compare_spec(TESSERA_COLL_ALLREDUCE);
  spec.compare_raw = false;
  RecordingReporter reporter;
  launch_bench(*backend, -1, spec, {1024}, reporter);
  ASSERT_EQ(reporter.rows.size(), 1U);
  EXPECT_FALSE(reporter.rows[0].compared_raw);
  EXPECT_EQ(reporter.rows[0].raw_time_us, 0.0);
  EXPECT_EQ(reporter.rows[0].raw_wrong, 0U);
}

TEST(BenchCompareRaw, OpWithoutRawCallIsUsageError) {
  auto backend = open_fixture("cli_solo_raw", toml::table{{"raw_skip", "broadcast"}}, -1);
  expect_usage_error(*backend, -1, compare_spec(TESSERA_COLL_BROADCAST),
                     "--compare-raw: backend 'cli_solo_raw' has no raw library call for broadcast");
}

TEST(BenchCompareRaw, ThreadBackendWithoutRawCallIsUsageError) {
  if (registry().find(TESSERA_KIND_BACKEND, "inmemory") == nullptr) {
    GTEST_SKIP() << "the inmemory backend is not built";
  }
  auto backend = open_fixture("inmemory", toml::table{}, 3);
  ASSERT_TRUE(backend->thread_ranks());
  expect_usage_error(*backend, 3, compare_spec(TESSERA_COLL_ALLREDUCE),
                     "--compare-raw: backend 'inmemory' has no raw library call for allreduce");
}

}  // namespace
}  // namespace tessera::cli
