// comm_shrink (backend 1.3): the survivors of a failed group re-form it
// without the ranks that stopped taking part, in their old order; a rank
// that calls after the decision is left out with PEER_LOST naming it; the
// SDK fills the table entry only for a backend that declares kCanShrink.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::test {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// A backend class that says nothing about shrinking, and one that declares it.
class SilentBackend : public sdk::Backend {
 public:
  SilentBackend(const sdk::Host& host, const sdk::Options& /*options*/,
                const tessera_backend_config& /*config*/)
      : sdk::Backend(host) {}
  std::unique_ptr<sdk::Comm> connect(int32_t /*rank*/) override { return nullptr; }
};
class ShrinkingBackend : public SilentBackend {
 public:
  using SilentBackend::SilentBackend;
  static constexpr bool kCanShrink = true;
};

static_assert(sdk::detail::BackendAdapter<SilentBackend>::table(0).comm_shrink == nullptr);
static_assert(sdk::detail::BackendAdapter<ShrinkingBackend>::table(0).comm_shrink != nullptr);
// Likewise comm_grow (backend 1.4), declared on its own.
class GrowingBackend : public SilentBackend {
 public:
  using SilentBackend::SilentBackend;
  static constexpr bool kCanGrow = true;
};
static_assert(sdk::detail::BackendAdapter<SilentBackend>::table(0).comm_grow == nullptr);
static_assert(sdk::detail::BackendAdapter<ShrinkingBackend>::table(0).comm_grow == nullptr);
static_assert(sdk::detail::BackendAdapter<GrowingBackend>::table(0).comm_grow != nullptr);
static_assert(sdk::detail::BackendAdapter<GrowingBackend>::table(0).comm_shrink == nullptr);

// comm_shrink through the plugin's table.
std::unique_ptr<Comm> shrink(Comm& comm, int64_t grace_ms) {
  tessera_comm* out = nullptr;
  check(Plugin::get().api->comm_shrink(comm.raw(), grace_ms, &out));
  if (out == nullptr) throw std::runtime_error("comm_shrink returned no communicator");
  return std::make_unique<Comm>(out);
}

// Allreduce (sum) of `value` over `comm`.
int32_t sum_of(Comm& comm, int32_t value) {
  std::vector<int32_t> x = {value};
  comm.run(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
  return x[0];
}

TEST(Shrink, TableHasCommShrink) {
  const Plugin& plugin = Plugin::get();
  EXPECT_GE(plugin.descriptor->api_minor, 3U);
  ASSERT_GE(plugin.api->struct_size,
            offsetof(tessera_backend_api, comm_shrink) + sizeof plugin.api->comm_shrink);
  EXPECT_NE(plugin.api->comm_shrink, nullptr);
  // Its ranks are threads of one process: nothing can join them.
  ASSERT_GE(plugin.api->struct_size,
            offsetof(tessera_backend_api, comm_grow) + sizeof plugin.api->comm_grow);
  EXPECT_EQ(plugin.api->comm_grow, nullptr);
}

TEST(Shrink, SurvivorsReformWithoutTheLostRankInTheirOldOrder) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 4;
  Backend backend(host, config);
  std::vector<int32_t> new_rank(4, -1);
  std::vector<int32_t> new_size(4, -1);
  std::vector<int32_t> sums(4, -1);
  const auto outcomes = run_ranks(backend, [&](Comm& comm) {
    const int32_t r = comm.rank();
    if (r == 2) return;  // stops taking part: its communicator goes
    comm.abort("rank " + std::to_string(r) + " saw the group fail");
    auto survivors = shrink(comm, 200);
    new_rank[static_cast<size_t>(r)] = survivors->rank();
    new_size[static_cast<size_t>(r)] = survivors->size();
    sums[static_cast<size_t>(r)] = sum_of(*survivors, r + 1);
    // The failed group's abort does not reach the new one.
    comm.abort("again");
    if (sum_of(*survivors, 1) != 3) throw std::runtime_error("the new group broke with the old");
  });
  for (const auto& o : outcomes) ASSERT_EQ(o.status, TESSERA_OK) << o.message;
  EXPECT_EQ(new_rank, (std::vector<int32_t>{0, 1, -1, 2}));
  EXPECT_EQ(new_size, (std::vector<int32_t>{3, 3, -1, 3}));
  EXPECT_EQ(sums, (std::vector<int32_t>{7, 7, -1, 7}));  // 1 + 2 + 4
  const auto logs = host.logs();
  EXPECT_TRUE(std::any_of(logs.begin(), logs.end(), [](const std::string& l) {
    return l.find("re-formed") != std::string::npos &&
           l.find("without world rank(s) 2") != std::string::npos;
  }));
}

