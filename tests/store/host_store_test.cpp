// The store as backend plugins reach it: sdk::Store over the host table
// (ABI 1.8). Rank 0 serves the TCP store and removes its run's keys when
// its handle closes; a store a launcher serves is served by no rank;
// failures come back as errors behind the plugin's name.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>

#include "../support/error_of.hpp"
#include "../support/loopback.hpp"
#include "../support/temp_dir.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/tcp_store.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::test {
namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& b) { return {b.begin(), b.end()}; }

// A plugin's host table whose log lines (debug and up) land in `log`.
class LoggedHost {
 public:
  LoggedHost() : context_("backend.storetest") {
    context_.logger()->sinks().push_back(std::make_shared<spdlog::sinks::ostream_sink_mt>(log_));
    context_.logger()->set_level(spdlog::level::debug);
  }
  LoggedHost(const LoggedHost&) = delete;
  LoggedHost& operator=(const LoggedHost&) = delete;
  ~LoggedHost() { context_.logger()->sinks().pop_back(); }
  [[nodiscard]] sdk::Host host() const { return sdk::Host(context_.api()); }
  [[nodiscard]] std::string log() const { return log_.str(); }

 private:
  HostContext context_;
  std::ostringstream log_;
};

sdk::StoreSettings tcp(int32_t port, const std::string& run_id, int64_t timeout_ms) {
  sdk::StoreSettings s;
  s.kind = sdk::StoreKind::kTcp;
  s.tcp_host = "127.0.0.1";
  s.tcp_port = port;
  s.run_id = run_id;
  s.timeout_ms = timeout_ms;
  return s;
}

TEST(HostStore, RankZeroServesAndCleansUpTheRun) {
  const LoggedHost logged;
  const sdk::Host host = logged.host();
  sdk::StoreSettings where = tcp(free_loopback_port(), "run-7", 3000);
  EXPECT_TRUE(where.served_by(0));
  EXPECT_FALSE(where.served_by(1));
  auto service = std::make_unique<sdk::Store>(host, where, "gloo", sdk::StoreUse::kServe);
  {
    sdk::Store rank0(host, where, "gloo");
    sdk::Store rank1(host, where, "gloo");
    EXPECT_EQ(rank1.description(), "TCP store at 127.0.0.1:" + std::to_string(where.tcp_port) +
                                       " (MASTER_ADDR:MASTER_PORT)");
    auto read =
        std::async(std::launch::async, [&] { return text(rank1.await("c0/id", 3000, "the id")); });
    rank0.set("c0/id", bytes("id-bytes"));
    EXPECT_EQ(read.get(), "id-bytes");
    EXPECT_TRUE(rank0.put_if_absent("c0/mesh/0", bytes("addr")));
    EXPECT_FALSE(rank1.put_if_absent("c0/mesh/0", bytes("other")));
    EXPECT_EQ(text(rank1.get("c0/mesh/0", 100)), "addr");
    EXPECT_TRUE(rank1.has({"c0/id", "c0/mesh/0"}));
    EXPECT_FALSE(rank1.has({"c0/id", "c0/mesh/1"}));
    EXPECT_EQ(rank0.add("c0/count", 2), 2);
    const Error e = thrown_error([&] { (void)rank1.await("c9", 100, "rank 3's address"); });
    EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
    expect_mentions(e.what(), {"gloo:", "rank 3's address", "'c9'", "TCP store", "100 ms"});
  }
  service.reset();
  const std::string log = logged.log();
  expect_mentions(log,
                  {"rank 0 serves the TCP store on 127.0.0.1:" + std::to_string(where.tcp_port),
                   "removed the 3 keys of run 'run-7'", "holding 0 keys", ", 0 of "});
  where.timeout_ms = 300;
  const Error gone = thrown_error([&] { const sdk::Store late(host, where, "gloo"); });
  EXPECT_EQ(gone.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(gone.what(), {"gloo:", "MASTER_ADDR:MASTER_PORT", "300 ms"});
}

TEST(HostStore, AStoreServedElsewhereIsServedByNoRank) {
  store::TcpStoreServer launcher("127.0.0.1", 0);
  const LoggedHost logged;
  sdk::StoreSettings where = tcp(launcher.port(), "run-8", 3000);
  where.tcp_served_elsewhere = true;
  EXPECT_FALSE(where.served_by(0));
  sdk::Store rank0(logged.host(), where, "gloo");
  EXPECT_EQ(rank0.description(),
            "TCP store at 127.0.0.1:" + std::to_string(launcher.port()) + " (TESSERA_STORE_ADDR)");
  rank0.set("k", bytes("v"));
  EXPECT_EQ(text(sdk::Store(logged.host(), where, "gloo").await("k", 3000, "the key")), "v");
  // Under the run's namespace in the server.
  EXPECT_EQ(launcher.count("run-8/"), 1U);
}

TEST(HostStore, BusyPortNamesPluginAndAddress) {
  const LoopbackListener busy;
  const LoggedHost logged;
  const Error e = thrown_error([&] {
    const sdk::Store s(logged.host(), tcp(busy.port(), "r", 1000), "nccl", sdk::StoreUse::kServe);
  });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl:", "MASTER_ADDR:MASTER_PORT", "in use",
                             "127.0.0.1:" + std::to_string(busy.port())});
}

