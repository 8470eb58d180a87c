// The SDK's device mesh (tessera/sdk/mesh.hpp): rank <-> coordinates for
// several shapes, every refusal's message, and group() on real
// communicators (ranks as threads of the inmemory backend) against
// group_ranks().
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/mesh.hpp"

namespace tessera::mesh_test {

namespace sdk = tessera::sdk;
using Axes = std::vector<sdk::MeshAxis>;
using Names = std::vector<std::string>;

int32_t mesh_ranks(const Axes& axes) {
  int32_t n = 1;
  for (const sdk::MeshAxis& a : axes) n *= a.size;
  return n;
}

// The message of the Error `fn` throws (checked to be INVALID_ARGUMENT),
// "" when it throws none.
std::string mesh_refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.message();
  }
  return "";
}

// Runs body(mesh, world) on every rank of a fresh `inmemory` world of the
// mesh's size, one thread each (20 s timeout per collective; a failing rank
// aborts the others); rethrows the first failure.
void run_mesh_ranks(const Axes& axes,
                    const std::function<void(const sdk::Mesh& mesh, sdk::CommView& world)>& body) {
  const int32_t size = mesh_ranks(axes);
  BackendSettings settings;
  settings.world_size = size;
  settings.timeout = std::chrono::milliseconds(20000);
  const auto backend =
      open_backend(tessera::test::model_plugins(), "inmemory", nullptr, "test", settings);
  const HostContext host_ctx("strategy.test");
  std::mutex mu;
  std::vector<Communicator*> comms;
  run_rank_threads(
      size,
      [&](int rank) {
        const std::unique_ptr<Communicator> comm = backend->connect(rank);
        {
          const std::lock_guard<std::mutex> lock(mu);
          comms.push_back(comm.get());
        }
        struct Detach {
          std::mutex& m;
          std::vector<Communicator*>& all;
          Communicator* c;
          ~Detach() {
            const std::lock_guard<std::mutex> lock(m);
            all.erase(std::remove(all.begin(), all.end(), c), all.end());
          }
        } const detach{mu, comms, comm.get()};
        sdk::CommView world(sdk::Host(host_ctx.api()), comm->c_api(), comm->c_handle());
        const sdk::Mesh mesh(axes, size, rank);
        body(mesh, world);
      },
      [&](int rank, const std::string& message) {
        const std::lock_guard<std::mutex> lock(mu);
        for (Communicator* c : comms)
          c->abort("rank " + std::to_string(rank) + " failed: " + message);
      });
}

