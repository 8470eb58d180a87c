// The SDK's UnitReducer (tessera/sdk/unit_reduce.hpp) on a backend whose
// non-blocking posts finish the operation before returning and hand back no
// work (*work == nullptr, as the nccl backend does for staged host buffers):
// two ranks as threads run a whole backward sweep (bind, tied parameters,
// reduce_completed) and each rank's gradient shard must hold exactly the
// sum of both ranks' gradients added to what it held, for the f32 and bf16
// wires, overlapped and blocking. The in-memory, gloo and mpi backends always
// return a work handle, so only a stand-in covers this path on CPU.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "fake_tables.hpp"
#include "tessera/c/backend.h"
#include "tessera/core/host_api.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/unit_reduce.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::unit_reduce_test {
namespace {

namespace sdk = tessera::sdk;
using test::FakeModel;
using test::FakeParam;
using test::FakeUnit;

// The ranks of one stand-in communicator, threads of this process. Every
// post meets the other ranks' posts of the same operation, computes this
// rank's result from their buffers and waits until every rank has read
// them, so it is complete when it returns, blocking or not.
struct Group {
  explicit Group(const tessera_host_api* host_api, int32_t ranks)
      : host(host_api),
        size(ranks),
        posted(static_cast<size_t>(ranks)),
        nonblocking_posts(static_cast<size_t>(ranks), 0),
        blocking_posts(static_cast<size_t>(ranks), 0) {}

  // Waits until every rank has arrived (10 s at most, or until abort()).
  tessera_status rendezvous() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return TESSERA_OK;
    }
    const bool met =
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return generation != gen || aborted; });
    if (aborted) return TESSERA_ERR_PEER_LOST;
    return met ? TESSERA_OK : TESSERA_ERR_TIMEOUT;
  }
  void abort() {
    const std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }

  const tessera_host_api* host;
  int32_t size;
  std::mutex mu;
  std::condition_variable cv;
  int32_t arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const tessera_coll_args*> posted;  // each rank's operation
  // Posts per rank, each written by its own rank only.
  std::vector<int32_t> nonblocking_posts;
  std::vector<int32_t> blocking_posts;
};

struct RankComm {
  Group* group;
  int32_t rank;
};

RankComm* rank_comm(tessera_comm* c) { return reinterpret_cast<RankComm*>(c); }
const RankComm* rank_comm(const tessera_comm* c) { return reinterpret_cast<const RankComm*>(c); }

float load(const tessera_buffer& b, size_t i) {
  if (b.dtype == TESSERA_F32) return static_cast<const float*>(b.data)[i];
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(b.data)[i]) << 16U;
  return std::bit_cast<float>(bits);
}
void store(const tessera_buffer& b, size_t i, float v) {
  if (b.dtype == TESSERA_F32) {
    static_cast<float*>(b.data)[i] = v;
    return;
  }
  const uint32_t bits = std::bit_cast<uint32_t>(v);  // round to nearest even
  static_cast<uint16_t*>(b.data)[i] =
      static_cast<uint16_t>((bits + 0x7FFFU + ((bits >> 16U) & 1U)) >> 16U);
}

tessera_status fail(const Group& g, tessera_status status, const std::string& message) {
  g.host->set_error(g.host->ctx, status, message.c_str());
  return status;
}

// Only a SUM reduce-scatter of f32 or bf16 (what UnitReducer posts
// without replicas).
tessera_status post(tessera_comm* comm, const tessera_coll_args* args, tessera_work** work) {
  RankComm& c = *rank_comm(comm);
  Group& g = *c.group;
  if (work != nullptr) *work = nullptr;
  if (args->coll != TESSERA_COLL_REDUCE_SCATTER || args->op != TESSERA_SUM ||
      (args->send.dtype != TESSERA_F32 && args->send.dtype != TESSERA_BF16) ||
      args->recv.dtype != args->send.dtype ||
      args->send.count != args->recv.count * static_cast<uint64_t>(g.size)) {
    return fail(g, TESSERA_ERR_UNSUPPORTED, "stand-in backend: only a SUM reduce-scatter");
  }
  g.posted[static_cast<size_t>(c.rank)] = args;
  if (const tessera_status s = g.rendezvous(); s != TESSERA_OK) return fail(g, s, "first meeting");
  const size_t n = args->recv.count;
  for (const tessera_coll_args* other : g.posted) {
    if (other->coll != args->coll || other->recv.count != n ||
        other->send.dtype != args->send.dtype)
      return fail(g, TESSERA_ERR_INTERNAL, "stand-in backend: ranks posted different operations");
  }
  for (size_t i = 0; i < n; ++i) {
    float sum = 0.0F;
    for (const tessera_coll_args* other : g.posted)
      sum += load(other->send, static_cast<size_t>(c.rank) * n + i);
    store(args->recv, i, sum);
  }
  // Nobody returns (and reuses its send buffer) while a peer still reads it.
  if (const tessera_status s = g.rendezvous(); s != TESSERA_OK) return fail(g, s, "second meeting");
  ++(work != nullptr ? g.nonblocking_posts : g.blocking_posts)[static_cast<size_t>(c.rank)];
  return TESSERA_OK;
}

