// Multi-process behaviour specific to the gloo backend, with each rank a
// forked child: a killed rank is named by every survivor, ranks that never
// arrive are named at connect, and so is one that stopped while connecting,
// a receive nobody sends to names its peer, the
// raw library calls compute what the checked path computes, a finished
// run leaves no keys in a file store, an abort ends a send gloo had
// queued for writing, and ranks meet
// through the TCP store rank 0 serves with only MASTER_ADDR and MASTER_PORT
// (and fail within the timeout when rank 0 is gone).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../support/host_store.hpp"
#include "../support/loopback.hpp"
#include "../support/temp_dir.hpp"
#include "process_ranks.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::glootest {
namespace {

using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

std::string describe(const std::vector<RankOutcome>& outcomes) {
  std::string out;
  for (const auto& o : outcomes) {
    out += "\n  rank " + std::to_string(o.rank) + " exit " + std::to_string(o.exit_code) + ": " +
           o.text;
  }
  return out;
}

TEST(GlooProcesses, KilledRankIsNamedByEverySurvivor) {
  constexpr int kVictim = 1;
  const auto outcomes = run_ranks(3, {0, 1, 2}, {}, [](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(5000));
    auto world = backend->connect();
    std::vector<float> data(4096, 1.0F);
    for (int i = 0; i < 1000; ++i) {
      if (rank == kVictim && i == 20) ::raise(SIGKILL);
      try {
        world->allreduce(std::span<float>(data), TESSERA_SUM);
      } catch (const Error& e) {
        text = e.what();
        return e.status() == TESSERA_ERR_PEER_LOST ? 0 : 2;
      }
    }
    text = "the loop finished although rank 1 was killed";
    return 3;
  });
  ASSERT_EQ(outcomes.size(), 3U);
  EXPECT_EQ(outcomes[1].exit_code, -SIGKILL) << describe(outcomes);
  for (const int survivor : {0, 2}) {
    const auto& o = outcomes[static_cast<size_t>(survivor)];
    EXPECT_EQ(o.exit_code, 0) << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "rank 1 is lost")) << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "allreduce #")) << describe(outcomes);
  }
}

TEST(GlooProcesses, RanksThatNeverArriveAreNamedAtConnect) {
  // Ranks 0 and 1 of a world of 4 start; 2 and 3 never do.
  const auto outcomes = run_ranks(4, {0, 1}, {}, [](int, std::string& text) {
    auto backend = open_gloo({}, milliseconds(800));
    try {
      auto world = backend->connect();
    } catch (const Error& e) {
      text = e.what();
      return e.status() == TESSERA_ERR_TIMEOUT ? 0 : 2;
    }
    text = "connect succeeded without ranks 2 and 3";
    return 3;
  });
  for (const auto& o : outcomes) {
    EXPECT_EQ(o.exit_code, 0) << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "ranks 2, 3 never arrived")) << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "tessera launch -n 4")) << describe(outcomes);
  }
}

// A rank that arrives and then stops before it connects is named by the
// others, whatever gloo's own wait reports (here a missing address key). It
// only writes its arrival key, as a process killed right after arriving
// leaves it; the two that connect and fail do not name each other.
TEST(GlooProcesses, RankStoppedWhileConnectingIsNamed) {
  constexpr int kStopped = 2;
  const auto outcomes = run_ranks(3, {0, 1, 2}, {}, [](int rank, std::string& text) {
    if (rank == kStopped) {
      const std::string dir =
          std::getenv("TESSERA_RENDEZVOUS_DIR");              // NOLINT(concurrency-mt-unsafe)
      const std::string run = std::getenv("TESSERA_RUN_ID");  // NOLINT(concurrency-mt-unsafe)
      const auto store = test::file_store(dir, "test", run);
      store->set(run + "/c0/w/join/" + std::to_string(kStopped), {'p'});
      return 0;
    }
    auto backend = open_gloo({}, milliseconds(1000));
    try {
      auto world = backend->connect();
    } catch (const Error& e) {
      text = e.what();
      return e.status() == TESSERA_ERR_PEER_LOST ? 0 : 2;
    }
    text = "connect succeeded without rank 2";
    return 3;
  });
  for (const int survivor : {0, 1}) {
    const auto& o = outcomes[static_cast<size_t>(survivor)];
    EXPECT_EQ(o.exit_code, 0) << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "connecting group 'world' (rank " + std::to_string(survivor) +
                                     " of 3) through the file store"))
        << describe(outcomes);
    EXPECT_TRUE(contains(o.text, "failed: rank 2 stopped while connecting (killed or frozen"))
        << describe(outcomes);
  }
}

