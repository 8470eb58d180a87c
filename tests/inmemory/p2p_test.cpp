// Point-to-point: ring exchanges with isend/irecv in both orders, blocking
// pairs, tag matching, ordering, shape mismatch, receive timeout, memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "harness.hpp"

namespace tessera::test {
namespace {

using ::testing::HasSubstr;

void ring_exchange(Comm& comm, bool receive_first) {
  const int32_t p = comm.size();
  const int32_t next = (comm.rank() + 1) % p;
  const int32_t prev = (comm.rank() + p - 1) % p;
  std::vector<int64_t> out(1000, comm.rank());
  std::vector<int64_t> in(1000, -1);
  if (receive_first) {
    Work r = comm.start(p2p(TESSERA_COLL_RECV, buf(in), prev, 3));
    Work s = comm.start(p2p(TESSERA_COLL_SEND, buf(out), next, 3));
    r.wait();
    s.wait();
  } else {
    Work s = comm.start(p2p(TESSERA_COLL_SEND, buf(out), next, 3));
    Work r = comm.start(p2p(TESSERA_COLL_RECV, buf(in), prev, 3));
    s.wait();
    r.wait();
  }
  for (const int64_t v : in) {
    if (v != prev) throw std::runtime_error("ring exchange delivered wrong data");
  }
}

class P2PRanks : public ::testing::TestWithParam<int32_t> {};

TEST_P(P2PRanks, RingExchangeInBothOrders) {
  BackendConfig config;
  config.world_size = GetParam();
  run_ok(config, [](Comm& comm) {
    for (int i = 0; i < 10; ++i) {
      ring_exchange(comm, false);
      ring_exchange(comm, true);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PRanks, ::testing::Values(2, 3, 4));

TEST(P2P, BlockingPairsAndTagsMatchInOrder) {
  BackendConfig config;
  config.world_size = 2;
  run_ok(config, [](Comm& comm) {
    const int32_t peer = 1 - comm.rank();
    if (comm.rank() == 0) {
      // Two messages per tag, tags 0..2: received below in another tag order.
      for (int32_t tag = 0; tag < 3; ++tag) {
        for (int32_t k = 0; k < 2; ++k) {
          std::vector<int32_t> v(4, tag * 10 + k);
          comm.run(p2p(TESSERA_COLL_SEND, buf(v), peer, tag));
        }
      }
      std::vector<int32_t> reply(4);
      comm.run(p2p(TESSERA_COLL_RECV, buf(reply), peer, 9));
      if (reply[0] != 42) throw std::runtime_error("blocking reply is wrong");
    } else {
      for (int32_t tag = 2; tag >= 0; --tag) {
        for (int32_t k = 0; k < 2; ++k) {
          std::vector<int32_t> v(4, -1);
          comm.run(p2p(TESSERA_COLL_RECV, buf(v), peer, tag));
          if (v[0] != tag * 10 + k) {
            throw std::runtime_error("tag " + std::to_string(tag) + " message " +
                                     std::to_string(k) + " arrived out of order");
          }
        }
      }
      std::vector<int32_t> reply(4, 42);
      comm.run(p2p(TESSERA_COLL_SEND, buf(reply), peer, 9));
    }
  });
}

TEST(P2P, ShapeMismatchFailsTheReceive) {
  BackendConfig config;
  config.world_size = 2;
  std::string message;
  run_ok(config, [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::vector<float> v(8, 1.0F);
      comm.run(p2p(TESSERA_COLL_SEND, buf(v), 1, 0));
    } else {
      std::vector<float> v(5);
      try {
        comm.run(p2p(TESSERA_COLL_RECV, buf(v), 0, 0));
      } catch (const Error& e) {
        if (e.status() != TESSERA_ERR_MISMATCH) throw;
        message = e.what();
      }
    }
  });
  EXPECT_THAT(message, HasSubstr("expects count=5 f32 but rank 0 sent count=8 f32"));
}

TEST(P2P, ReceiveTimeoutNamesThePeer) {
  BackendConfig config;
  config.world_size = 2;
  std::string message;
  FakeHost host;
  Backend backend(host, config);
  run_ranks(
      backend,
      [&](Comm& comm) {
        if (comm.rank() != 0) return;
        std::vector<float> v(5);
        auto a = p2p(TESSERA_COLL_RECV, buf(v), 1, 4);
        a.timeout_ms = 100;
        Work w = comm.start(a);
        try {
          w.wait();
        } catch (const Error& e) {
          if (e.status() == TESSERA_ERR_TIMEOUT) message = e.what();
        }
      },
      false);
  EXPECT_THAT(message, HasSubstr("recv from rank 1 (tag 4) on rank 0 of group of 2 timed out "
                                 "after 100 ms: rank 1 sent no matching message"));
}

TEST(P2P, BufferedMessagesAreTrackedUntilReceived) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 2;
  Backend backend(host, config);
  int64_t while_buffered = -1;
  const auto outcomes = run_ranks(backend, [&](Comm& comm) {
    std::vector<double> v(16, 1.0);
    const auto barrier = args(TESSERA_COLL_BARRIER, raw_buf(nullptr, 0, TESSERA_F32),
                              raw_buf(nullptr, 0, TESSERA_F32));
    if (comm.rank() == 0) comm.run(p2p(TESSERA_COLL_SEND, buf(v), 1, 0));
    comm.run(barrier);
    if (comm.rank() == 1) {
      while_buffered = host.tracked(0, TESSERA_MEM_COMM);
      comm.run(p2p(TESSERA_COLL_RECV, buf(v), 0, 0));
    }
  });
  for (const auto& o : outcomes) EXPECT_EQ(o.status, TESSERA_OK) << o.message;
  EXPECT_EQ(while_buffered, static_cast<int64_t>(16 * sizeof(double)));
  EXPECT_EQ(host.tracked(0, TESSERA_MEM_COMM), 0);
}

}  // namespace
}  // namespace tessera::test