TEST(SdkMesh, CoordinatesRoundTripWithTheLastAxisInnermost) {
  const std::vector<Axes> shapes = {
      {{"dp", 5}},
      {{"a", 2}, {"b", 3}},
      {{"dp", 2}, {"pp", 2}, {"tp", 2}},
      {{"dp", 3}, {"pp", 1}, {"tp", 2}},
      {{"x", 1}},
  };
  for (const Axes& axes : shapes) {
    const int32_t world = mesh_ranks(axes);
    for (int32_t r = 0; r < world; ++r) {
      const sdk::Mesh mesh(axes, world, r);
      SCOPED_TRACE(mesh.describe() + ", rank " + std::to_string(r));
      EXPECT_EQ(mesh.rank(), r);
      EXPECT_EQ(mesh.world_size(), world);
      ASSERT_EQ(mesh.coords().size(), axes.size());
      EXPECT_EQ(mesh.coords_of(r), mesh.coords());
      EXPECT_EQ(mesh.rank_of(mesh.coords()), r);
      // Mixed radix, the last axis the fastest digit.
      int32_t rest = r;
      for (size_t i = axes.size(); i-- > 0;) {
        EXPECT_EQ(mesh.size(axes[i].name), axes[i].size);
        EXPECT_EQ(mesh.coord(axes[i].name), rest % axes[i].size);
        EXPECT_EQ(mesh.coords()[i], mesh.coord(axes[i].name));
        rest /= axes[i].size;
      }
      // Every other rank round-trips from this rank's mesh too.
      for (int32_t other = 0; other < world; ++other) {
        EXPECT_EQ(mesh.rank_of(mesh.coords_of(other)), other);
      }
    }
  }
  EXPECT_EQ(sdk::Mesh({{"a", 2}, {"b", 3}}, 6, 4).coords(), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(sdk::Mesh({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 8, 5).coords(),
            (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(sdk::Mesh({{"dp", 3}, {"pp", 1}, {"tp", 2}}, 6, 5).coords(),
            (std::vector<int32_t>{2, 0, 1}));
}

TEST(SdkMesh, DescribesItselfAndEveryGroup) {
  const sdk::Mesh mesh({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 8, 5);
  EXPECT_EQ(mesh.describe(), "dp=2 x pp=2 x tp=2 (tp innermost)");
  EXPECT_EQ(mesh.describe_groups({"tp"}), "tp groups: [0 1] [2 3] [4 5] [6 7]");
  EXPECT_EQ(mesh.describe_groups({"pp"}), "pp groups: [0 2] [1 3] [4 6] [5 7]");
  EXPECT_EQ(mesh.describe_groups({"dp"}), "dp groups: [0 4] [1 5] [2 6] [3 7]");
  EXPECT_EQ(mesh.describe_groups({"dp", "tp"}), "dp x tp groups: [0 1 4 5] [2 3 6 7]");
  EXPECT_EQ(mesh.describe_groups({"pp", "tp"}), "pp x tp groups: [0 1 2 3] [4 5 6 7]");
  EXPECT_EQ(mesh.describe_groups({"dp", "pp", "tp"}), "dp x pp x tp groups: [0 1 2 3 4 5 6 7]");
  // Rank 5 = (dp 1, pp 0, tp 1).
  EXPECT_EQ(mesh.group_ranks({"tp"}), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(mesh.group_ranks({"pp"}), (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(mesh.group_ranks({"dp"}), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(mesh.group_ranks({"dp", "pp"}), (std::vector<int32_t>{1, 3, 5, 7}));
  EXPECT_EQ(sdk::Mesh({{"dp", 4}}, 4, 0).describe(), "dp=4 (dp innermost)");
  // An axis of size 1: every rank is its own group along it.
  EXPECT_EQ(sdk::Mesh({{"dp", 3}, {"pp", 1}, {"tp", 2}}, 6, 0).describe_groups({"pp"}),
            "pp groups: [0] [1] [2] [3] [4] [5]");
}

TEST(SdkMesh, RefusesABadShapeOrQueryNamingTheAxes) {
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 6, 0);
            }),
            "mesh dp=2 x pp=2 x tp=2 has 8 ranks, but the world has 6");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"tp", 0}}, 2, 0);
            }),
            "mesh dp=2 x tp=0: axis 'tp' has size 0; every axis needs at least 1 rank");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", -1}}, 1, 0);
            }),
            "mesh dp=-1: axis 'dp' has size -1; every axis needs at least 1 rank");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"", 2}}, 4, 0);
            }),
            "mesh dp=2 x =2: axis 1 has an empty name");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"tp", 1}, {"dp", 2}}, 4, 0);
            }),
            "mesh dp=2 x tp=1 x dp=2: axis 'dp' is named twice");
  EXPECT_EQ(mesh_refusal([] { (void)sdk::Mesh({}, 1, 0); }), "mesh has no axes");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"tp", 2}}, 4, 4);
            }),
            "mesh dp=2 x tp=2: rank 4 is out of range [0, 4)");
  EXPECT_EQ(mesh_refusal([] {
              (void)sdk::Mesh({{"dp", 2}, {"tp", 2}}, 4, -1);
            }),
            "mesh dp=2 x tp=2: rank -1 is out of range [0, 4)");

  const sdk::Mesh mesh({{"dp", 2}, {"pp", 2}, {"tp", 2}}, 8, 3);
  const std::string unknown = "mesh dp=2 x pp=2 x tp=2 has no axis 'ep' (axes: dp, pp, tp)";
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.size("ep"); }), unknown);
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.coord("ep"); }), unknown);
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.group_ranks({"dp", "ep"}); }), unknown);
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.describe_groups({"ep"}); }), unknown);
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.coords_of(8); }),
            "mesh dp=2 x pp=2 x tp=2: rank 8 is out of range [0, 8)");
  EXPECT_EQ(mesh_refusal([&] {
              (void)mesh.rank_of(std::vector<int32_t>{0, 1});
            }),
            "mesh dp=2 x pp=2 x tp=2: 2 coordinates given for 3 axes");
  EXPECT_EQ(mesh_refusal([&] {
              (void)mesh.rank_of(std::vector<int32_t>{0, 2, 0});
            }),
            "mesh dp=2 x pp=2 x tp=2: coordinate 2 of axis 'pp' is out of range [0, 2)");
  EXPECT_EQ(mesh_refusal([&] { (void)mesh.group_ranks({}); }),
            "mesh dp=2 x pp=2 x tp=2: a group needs at least one axis (axes: dp, pp, tp)");
  EXPECT_EQ(mesh_refusal([&] {
              (void)mesh.group_ranks({"tp", "tp"});
            }),
            "mesh dp=2 x pp=2 x tp=2: axis 'tp' is named twice in a group");
  EXPECT_EQ(mesh_refusal([&] {
              (void)mesh.group_ranks({"tp", "dp"});
            }),
            "mesh dp=2 x pp=2 x tp=2: a group's axes must follow the mesh's order (dp, pp, tp), "
            "but 'dp' comes after 'tp'");
}