TEST(GlooProcesses, UnansweredReceiveNamesItsPeer) {
  // Rank 0 waits for a message rank 1 never sends, on a duplicate of the
  // world; the world keeps rank 1 waiting until rank 0 has its error.
  const auto outcomes = run_ranks(2, {0, 1}, {}, [](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(5000));
    auto world = backend->connect();
    auto dup = world->split(0, rank);
    int code = 0;
    if (rank == 0) {
      std::vector<int32_t> in(3, 0);
      tessera_coll_args args{};
      args.coll = TESSERA_COLL_RECV;
      args.recv = cpu_buffer(std::span<int32_t>(in));
      args.send = args.recv;
      args.peer = 1;
      args.tag = 7;
      args.timeout_ms = 300;
      try {
        dup->run(args);
        text = "the receive completed without a sender";
        code = 3;
      } catch (const Error& e) {
        text = e.what();
        code = e.status() == TESSERA_ERR_TIMEOUT ? 0 : 2;
      }
    }
    world->barrier();
    return code;
  });
  EXPECT_EQ(outcomes[0].exit_code, 0) << describe(outcomes);
  EXPECT_EQ(outcomes[1].exit_code, 0) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[0].text, "recv #1 from rank 1 (tag 7)")) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[0].text, "timed out after")) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[0].text, "rank 1 has not posted it yet (posted 0 of 1)"))
      << describe(outcomes);
}

// Fills `v` with values depending on rank and index, exact in f32 sums.
void fill(std::vector<float>& v, int rank) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i % 97) + 3 * rank);
}

TEST(GlooProcesses, RawCallsComputeWhatPostComputes) {
  for (const char* algorithm : {"auto", "ring", "ring_chunked", "halving_doubling", "bcube"}) {
    const auto outcomes = run_ranks(3, {0, 1, 2}, {}, [&](int rank, std::string& text) {
      auto backend = open_gloo({std::string("algorithm=") + algorithm}, milliseconds(10000));
      auto world = backend->connect();
      for (const size_t n : {size_t{5}, size_t{4099}, size_t{300000}}) {
        std::vector<float> checked(n);
        std::vector<float> raw(n);
        fill(checked, rank);
        fill(raw, rank);
        world->allreduce(std::span<float>(checked), TESSERA_SUM);
        tessera_coll_args args{};
        args.coll = TESSERA_COLL_ALLREDUCE;
        args.send = cpu_buffer(std::span<float>(raw));
        args.recv = args.send;
        args.op = TESSERA_SUM;
        world->run_raw(args);
        if (std::memcmp(checked.data(), raw.data(), n * sizeof(float)) != 0) {
          text = "allreduce of " + std::to_string(n) + " floats differs between post and raw";
          return 1;
        }
      }
      // reduce_scatter and send/recv through raw too.
      std::vector<float> send(3 * 8);
      fill(send, rank);
      std::vector<float> mine(8);
      tessera_coll_args rs{};
      rs.coll = TESSERA_COLL_REDUCE_SCATTER;
      rs.send = cpu_buffer(std::span<float>(send));
      rs.recv = cpu_buffer(std::span<float>(mine));
      rs.op = TESSERA_SUM;
      world->run_raw(rs);
      for (size_t i = 0; i < mine.size(); ++i) {
        const size_t g = static_cast<size_t>(rank) * 8 + i;
        const auto want = static_cast<float>(3 * (g % 97) + 9);
        if (mine[i] != want) {
          text = "raw reduce_scatter element " + std::to_string(i) + " is " +
                 std::to_string(mine[i]) + ", expected " + std::to_string(want);
          return 1;
        }
      }
      return 0;
    });
    for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << algorithm << describe(outcomes);
  }
}

// Every rank holds the run in a file store: the last to finish removes
// the run's keys (worlds, a split, the count itself), so the directory a
// user gave keeps nothing of a finished run.
TEST(GlooProcesses, AFinishedRunLeavesNoKeysInTheFileStore) {
  const test::TempDir dir("gloo-keys");
  const auto outcomes = run_ranks(3, {0, 1, 2}, {}, [&](int rank, std::string& text) {
    auto backend =
        open_gloo({"store=file", "store_dir=" + dir.path().string()}, milliseconds(10000));
    auto world = backend->connect();
    auto half = world->split(rank % 2, rank);
    std::vector<float> v(4, 1.0F);
    world->allreduce(std::span<float>(v), TESSERA_SUM);
    half->allreduce(std::span<float>(v), TESSERA_SUM);
    if (v[0] != (rank % 2 == 0 ? 6.0F : 3.0F)) {
      text = "allreduce gave " + std::to_string(v[0]);
      return 1;
    }
    return 0;
  });
  for (const auto& o : outcomes) ASSERT_EQ(o.exit_code, 0) << describe(outcomes);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind("key.", 0) == 0) left.push_back(name);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " key files left, e.g. " << left.front();
}

// Only MASTER_ADDR and MASTER_PORT: no store option and no directory.
std::map<std::string, std::string> tcp_only(int port) {
  return {{"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TESSERA_RENDEZVOUS_DIR", ""}};
}