// No work is ever handed out, so none may be waited on, tested or freed.
tessera_status no_work(tessera_work* /*work*/, int64_t /*timeout_ms*/) {
  return TESSERA_ERR_INTERNAL;
}

tessera_backend_api stand_in_api() {
  tessera_backend_api api{};
  api.struct_size = sizeof api;
  api.capabilities = TESSERA_BACKEND_CAP_THREAD_RANKS | TESSERA_BACKEND_CAP_CPU_BUFFERS;
  api.comm_rank = [](const tessera_comm* c) { return rank_comm(c)->rank; };
  api.comm_size = [](const tessera_comm* c) { return rank_comm(c)->group->size; };
  api.post = &post;
  api.work_wait = &no_work;
  api.work_test = [](tessera_work* /*work*/, int32_t* /*done*/) -> tessera_status {
    return TESSERA_ERR_INTERNAL;
  };
  api.work_free = [](tessera_work* /*work*/) {};
  return api;
}

// embed: a [0,6) b [6,10); mid: c [10,15), t tied to embed.a; head: d
// [15,18). Two ranks shard the units unevenly (10, 5 and 3 elements).
FakeModel reduce_model() {
  return FakeModel({
      FakeUnit{"embed", {FakeParam{"a", {2, 3}}, FakeParam{"b", {4}}}},
      FakeUnit{"mid", {FakeParam{"c", {5}}, FakeParam{"t", {2, 3}, 0, 0}}},
      FakeUnit{"head", {FakeParam{"d", {3}}}},
  });
}

// Rank `rank`'s gradient of element i of slot p of model unit m: halves
// below 16, so every sum is exact in bf16 too.
float contribution(int32_t rank, int32_t m, int32_t p, uint64_t i) {
  return static_cast<float>((m * 3 + p * 2 + static_cast<int32_t>(i)) % 7 + 1) *
             static_cast<float>(rank + 1) +
         0.5F * static_cast<float>(rank);
}

// Rank `rank`'s full gradient over the flat layout: every slot's
// contribution, a tied slot's added into its owner's entry.
std::vector<float> rank_gradient(const sdk::FlatLayout& layout, int32_t rank) {
  std::vector<float> flat(layout.total(), 0.0F);
  for (int32_t m = 0; m < layout.num_units(); ++m) {
    for (size_t p = 0; p < layout.num_slots(m); ++p) {
      const sdk::FlatEntry& e = layout.entry(layout.entry_of(m, static_cast<int32_t>(p)));
      for (uint64_t i = 0; i < e.numel; ++i)
        flat[e.offset + i] += contribution(rank, m, static_cast<int32_t>(p), i);
    }
  }
  return flat;
}

class UnitReduceWithoutWork
    : public ::testing::TestWithParam<std::tuple<tessera_dtype, bool /*blocking*/>> {};