// Per shape, every combination of its axes (in mesh order) as a group on
// real communicators: its size, this rank's position, and collectives over
// it against group_ranks().
void expect_groups_match(const Axes& axes, const std::vector<Names>& combos) {
  run_mesh_ranks(axes, [&](const sdk::Mesh& mesh, sdk::CommView& world) {
    for (const Names& names : combos) {
      std::string label;
      for (const std::string& n : names) label += n + " ";
      SCOPED_TRACE(mesh.describe() + ", rank " + std::to_string(mesh.rank()) + ", group " + label);
      const std::vector<int32_t> ranks = mesh.group_ranks(names);
      const std::unique_ptr<sdk::CommView> group = mesh.group(world, names);
      ASSERT_NE(group, nullptr);
      EXPECT_EQ(group->size(), static_cast<int32_t>(ranks.size()));
      const auto at = std::find(ranks.begin(), ranks.end(), mesh.rank());
      ASSERT_NE(at, ranks.end());
      EXPECT_EQ(group->rank(), static_cast<int32_t>(at - ranks.begin()));
      // One axis: the position is the coordinate on it.
      if (names.size() == 1) {
        EXPECT_EQ(group->rank(), mesh.coord(names.front()));
      }
      std::vector<int32_t> sum{mesh.rank()};
      group->allreduce(std::span<int32_t>(sum));
      EXPECT_EQ(sum.front(), std::accumulate(ranks.begin(), ranks.end(), 0));
      const std::vector<int32_t> mine{mesh.rank()};
      std::vector<int32_t> gathered(ranks.size());
      group->allgather(std::span<const int32_t>(mine), std::span<int32_t>(gathered));
      EXPECT_EQ(gathered, ranks);  // position i holds world rank ranks[i]
    }
  });
}

TEST(SdkMesh, GroupsOnInmemoryRanksMatchGroupRanks) {
  expect_groups_match(
      {{"dp", 2}, {"pp", 2}, {"tp", 2}},
      {{"tp"}, {"pp"}, {"dp"}, {"dp", "pp"}, {"dp", "tp"}, {"pp", "tp"}, {"dp", "pp", "tp"}});
  expect_groups_match({{"a", 2}, {"b", 3}}, {{"a"}, {"b"}, {"a", "b"}});
  expect_groups_match({{"dp", 3}, {"pp", 1}, {"tp", 2}}, {{"pp"}, {"tp"}, {"dp", "pp"}, {"dp"}});
  expect_groups_match({{"dp", 3}}, {{"dp"}});
}

TEST(SdkMesh, GroupRefusesACommunicatorOfAnotherWorld) {
  run_mesh_ranks({{"dp", 2}}, [](const sdk::Mesh& mesh, sdk::CommView& world) {
    const sdk::Mesh wider({{"dp", 2}, {"tp", 2}}, 4, mesh.rank());
    EXPECT_EQ(mesh_refusal([&] { (void)wider.group(world, {"tp"}); }),
              "mesh dp=2 x tp=2 is for rank " + std::to_string(mesh.rank()) +
                  " of 4, but the communicator is rank " + std::to_string(mesh.rank()) + " of 2");
  });
}

}  // namespace tessera::mesh_test
