// The host's TCP store, server and clients in this process
// over loopback: every operation, the blocking ones released or timing out,
// atomicity under several client threads, namespaces, the end of a run's
// keys, and the failures a rank meets (nothing answers, a silent peer, the
// server gone mid-get, the address in use). Every wait is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../support/error_of.hpp"
#include "../support/loopback.hpp"
#include "tessera/core/tcp_store.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::store {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& b) { return {b.begin(), b.end()}; }

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

using test::expect_mentions;
using Listener = test::LoopbackListener;

// A port nothing listens on right now.
int32_t closed_port() { return test::free_loopback_port(); }

class TcpStore : public ::testing::Test {
 protected:
  TcpStoreServer server{"127.0.0.1", 0};
  [[nodiscard]] std::unique_ptr<TcpStoreClient> client(const std::string& ns = "run",
                                                       int64_t timeout_ms = 5000) const {
    return std::make_unique<TcpStoreClient>("127.0.0.1", server.port(), ns, timeout_ms);
  }
};

TEST_F(TcpStore, SetThenGetFromAnotherClient) {
  ASSERT_GT(server.port(), 0);
  auto a = client();
  auto b = client();
  a->set("k", bytes("value"));
  EXPECT_EQ(text(b->get("k", 1000)), "value");
  a->set("k", bytes(""));  // replaced, and empty values are values
  EXPECT_EQ(text(b->get("k", 1000)), "");
  EXPECT_EQ(server.connections(), 2U);
  EXPECT_EQ(server.count(""), 1U);
  EXPECT_EQ(a->description(), "TCP store at 127.0.0.1:" + std::to_string(server.port()));
}

TEST_F(TcpStore, BlockingGetIsReleasedByALaterSet) {
  auto reader = client();
  auto writer = client();
  const auto start = Clock::now();
  auto got = std::async(std::launch::async, [&] { return text(reader->get("late", 5000)); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(got.wait_for(0ms), std::future_status::timeout) << "get returned before the set";
  writer->set("late", bytes("here"));
  ASSERT_EQ(got.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(got.get(), "here");
  EXPECT_GE(ms_since(start), 100);
  EXPECT_LT(ms_since(start), 3000);
}

TEST_F(TcpStore, GetTimesOutNamingTheKey) {
  auto c = client();
  const auto start = Clock::now();
  const Error e = test::thrown_error([&] { (void)c->get("never/written", 200); });
  const int64_t waited = ms_since(start);
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"'never/written'", "200 ms", "127.0.0.1"});
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 2000);
  // The connection is still good after a timeout.
  c->set("x", bytes("1"));
  EXPECT_TRUE(c->check({"x"}));
}