TEST(Shrink, CallerAfterTheDecisionIsLeftOut) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 4;
  Backend backend(host, config);
  std::vector<int32_t> new_size(4, -1);
  std::vector<int32_t> sums(4, -1);
  const auto outcomes = run_ranks(
      backend,
      [&](Comm& comm) {
        const int32_t r = comm.rank();
        if (r == 2) return;
        comm.abort("failed");
        if (r == 3) std::this_thread::sleep_for(milliseconds(1000));
        auto survivors = shrink(comm, 100);
        new_size[static_cast<size_t>(r)] = survivors->size();
        sums[static_cast<size_t>(r)] = sum_of(*survivors, r + 1);
      },
      false);
  EXPECT_EQ(outcomes[0].status, TESSERA_OK) << outcomes[0].message;
  EXPECT_EQ(outcomes[1].status, TESSERA_OK) << outcomes[1].message;
  EXPECT_EQ(outcomes[3].status, TESSERA_ERR_PEER_LOST) << outcomes[3].message;
  EXPECT_THAT(outcomes[3].message, HasSubstr("rank 3 arrived after"));
  EXPECT_THAT(outcomes[3].message, HasSubstr("agreed on ranks [0, 1]"));
  EXPECT_THAT(outcomes[3].message, HasSubstr("left out"));
  EXPECT_EQ(new_size, (std::vector<int32_t>{2, 2, -1, -1}));
  EXPECT_EQ(sums, (std::vector<int32_t>{3, 3, -1, -1}));
}

TEST(Shrink, EveryMemberCallingEndsTheWaitAtOnce) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    comm.abort("failed");
    const auto start = std::chrono::steady_clock::now();
    auto all = shrink(comm, 60000);
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
      throw std::runtime_error("shrink waited for the grace although every member called");
    }
    if (all->rank() != comm.rank() || all->size() != 4) {
      throw std::runtime_error("re-formed group has rank " + std::to_string(all->rank()) + " of " +
                               std::to_string(all->size()));
    }
    if (sum_of(*all, 1) != 4) throw std::runtime_error("wrong sum on the re-formed group");
    // A second call on the same communicator is refused.
    try {
      shrink(comm, 10);
    } catch (const Error& e) {
      if (e.status() != TESSERA_ERR_INVALID_ARGUMENT) throw;
      return;
    }
    throw std::runtime_error("a second shrink of one communicator was accepted");
  });
}

TEST(Shrink, GraceMustBePositive) {
  BackendConfig config;
  config.world_size = 1;
  run_ok(config, [](Comm& comm) {
    tessera_comm* out = nullptr;
    const tessera_status status = Plugin::get().api->comm_shrink(comm.raw(), 0, &out);
    if (status != TESSERA_ERR_INVALID_ARGUMENT || out != nullptr) {
      throw std::runtime_error("grace 0 was not refused");
    }
    if (FakeHost::last_error().find("grace_ms") == std::string::npos) {
      throw std::runtime_error("message does not name grace_ms: " + FakeHost::last_error());
    }
  });
}

}  // namespace
}  // namespace tessera::test
