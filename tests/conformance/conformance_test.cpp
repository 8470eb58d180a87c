// GoogleTest front end of the conformance suite: every case of all_cases()
// on every backend plugin found (the build tree's plugin directory, then
// TESSERA_PLUGIN_PATH), with 1, 2, 3 and 4 ranks as threads. Backends that
// are not thread-rank backends are skipped here; they run the same cases
// under a multi-process driver.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cases.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "thread_harness.hpp"

#ifndef TESSERA_CONFORMANCE_PLUGIN_DIR
#error "TESSERA_CONFORMANCE_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::conformance {
namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{10000};
constexpr int kRankCounts[] = {1, 2, 3, 4};

// The search path without repeated directories (the build plugin directory
// is also the one next to the test executable).
std::vector<std::filesystem::path> unique_search_path() {
  std::vector<std::filesystem::path> unique;
  std::set<std::filesystem::path> seen;
  for (const auto& dir : PluginRegistry::search_path({TESSERA_CONFORMANCE_PLUGIN_DIR})) {
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(dir, ec);
    if (ec) canonical = dir;
    if (seen.insert(canonical).second) unique.push_back(dir);
  }
  return unique;
}

// The registry all tests share. Created on first use (while gtest registers
// the parameterised tests) and never destroyed, so plugin libraries stay
// loaded until the process exits.
const PluginRegistry& registry() {
  static const PluginRegistry* const instance = [] {
    auto* reg = new PluginRegistry();  // NOLINT(cppcoreguidelines-owning-memory)
    reg->scan(unique_search_path());
    return reg;
  }();
  return *instance;
}

struct BackendParam {
  std::string backend;
  int ranks = 1;
};

void PrintTo(const BackendParam& p, std::ostream* out) {
  *out << p.backend << " with " << p.ranks << " rank(s)";
}

uint32_t capabilities_of(const LoadedPlugin& plugin);