TEST_P(UnitReduceWithoutWork, EveryRankAddsTheSumOfBothRanksGradients) {
  const tessera_dtype wire = std::get<0>(GetParam());
  const bool blocking = std::get<1>(GetParam());
  constexpr int32_t kRanks = 2;
  constexpr float kBase = 0.25F;  // what the gradient shard holds before
  const FakeModel model = reduce_model();
  const HostContext host_ctx("strategy.test");
  const sdk::Host host(host_ctx.api());
  const sdk::ModelView view(host, model.api(), model.handle());
  const sdk::FlatLayout layout(view);
  ASSERT_EQ(layout.total(), 18U);
  const tessera_backend_api api = stand_in_api();
  Group group(host_ctx.api(), kRanks);
  std::vector<float> expected_full(layout.total(), 0.0F);
  for (int32_t r = 0; r < kRanks; ++r) {
    const std::vector<float> g = rank_gradient(layout, r);
    for (size_t i = 0; i < g.size(); ++i) expected_full[i] += g[i];
  }
  std::vector<std::vector<float>> shards(kRanks);
  std::vector<int64_t> reduce_scatters(kRanks, -1);
  std::vector<int32_t> left_over(kRanks, -1);  // units still holding buffers

  run_rank_threads(
      kRanks,
      [&](int rank) {
        RankComm rc{&group, rank};
        sdk::CommView comm(host, &api, reinterpret_cast<tessera_comm*>(&rc));
        const sdk::UnitShardLayout units(layout, kRanks, rank);
        sdk::UnitReducer reducer(host, comm, units, wire);
        std::vector<float> shard(units.shard_elements(), kBase);
        sdk::SlotPointers grads(layout);
        // The backward: the last model unit first, each writing its slots
        // (mid's tied t into embed's buffer) and reducing what completes.
        for (int32_t m = layout.num_units() - 1; m >= 0; --m) {
          reducer.bind(grads, m);
          for (size_t p = 0; p < layout.num_slots(m); ++p) {
            const sdk::FlatEntry& e = layout.entry(layout.entry_of(m, static_cast<int32_t>(p)));
            float* g = grads.unit(m)[p];
            for (uint64_t i = 0; i < e.numel; ++i)
              g[i] += contribution(rank, m, static_cast<int32_t>(p), i);
          }
          reducer.reduce_completed(grads, shard, m, blocking);
        }
        int32_t held = 0;
        for (int32_t o = 0; o < units.num_units(); ++o)
          held += reducer.has_grads(o) || reducer.pending(o) ? 1 : 0;
        left_over[static_cast<size_t>(rank)] = held;
        reduce_scatters[static_cast<size_t>(rank)] = reducer.reduce_scatters();
        shards[static_cast<size_t>(rank)] = shard;
      },
      [&](int /*rank*/, const std::string& /*message*/) { group.abort(); });

  for (int32_t rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto r = static_cast<size_t>(rank);
    EXPECT_EQ(group.nonblocking_posts[r], 3);  // one reduce-scatter per unit
    EXPECT_EQ(group.blocking_posts[r], 0);
    EXPECT_EQ(reduce_scatters[r], 3);
    EXPECT_EQ(left_over[r], 0);
    const sdk::UnitShardLayout units(layout, kRanks, rank);
    const std::vector<float>& shard = shards[r];
    ASSERT_EQ(shard.size(), units.shard_elements());
    for (int32_t o = 0; o < units.num_units(); ++o) {
      const sdk::UnitShard& u = units.unit(o);
      for (uint64_t j = 0; j < u.shard.shard_size; ++j) {
        // Element j of this rank's piece is element rank * shard_size + j
        // of the unit; past the unit's end it is padding (zero).
        const uint64_t k = static_cast<uint64_t>(rank) * u.shard.shard_size + j;
        const float sum = k < u.unit.size() ? expected_full[u.unit.begin + k] : 0.0F;
        EXPECT_EQ(shard[u.shard_offset + j], kBase + sum) << "unit " << o << " element " << j;
      }
    }
  }
  // The pieces of both ranks cover every gradient: nothing is all zeros.
  EXPECT_NE(shards[0], std::vector<float>(shards[0].size(), kBase));
  EXPECT_NE(shards[1], std::vector<float>(shards[1].size(), kBase));
}

INSTANTIATE_TEST_SUITE_P(
    WiresAndOverlap, UnitReduceWithoutWork,
    ::testing::Combine(::testing::Values(TESSERA_F32, TESSERA_BF16), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<tessera_dtype, bool>>& param_info) {
      return std::string(std::get<0>(param_info.param) == TESSERA_F32 ? "f32" : "bf16") +
             (std::get<1>(param_info.param) ? "_blocking" : "_overlapped");
    });

}  // namespace
}  // namespace tessera::unit_reduce_test