TEST(GlooProcesses, TcpStoreWithOnlyMasterAddrAndPort) {
  const auto outcomes = run_ranks(3, {0, 1, 2}, tcp_only(test::free_loopback_port()),
                                  [](int rank, std::string& text) {
                                    auto backend = open_gloo({}, milliseconds(10000));
                                    auto world = backend->connect();
                                    std::vector<float> v(1000, static_cast<float>(rank + 1));
                                    world->allreduce(std::span<float>(v), TESSERA_SUM);
                                    // Splits meet through the store too.
                                    auto half = world->split(rank % 2, rank);
                                    std::vector<float> h(10, static_cast<float>(rank + 1));
                                    half->allreduce(std::span<float>(h), TESSERA_SUM);
                                    text = std::to_string(v[999]) + " " + std::to_string(h[0]);
                                    // Rank 0 serves the store: it leaving first must not fail the
                                    // others.
                                    if (rank != 0) std::this_thread::sleep_for(milliseconds(200));
                                    return 0;
                                  });
  ASSERT_EQ(outcomes.size(), 3U);
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << describe(outcomes);
  EXPECT_EQ(outcomes[0].text, "6.000000 4.000000") << describe(outcomes);  // ranks 0 and 2
  EXPECT_EQ(outcomes[1].text, "6.000000 2.000000") << describe(outcomes);
  EXPECT_EQ(outcomes[2].text, "6.000000 4.000000") << describe(outcomes);
}

TEST(GlooProcesses, TcpStoreGoneBeforeConnectFailsWithinTheTimeout) {
  // Rank 0 starts serving the store, then dies before anyone connects.
  const auto outcomes =
      run_ranks(2, {0, 1}, tcp_only(test::free_loopback_port()), [](int rank, std::string& text) {
        auto backend = open_gloo({}, milliseconds(1500));
        if (rank == 0) ::raise(SIGKILL);
        std::this_thread::sleep_for(milliseconds(300));
        const auto start = std::chrono::steady_clock::now();
        try {
          auto world = backend->connect();
        } catch (const Error& e) {
          const auto waited =
              std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start)
                  .count();
          text = e.what();
          if (waited > 4000) text += " (after " + std::to_string(waited) + " ms)";
          return e.status() == TESSERA_ERR_TIMEOUT && waited <= 4000 ? 0 : 2;
        }
        text = "connect succeeded without rank 0";
        return 3;
      });
  ASSERT_EQ(outcomes.size(), 2U);
  EXPECT_EQ(outcomes[0].exit_code, -SIGKILL) << describe(outcomes);
  EXPECT_EQ(outcomes[1].exit_code, 0) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[1].text, "MASTER_ADDR:MASTER_PORT")) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[1].text, "1500 ms")) << describe(outcomes);
}

// A send gloo has already queued for writing is not among the operations a
// failing pair releases: it used to wait for gloo's own timeout however
// early its group was aborted. Rank 1 posts a 64 MiB receive and stops
// (SIGSTOP), so rank 0's send is matched, partly written and queued; rank 0
// then aborts the world, and the send must end within seconds, not at the
// 30 s timeout.
TEST(GlooProcesses, AnAbortEndsASendQueuedForWriting) {
  const test::TempDir dir("gloo-queued-send");
  const auto pid_file = dir.path() / "rank1.pid";
  constexpr size_t kFloats = size_t{16} << 20;  // 64 MiB
  const auto outcomes = run_ranks(2, {0, 1}, {}, [&](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(30000));
    auto world = backend->connect();
    world->barrier();
    std::vector<float> data(kFloats, 1.0F);
    if (rank == 1) {
      Work posted = world->irecv(cpu_buffer(std::span<float>(data)), 0, 5);
      std::ofstream(pid_file) << ::getpid() << '\n';
      ::raise(SIGSTOP);  // rank 0 kills it
      text = "rank 1 went on";
      return 3;
    }
    std::this_thread::sleep_for(milliseconds(500));  // rank 1's receive is announced
    Work sent = world->isend(cpu_buffer(std::span<float>(data)), 1, 5);
    std::this_thread::sleep_for(milliseconds(300));
    const auto start = std::chrono::steady_clock::now();
    world->abort("the test aborts the world");
    int code = 3;
    try {
      sent.wait();
      text = "the send completed although rank 1 is stopped";
    } catch (const Error& e) {
      const auto waited =
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start)
              .count();
      text = std::string(e.what()) + " (after " + std::to_string(waited) + " ms)";
      code = e.status() == TESSERA_ERR_PEER_LOST && waited < 5000 ? 0 : 2;
    }
    pid_t stopped = 0;
    std::ifstream(pid_file) >> stopped;
    if (stopped > 0) ::kill(stopped, SIGKILL);
    return code;
  });
  ASSERT_EQ(outcomes.size(), 2U);
  EXPECT_EQ(outcomes[0].exit_code, 0) << describe(outcomes);
  EXPECT_TRUE(contains(outcomes[0].text, "the test aborts the world")) << describe(outcomes);
  EXPECT_EQ(outcomes[1].exit_code, -SIGKILL) << describe(outcomes);
}

}  // namespace
}  // namespace tessera::glootest