TEST_F(TcpStore, AddFromManyThreadsCountsEveryOne) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 25;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::atomic<int64_t> max_seen{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto c = client();
      for (int i = 0; i < kAdds; ++i) {
        const int64_t v = c->add("counter", 1);
        int64_t prev = max_seen.load();
        while (v > prev && !max_seen.compare_exchange_weak(prev, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto c = client();
  EXPECT_EQ(max_seen.load(), kThreads * kAdds);
  EXPECT_EQ(text(c->get("counter", 1000)), std::to_string(kThreads * kAdds));
  EXPECT_EQ(c->add("counter", -200), kThreads * kAdds - 200);
  EXPECT_EQ(c->add("fresh", 5), 5);
  c->set("word", bytes("abc"));
  const Error e = test::thrown_error([&] { (void)c->add("word", 1); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"'run/word'", "not an integer"});
}

TEST_F(TcpStore, OneClientSharedByThreads) {
  auto c = client();
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < 20; ++i) {
        c->set("k" + std::to_string(t) + "/" + std::to_string(i), bytes(std::to_string(i)));
        (void)c->add("total", 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->add("total", 0), 80);
  EXPECT_EQ(c->count("k"), 80);
  EXPECT_EQ(text(c->get("k3/19", 100)), "19");
}

TEST_F(TcpStore, CompareAndSet) {
  auto c = client();
  // Absent expected on an absent key: created.
  CasResult r = c->compare_and_set("leader", std::nullopt, bytes("rank 3"));
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(text(r.value.value()), "rank 3");
  // Absent expected on a present key: kept, and the value is returned.
  r = c->compare_and_set("leader", std::nullopt, bytes("rank 1"));
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(text(r.value.value()), "rank 3");
  // Wrong expected value: kept.
  r = c->compare_and_set("leader", bytes("rank 2"), bytes("rank 1"));
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(text(r.value.value()), "rank 3");
  // Right expected value: swapped.
  r = c->compare_and_set("leader", bytes("rank 3"), bytes("rank 1"));
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(text(c->get("leader", 100)), "rank 1");
  // An expected value on an absent key: stays absent.
  r = c->compare_and_set("nobody", bytes("x"), bytes("y"));
  EXPECT_FALSE(r.swapped);
  EXPECT_FALSE(r.value.has_value());
  EXPECT_FALSE(c->check({"nobody"}));

  // Racing creators: exactly one wins.
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  threads.reserve(6);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto own = client();
      if (own->compare_and_set("race", std::nullopt, bytes(std::to_string(t))).swapped) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_F(TcpStore, WaitAndCheck) {
  auto waiter = client();
  auto writer = client();
  EXPECT_FALSE(waiter->check({"a", "b"}));
  auto done = std::async(std::launch::async, [&] { waiter->wait({"a", "b"}, 5000); });
  writer->set("a", bytes("1"));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(done.wait_for(0ms), std::future_status::timeout) << "wait returned with b missing";
  writer->set("b", bytes("2"));
  ASSERT_EQ(done.wait_for(3s), std::future_status::ready);
  done.get();
  EXPECT_TRUE(waiter->check({"a", "b"}));
  EXPECT_TRUE(waiter->check({}));

  const auto start = Clock::now();
  const Error e = test::thrown_error([&] { waiter->wait({"a", "c", "d"}, 150); });
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"'c', 'd'", "150 ms"});
  EXPECT_EQ(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  EXPECT_LT(ms_since(start), 2000);
}

TEST_F(TcpStore, DeletePrefixRemovesOnlyThoseKeys) {
  auto c = client();
  for (const char* k : {"c0/a", "c0/b", "c0/c/d", "c1/a", "c"}) c->set(k, bytes(k));
  EXPECT_EQ(c->delete_prefix("c0/"), 3);
  EXPECT_FALSE(c->check({"c0/a"}));
  EXPECT_FALSE(c->check({"c0/c/d"}));
  EXPECT_TRUE(c->check({"c1/a", "c"}));
  EXPECT_EQ(c->delete_prefix("c0/"), 0);
  EXPECT_EQ(c->count(""), 2);
  EXPECT_EQ(c->delete_prefix(""), 2);
  EXPECT_EQ(server.count(""), 0U);
}

TEST_F(TcpStore, NamespacesKeepRunsApart) {
  auto one = client("run-1");
  auto two = client("run-2");
  one->set("c0/w/rank0", bytes("one"));
  two->set("c0/w/rank0", bytes("two"));
  EXPECT_EQ(text(one->get("c0/w/rank0", 100)), "one");
  EXPECT_EQ(text(two->get("c0/w/rank0", 100)), "two");
  EXPECT_EQ(one->add("n", 1), 1);
  EXPECT_EQ(two->add("n", 1), 1);
  // Run 1 ends: its keys go, run 2's stay.
  EXPECT_EQ(one->delete_prefix(""), 2);
  EXPECT_EQ(server.count("run-1/"), 0U);
  EXPECT_EQ(server.count("run-2/"), 2U);
  EXPECT_EQ(text(two->get("c0/w/rank0", 100)), "two");
  EXPECT_EQ(server.erase_prefix("run-2/"), 2U);
}

TEST_F(TcpStore, ServerGoneMidGetIsAnErrorNotAHang) {
  auto c = client("run", 10000);
  const auto start = Clock::now();
  auto got = std::async(std::launch::async,
                        [&] { return test::thrown_error([&] { c->get("k", 10000); }); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(server.stop(0ms), 1U);  // one client was connected
  ASSERT_EQ(got.wait_for(5s), std::future_status::ready) << "get still blocked after the stop";
  const Error e = got.get();
  EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
  expect_mentions(e.what(), {"TCP store at 127.0.0.1", "'k'"});
  EXPECT_LT(ms_since(start), 5000);
  // Later requests fail at once.
  const Error again = test::thrown_error([&] { c->set("x", bytes("1")); });
  EXPECT_EQ(again.status(), TESSERA_ERR_PEER_LOST);
  // Nobody can connect any more.
  const Error refused = test::thrown_error([&] { (void)client("run", 200); });
  EXPECT_EQ(refused.status(), TESSERA_ERR_TIMEOUT);
}

TEST_F(TcpStore, StopWaitsForClientsBoundedly) {
  {
    auto c = client();
    c->set("k", bytes("v"));
    EXPECT_EQ(server.await_clients(100ms), 1U);
    auto leave = std::async(std::launch::async, [&c] {
      std::this_thread::sleep_for(100ms);
      c.reset();
    });
    const auto start = Clock::now();
    EXPECT_EQ(server.await_clients(5000ms), 0U);
    EXPECT_LT(ms_since(start), 3000);
    leave.get();
  }
  EXPECT_EQ(server.stop(1000ms), 0U);
  EXPECT_EQ(server.count(""), 1U);  // the data outlives the connections
}

TEST(TcpStoreFailures, NothingAnswersNamesTheAddressAndTimeout) {
  const int32_t port = closed_port();
  const auto start = Clock::now();
  const Error e = test::thrown_error(
      [&] { const TcpStoreClient c("127.0.0.1", port, "run", 300, "MASTER_ADDR:MASTER_PORT"); });
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"127.0.0.1:" + std::to_string(port), "MASTER_ADDR:MASTER_PORT",
                             "300 ms", "refused"});
  EXPECT_GE(ms_since(start), 250);
  EXPECT_LT(ms_since(start), 2000);
}

TEST(TcpStoreFailures, ClientRetriesUntilTheServerComes) {
  const int32_t port = closed_port();
  std::optional<TcpStoreServer> server;
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(150ms);
    server.emplace("127.0.0.1", port);
  });
  const TcpStoreClient c("127.0.0.1", port, "run", 5000);
  late.get();
  EXPECT_EQ(server->port(), port);
}

TEST(TcpStoreFailures, SilentPeerIsBoundedByTheTimeout) {
  const Listener silent;
  const auto start = Clock::now();
  const Error e =
      test::thrown_error([&] { const TcpStoreClient c("127.0.0.1", silent.port(), "", 300); });
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"did not answer", "300 ms"});
  EXPECT_LT(ms_since(start), 2000);
}

TEST(TcpStoreFailures, AddressInUseIsNamed) {
  const Listener busy;
  const Error e = test::thrown_error([&] { const TcpStoreServer s("127.0.0.1", busy.port()); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"127.0.0.1:" + std::to_string(busy.port()), "in use", "MASTER_PORT"});
}

}  // namespace
}  // namespace tessera::store