// Every thread-rank backend found x every rank count of kRankCounts from
// `min_ranks` up. Process-based backends (mpi, gloo) run the same cases under
// tessera_conformance_rank, one process per rank (tests/multiprocess).
std::vector<BackendParam> backend_params(int min_ranks) {
  std::vector<BackendParam> params;
  for (const auto& name : registry().names(TESSERA_KIND_BACKEND)) {
    const auto plugin = registry().get(TESSERA_KIND_BACKEND, name);
    if ((capabilities_of(*plugin) & TESSERA_BACKEND_CAP_THREAD_RANKS) == 0) continue;
    for (const int ranks : kRankCounts) {
      if (ranks >= min_ranks) params.push_back({name, ranks});
    }
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<BackendParam>& info) {
  return info.param.backend + "_" + std::to_string(info.param.ranks) + "ranks";
}

// Capability bits from the plugin's interface table, read without creating
// the backend (a process-based backend may need a launcher to be created).
uint32_t capabilities_of(const LoadedPlugin& plugin) {
  const auto* api = static_cast<const tessera_backend_api*>(plugin.descriptor().api);
  if (api == nullptr ||
      api->struct_size < offsetof(tessera_backend_api, capabilities) + sizeof(api->capabilities)) {
    return 0;
  }
  return api->capabilities;
}

const CaseInfo* find_case(std::string_view name) {
  for (const auto& c : all_cases()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Fixture of the cases that run with any number of ranks.
class BackendConformance : public ::testing::TestWithParam<BackendParam> {
 protected:
  // Runs case `case_name` of all_cases() on the parameter's backend with the
  // parameter's number of thread ranks. Skips process-based backends (and,
  // defensively, groups smaller than the case needs); fails with the first
  // failing rank's message, or when the backend cannot be opened.
  void RunCase(std::string_view case_name) {
    const CaseInfo* info = find_case(case_name);
    ASSERT_NE(info, nullptr) << "no conformance case named '" << case_name << "'";
    const BackendParam& param = GetParam();
    const auto plugin = registry().get(TESSERA_KIND_BACKEND, param.backend);
    if ((capabilities_of(*plugin) & TESSERA_BACKEND_CAP_THREAD_RANKS) == 0) {
      GTEST_SKIP() << "process-based backend: runs under the multi-process driver";
    }
    if (param.ranks < info->min_ranks) {
      GTEST_SKIP() << "case '" << info->name << "' needs at least " << info->min_ranks << " ranks";
    }
    BackendSettings settings;
    settings.world_size = param.ranks;
    settings.timeout = kDefaultTimeout;
    try {
      auto backend = open_backend(registry(), param.backend, nullptr,
                                  "conformance: [backend.options]", settings);
      run_case_on_threads(*backend, param.ranks, info->fn, CaseParams{});
    } catch (const std::exception& e) {
      FAIL() << "case '" << info->name << "' on backend '" << param.backend << "' with "
             << param.ranks << " rank(s): " << e.what();
    }
  }
};

// Cases that need at least two ranks run in this suite, which is not
// instantiated for one rank (so nothing is skipped for thread-rank backends).
class MultiRankConformance : public BackendConformance {};

// One test per entry of all_cases(); the name is the case name in CamelCase,
// the suite follows the case's min_ranks.
#define TESSERA_CONFORMANCE_CASE(suite, test_name, case_name) \
  TEST_P(suite, test_name) { RunCase(case_name); }

TESSERA_CONFORMANCE_CASE(BackendConformance, Allreduce, "allreduce")
TESSERA_CONFORMANCE_CASE(BackendConformance, AllreduceLarge, "allreduce_large")
TESSERA_CONFORMANCE_CASE(BackendConformance, Reduce, "reduce")
TESSERA_CONFORMANCE_CASE(BackendConformance, ReduceScatter, "reduce_scatter")
TESSERA_CONFORMANCE_CASE(BackendConformance, Broadcast, "broadcast")
TESSERA_CONFORMANCE_CASE(BackendConformance, Allgather, "allgather")
TESSERA_CONFORMANCE_CASE(BackendConformance, Gather, "gather")
TESSERA_CONFORMANCE_CASE(BackendConformance, Scatter, "scatter")
TESSERA_CONFORMANCE_CASE(BackendConformance, Alltoall, "alltoall")
TESSERA_CONFORMANCE_CASE(BackendConformance, Barrier, "barrier")
TESSERA_CONFORMANCE_CASE(MultiRankConformance, SendRecvRing, "send_recv_ring")
TESSERA_CONFORMANCE_CASE(MultiRankConformance, SendRecvOrdered, "send_recv_ordered")
TESSERA_CONFORMANCE_CASE(MultiRankConformance, SendRecvTags, "send_recv_tags")
TESSERA_CONFORMANCE_CASE(BackendConformance, Nonblocking, "nonblocking")
TESSERA_CONFORMANCE_CASE(BackendConformance, BlockingAfterNonblocking, "blocking_after_nonblocking")
TESSERA_CONFORMANCE_CASE(BackendConformance, Split, "split")
TESSERA_CONFORMANCE_CASE(BackendConformance, InvalidArguments, "invalid_arguments")
TESSERA_CONFORMANCE_CASE(MultiRankConformance, Timeout, "timeout")
TESSERA_CONFORMANCE_CASE(MultiRankConformance, CollectiveMismatch, "collective_mismatch")
TESSERA_CONFORMANCE_CASE(BackendConformance, AbortPropagation, "abort_propagation")
TESSERA_CONFORMANCE_CASE(BackendConformance, BitwiseAgreement, "bitwise_agreement")

#undef TESSERA_CONFORMANCE_CASE

INSTANTIATE_TEST_SUITE_P(Conformance, BackendConformance, ::testing::ValuesIn(backend_params(1)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Conformance, MultiRankConformance, ::testing::ValuesIn(backend_params(2)),
                         param_name);
// With no backend found there is nothing to instantiate; the setup tests
// below report that as a failure instead.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendConformance);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MultiRankConformance);

// "send_recv_ring" -> "SendRecvRing".
std::string camel_case(std::string_view snake) {
  std::string out;
  bool upper = true;
  for (const char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

TEST(ConformanceSetup, FindsABackend) {
  const auto names = registry().names(TESSERA_KIND_BACKEND);
  std::string rejected;
  for (const auto& record : registry().records()) {
    if (!record.loaded) rejected += "\n  " + record.path.string() + ": " + record.reason;
  }
  EXPECT_FALSE(names.empty()) << "no backend plugin found in " << TESSERA_CONFORMANCE_PLUGIN_DIR
                              << " or TESSERA_PLUGIN_PATH; rejected files:" << rejected;
}

// The suite a case's test belongs to, following its min_ranks.
std::string suite_of(const CaseInfo& c) {
  return c.min_ranks <= 1 ? "Conformance/BackendConformance" : "Conformance/MultiRankConformance";
}

TEST(ConformanceSetup, EveryCaseHasATest) {
  if (registry().names(TESSERA_KIND_BACKEND).empty()) {
    GTEST_SKIP() << "no backend found, so no conformance test was instantiated";
  }
  // "<suite>.<test>" for every test of the two parameterised suites.
  std::set<std::string> tests;
  const auto* unit = ::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit->total_test_suite_count(); ++s) {
    const auto* suite = unit->GetTestSuite(s);
    const std::string suite_name = suite->name();
    if (suite_name.rfind("Conformance/", 0) != 0) continue;
    for (int t = 0; t < suite->total_test_count(); ++t) {
      const std::string name = suite->GetTestInfo(t)->name();
      tests.insert(suite_name + "." + name.substr(0, name.find('/')));
    }
  }
  for (const auto& c : all_cases()) {
    const std::string expected = suite_of(c) + "." + camel_case(c.name);
    EXPECT_EQ(tests.count(expected), 1U)
        << "case '" << c.name << "' (min_ranks " << c.min_ranks << ") has no test " << expected;
  }
  EXPECT_EQ(tests.size(), all_cases().size()) << "a TEST_P runs no listed case";
}

}  // namespace
}  // namespace tessera::conformance

int main(int argc, char** argv) {
  tessera::init_logging();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
