// comm_split: ordering by (key, parent rank), opting out, independence of
// sub-groups from their parent, nested splits, logging.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "harness.hpp"

namespace tessera::test {
namespace {

TEST(Split, GroupsByColourOrderedByKeyThenRank) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 4;
  Backend backend(host, config);
  std::vector<int32_t> sub_rank(4, -2);
  std::vector<int32_t> sub_size(4, -2);
  std::vector<std::vector<int32_t>> order(4);
  const auto outcomes = run_ranks(backend, [&](Comm& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    // Even/odd colours, key reversing the order.
    auto sub = comm.split(comm.rank() % 2, -comm.rank());
    sub_rank[r] = sub->rank();
    sub_size[r] = sub->size();
    std::vector<int32_t> mine = {comm.rank()};
    std::vector<int32_t> all(static_cast<size_t>(sub->size()), -1);
    sub->run(args(TESSERA_COLL_ALLGATHER, buf(mine), buf(all)));
    order[r] = all;
  });
  for (const auto& o : outcomes) ASSERT_EQ(o.status, TESSERA_OK) << o.message;
  EXPECT_EQ(sub_rank, (std::vector<int32_t>{1, 1, 0, 0}));
  EXPECT_EQ(sub_size, (std::vector<int32_t>{2, 2, 2, 2}));
  EXPECT_EQ(order[0], (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(order[1], (std::vector<int32_t>{3, 1}));
  const auto logs = host.logs();
  EXPECT_TRUE(std::any_of(logs.begin(), logs.end(), [](const std::string& l) {
    return l.find("split #1") != std::string::npos;
  }));
  EXPECT_TRUE(std::any_of(logs.begin(), logs.end(), [](const std::string& l) {
    return l.find("joined") != std::string::npos;
  }));
}

TEST(Split, NegativeColourOptsOutAndEqualKeysKeepParentOrder) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    auto sub = comm.split(comm.rank() == 1 ? -1 : 0, 7);
    if (comm.rank() == 1) {
      if (sub) throw std::runtime_error("colour -1 returned a communicator");
      return;
    }
    const int32_t want = comm.rank() == 0 ? 0 : comm.rank() - 1;
    if (sub->rank() != want || sub->size() != 3) throw std::runtime_error("bad sub-group rank");
    std::vector<int32_t> x = {comm.rank()};
    sub->run(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
    if (x[0] != 5) throw std::runtime_error("sub-group allreduce gave " + std::to_string(x[0]));
  });
}

// Sub-groups and the parent are independent groups: their operations can be
// interleaved freely from the same threads, and sub-groups can split again.
TEST(Split, SubGroupsAndParentInterleave) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    auto rows = comm.split(comm.rank() / 2, comm.rank());  // {0,1} {2,3}
    auto cols = comm.split(comm.rank() % 2, comm.rank());  // {0,2} {1,3}
    auto single = rows->split(rows->rank(), 0);            // groups of one
    for (int i = 0; i < 20; ++i) {
      std::vector<int32_t> a = {comm.rank()};
      std::vector<int32_t> b = {comm.rank()};
      std::vector<int32_t> c = {comm.rank()};
      std::vector<int32_t> d = {comm.rank()};
      Work wr = rows->start(args(TESSERA_COLL_ALLREDUCE, buf(a), buf(a)));
      cols->run(args(TESSERA_COLL_ALLREDUCE, buf(b), buf(b)));
      comm.run(args(TESSERA_COLL_ALLREDUCE, buf(c), buf(c)));
      single->run(args(TESSERA_COLL_ALLREDUCE, buf(d), buf(d)));
      wr.wait();
      const int32_t row_sum = comm.rank() < 2 ? 1 : 5;
      const int32_t col_sum = comm.rank() % 2 == 0 ? 2 : 4;
      if (a[0] != row_sum || b[0] != col_sum || c[0] != 6 || d[0] != comm.rank()) {
        throw std::runtime_error("interleaved sub-group results are wrong");
      }
    }
  });
}

// A sub-group keeps working after the handle of the group it was split from
// is destroyed.
TEST(Split, SubGroupOutlivesItsParentHandle) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    auto parent = comm.split(0, comm.rank());
    auto pairs = parent->split(comm.rank() % 2, comm.rank());
    parent.reset();
    std::vector<int32_t> x = {comm.rank()};
    pairs->run(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
    if (x[0] != (comm.rank() % 2 == 0 ? 2 : 4)) throw std::runtime_error("bad sub-group result");
  });
}

TEST(Split, SplitAgainstAnotherCollectiveIsAMismatch) {
  BackendConfig config;
  config.world_size = 2;
  FakeHost host;
  Backend backend(host, config);
  std::vector<std::string> messages(2);
  run_ranks(
      backend,
      [&](Comm& comm) {
        try {
          if (comm.rank() == 0) {
            comm.split(0, 0);
          } else {
            comm.run(args(TESSERA_COLL_BARRIER, raw_buf(nullptr, 0, TESSERA_F32),
                          raw_buf(nullptr, 0, TESSERA_F32)));
          }
        } catch (const Error& e) {
          messages[static_cast<size_t>(comm.rank())] = e.what();
        }
      },
      false);
  for (const auto& m : messages) {
    EXPECT_THAT(m, ::testing::HasSubstr("collective mismatch at operation #1"));
    EXPECT_THAT(m, ::testing::HasSubstr("split()"));
    EXPECT_THAT(m, ::testing::HasSubstr("barrier()"));
  }
}

}  // namespace
}  // namespace tessera::test