TEST(HostStore, OnlyATcpStoreIsServed) {
  const TempDir dir("host-store");
  const LoggedHost logged;
  sdk::StoreSettings where;
  where.kind = sdk::StoreKind::kFile;
  where.dir = dir.path().string();
  const Error e = thrown_error(
      [&] { const sdk::Store s(logged.host(), where, "gloo", sdk::StoreUse::kServe); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"gloo:", "only a TCP store can be served", "file store"});
  // Not served, it opens and works.
  sdk::Store s(logged.host(), where, "gloo");
  s.set("a", bytes("1"));
  EXPECT_EQ(s.add("a", 4), 5);
  EXPECT_EQ(s.delete_prefix(""), 1);
}

// Where no rank serves the store, every process holds the run: the keys
// stay while any holder is open and go with the last one.
TEST(HostStore, TheLastProcessOfARunRemovesItsKeys) {
  const TempDir dir("host-store");
  const LoggedHost logged;
  sdk::StoreSettings where;
  where.kind = sdk::StoreKind::kFile;
  where.dir = dir.path().string();
  where.run_id = "run-9";
  EXPECT_EQ(where.process_use(0, false), sdk::StoreUse::kHoldRun);
  sdk::StoreSettings other = where;
  other.run_id = "run-10";
  sdk::Store bystander(logged.host(), other, "gloo");
  bystander.set("k", bytes("kept"));
  auto rank0 = std::make_unique<sdk::Store>(logged.host(), where, "gloo", sdk::StoreUse::kHoldRun);
  auto rank1 = std::make_unique<sdk::Store>(logged.host(), where, "gloo", sdk::StoreUse::kHoldRun);
  sdk::Store reader(logged.host(), where, "gloo");
  rank1->set("c0/w/join/1", bytes("pid 2"));
  rank0.reset();  // rank 0 finishes first: rank 1 may still read
  EXPECT_TRUE(reader.has({"c0/w/join/1"}));
  rank1.reset();
  EXPECT_FALSE(reader.has({"c0/w/join/1"}));
  EXPECT_FALSE(reader.has({".live"}));
  EXPECT_EQ(text(bystander.get("k", 100)), "kept");
  expect_mentions(logged.log(), {"the last process of run 'run-9' removed its 2 keys"});
  // Without a namespace the last holder would empty the whole store.
  sdk::StoreSettings bare = where;
  bare.run_id.clear();
  const Error e = thrown_error(
      [&] { const sdk::Store s(logged.host(), bare, "gloo", sdk::StoreUse::kHoldRun); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"gloo:", "namespace"});
  // A TCP store rank 0 serves removes the keys itself: nobody holds the run.
  const sdk::StoreSettings served = tcp(1, "r", 100);
  EXPECT_EQ(served.process_use(0, false), sdk::StoreUse::kServe);
  EXPECT_EQ(served.process_use(0, true), sdk::StoreUse::kClient);
  EXPECT_EQ(served.process_use(3, false), sdk::StoreUse::kClient);
  sdk::StoreSettings launcher = served;
  launcher.tcp_served_elsewhere = true;
  EXPECT_EQ(launcher.process_use(0, false), sdk::StoreUse::kHoldRun);
}

TEST(HostStore, AMissingDirectoryIsNamed) {
  const LoggedHost logged;
  sdk::StoreSettings where;
  where.kind = sdk::StoreKind::kFile;
  where.dir = "/nonexistent/tessera-store";
  const Error e = thrown_error([&] { const sdk::Store s(logged.host(), where, "nccl"); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl:", "/nonexistent/tessera-store", "does not exist"});
}

TEST(HostStore, AHostWithoutTheStoreIsNamed) {
  tessera_host_api old{};
  old.struct_size = offsetof(tessera_host_api, store_open);
  old.abi_major = 1;
  old.abi_minor = 7;
  const Error e =
      thrown_error([&] { const sdk::Store s(sdk::Host(&old), tcp(1, "r", 100), "mine"); });
  EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
  expect_mentions(e.what(), {"mine:", "host ABI 1.8", "1.7"});
}

}  // namespace
}  // namespace tessera::test
