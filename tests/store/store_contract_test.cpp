// The contract of the host's store (tessera/core/store.hpp), checked the
// same way on every kind: TCP (a server in this process), file (a fresh
// directory) and Redis (a private redis-server on a free loopback port,
// started once for the tests that need it; they are skipped when
// redis-server is not installed or the build has no hiredis). Each test
// keys its own namespace, so the tests sharing the Redis server never see
// each other's keys. Then what only the file and Redis kinds do: the
// directory's checks and its file names, an unreachable Redis server.
// Every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../support/error_of.hpp"
#include "../support/loopback.hpp"
#include "../support/temp_dir.hpp"
#include "tessera/core/store.hpp"
#include "tessera/core/tcp_store.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::store::contract {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using test::expect_mentions;

std::vector<char> as_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string as_text(const std::vector<char>& b) { return {b.begin(), b.end()}; }

int64_t elapsed_ms(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count();
}

// The path of `program` on PATH; "" when it is not there.
std::string on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path == nullptr ? "/usr/local/bin:/usr/bin:/bin" : path;
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// A private redis-server on 127.0.0.1 that keeps nothing on disk; killed
// with the object, and by the kernel should this process die first.
class RedisServer {
 public:
  // Starts one; on failure returns nullptr and says why in `why`.
  static std::unique_ptr<RedisServer> start(std::string& why) {
    if (!has_redis()) {
      why = "this build has no Redis store (built without hiredis: libhiredis-dev)";
      return nullptr;
    }
    const std::string program = on_path("redis-server");
    if (program.empty()) {
      why = "redis-server is not on PATH (Debian package redis-server)";
      return nullptr;
    }
    // A port free a moment ago may be taken by the time the server binds it:
    // a few tries.
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto server = std::unique_ptr<RedisServer>(new RedisServer(program));
      if (server->ready(why)) return server;
    }
    return nullptr;
  }

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer() { stop(); }

  [[nodiscard]] int32_t port() const noexcept { return port_; }

 private:
  explicit RedisServer(const std::string& program)
      : dir_("redis"), port_(test::free_loopback_port()) {
    const std::string port = std::to_string(port_);
    const std::string dir = dir_.path().string();
    std::vector<std::string> args{
        program, "--port", port,           "--bind", "127.0.0.1",   "--save", "",
        "--dir", dir,      "--appendonly", "no",     "--daemonize", "no"};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        (void)::dup2(null, STDIN_FILENO);
        (void)::dup2(null, STDOUT_FILENO);
        (void)::dup2(null, STDERR_FILENO);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

  // Waits at most 5 s until the server answers; false (and `why`) when it
  // exited or never answered.
  bool ready(std::string& why) {
    if (pid_ < 0) {
      why = "cannot fork to start redis-server";
      return false;
    }
    const auto start = SteadyClock::now();
    while (elapsed_ms(start) < 5000) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        why = "redis-server exited at once on port " + std::to_string(port_) + " (exit status " +
              std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
        return false;
      }
      try {
        Config c;
        c.kind = Kind::kRedis;
        c.host = "127.0.0.1";
        c.port = port_;
        c.timeout_ms = 200;
        (void)open(c)->check({"probe"});
        return true;
      } catch (const Error& e) {
        why = std::string("redis-server did not answer within 5 s: ") + e.what();
      }
      std::this_thread::sleep_for(20ms);
    }
    stop();
    return false;
  }

  void stop() {
    if (pid_ <= 0) return;
    (void)::kill(pid_, SIGTERM);
    const auto start = SteadyClock::now();
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (elapsed_ms(start) > 3000) {
        (void)::kill(pid_, SIGKILL);
        (void)::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
  }

  test::TempDir dir_;
  int32_t port_;
  pid_t pid_ = -1;
};

// The same test on each kind of store ("tcp", "file", "redis").
class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    ns_ = std::string(info->name());
    std::replace(ns_.begin(), ns_.end(), '/', '-');
    if (GetParam() == "tcp") {
      server_.emplace("127.0.0.1", 0);
    } else if (GetParam() == "file") {
      dir_.emplace("store");
    } else if (GetParam() == "redis") {
      if (!redis_tried_) {
        redis_tried_ = true;
        redis_ = RedisServer::start(redis_missing_);
      }
      if (redis_ == nullptr) GTEST_SKIP() << "no Redis store to test: " << redis_missing_;
      // Whatever an earlier run left under this test's namespace goes first.
      (void)open_store()->delete_prefix("");
    }
  }

  void TearDown() override {
    if (GetParam() == "redis" && redis_ != nullptr) {
      try {
        (void)open_store()->delete_prefix("");
      } catch (const Error&) {  // the test failed already, or will say why
      }
    }
  }

  // A store object of its own on the test's store, under the test's
  // namespace (and `sub` below it).
  [[nodiscard]] std::unique_ptr<Store> open_store(const std::string& sub = "",
                                                  int64_t timeout_ms = 5000) const {
    Config c;
    c.ns = sub.empty() ? ns_ : ns_ + "/" + sub;
    c.timeout_ms = timeout_ms;
    c.host = "127.0.0.1";
    if (GetParam() == "tcp") {
      c.kind = Kind::kTcp;
      c.port = server_->port();
    } else if (GetParam() == "file") {
      c.kind = Kind::kFile;
      c.dir = dir_->path().string();
    } else {
      c.kind = Kind::kRedis;
      c.port = redis_->port();
    }
    return open(c);
  }

  [[nodiscard]] const std::string& ns() const noexcept { return ns_; }

  [[nodiscard]] std::string expected_description() const {
    if (GetParam() == "tcp") return "TCP store at 127.0.0.1:" + std::to_string(server_->port());
    if (GetParam() == "file") return "file store at '" + dir_->path().string() + "'";
    return "Redis store at 127.0.0.1:" + std::to_string(redis_->port());
  }

 private:
  static inline std::unique_ptr<RedisServer> redis_;
  static inline bool redis_tried_ = false;
  static inline std::string redis_missing_;
  std::string ns_;
  std::optional<TcpStoreServer> server_;
  std::optional<test::TempDir> dir_;
};

TEST_P(StoreContract, SetThenGetFromAnotherStoreObject) {
  auto a = open_store();
  auto b = open_store();
  EXPECT_EQ(a->description(), expected_description());
  a->set("k", as_bytes("value"));
  EXPECT_EQ(as_text(b->get("k", 1000)), "value");
  a->set("k", as_bytes("a longer value replaces it"));
  EXPECT_EQ(as_text(b->get("k", 1000)), "a longer value replaces it");
  a->set("k", as_bytes(""));  // replaced, and empty values are values
  EXPECT_EQ(as_text(b->get("k", 1000)), "");
  EXPECT_TRUE(b->check({"k"}));

  std::vector<char> every_byte;
  for (int i = 0; i < 256; ++i) every_byte.push_back(static_cast<char>(i));
  a->set("binary", every_byte);
  EXPECT_EQ(b->get("binary", 1000), every_byte);
  std::vector<char> twice = every_byte;
  twice.insert(twice.end(), every_byte.begin(), every_byte.end());
  a->set("binary", twice);
  EXPECT_EQ(b->get("binary", 1000), twice);
}

TEST_P(StoreContract, BlockingGetIsReleasedByALaterSet) {
  auto reader = open_store();
  auto writer = open_store();
  const auto start = SteadyClock::now();
  auto got = std::async(std::launch::async, [&] { return as_text(reader->get("late", 5000)); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(got.wait_for(0ms), std::future_status::timeout) << "get returned before the set";
  writer->set("late", as_bytes("here"));
  ASSERT_EQ(got.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(got.get(), "here");
  EXPECT_GE(elapsed_ms(start), 100);
  EXPECT_LT(elapsed_ms(start), 3000);
}

TEST_P(StoreContract, GetTimesOutNamingTheKeyAndTheWait) {
  auto s = open_store();
  const auto start = SteadyClock::now();
  const Error e = test::thrown_error([&] { (void)s->get("never/written", 200); });
  const int64_t waited = elapsed_ms(start);
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"'never/written'", "200 ms", expected_description()});
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 3000);
  // The store is still good after a timeout.
  s->set("x", as_bytes("1"));
  EXPECT_TRUE(s->check({"x"}));
}

TEST_P(StoreContract, AddFromManyThreadsCountsEveryOne) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 25;
  std::atomic<int64_t> max_seen{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto own = open_store();
      for (int i = 0; i < kAdds; ++i) {
        const int64_t v = own->add("counter", 1);
        int64_t prev = max_seen.load();
        while (v > prev && !max_seen.compare_exchange_weak(prev, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto s = open_store();
  EXPECT_EQ(max_seen.load(), kThreads * kAdds);
  EXPECT_EQ(as_text(s->get("counter", 1000)), std::to_string(kThreads * kAdds));
  EXPECT_EQ(s->add("counter", -150), kThreads * kAdds - 150);
  EXPECT_EQ(as_text(s->get("counter", 1000)), "-50");
  EXPECT_EQ(s->add("fresh", 5), 5);
  EXPECT_EQ(s->add("fresh", 0), 5);

  s->set("word", as_bytes("abc"));
  const Error e = test::thrown_error([&] { (void)s->add("word", 1); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"'" + ns() + "/word'", "not an integer"});
  EXPECT_EQ(as_text(s->get("word", 1000)), "abc");  // left as it was
  EXPECT_EQ(s->add("counter", 1), kThreads * kAdds - 149);
}

TEST_P(StoreContract, OneStoreObjectSharedByThreads) {
  auto s = open_store();
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s, t] {
      for (int i = 0; i < 20; ++i) {
        s->set("k" + std::to_string(t) + "/" + std::to_string(i), as_bytes(std::to_string(i)));
        (void)s->add("total", 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s->add("total", 0), 80);
  EXPECT_EQ(as_text(s->get("k3/19", 100)), "19");
  EXPECT_EQ(s->delete_prefix("k"), 80);
}

TEST_P(StoreContract, CompareAndSet) {
  auto s = open_store();
  // Absent expected on an absent key: created.
  CasResult r = s->compare_and_set("leader", std::nullopt, as_bytes("rank 3"));
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(as_text(r.value.value()), "rank 3");
  // Absent expected on a present key: kept, and the value is returned.
  r = s->compare_and_set("leader", std::nullopt, as_bytes("rank 1"));
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(as_text(r.value.value()), "rank 3");
  // Wrong expected value: kept.
  r = s->compare_and_set("leader", as_bytes("rank 2"), as_bytes("rank 1"));
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(as_text(r.value.value()), "rank 3");
  // Right expected value: swapped.
  r = s->compare_and_set("leader", as_bytes("rank 3"), as_bytes("rank 1"));
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(as_text(r.value.value()), "rank 1");
  EXPECT_EQ(as_text(s->get("leader", 100)), "rank 1");
  // Empty values compare as values.
  r = s->compare_and_set("leader", as_bytes("rank 1"), as_bytes(""));
  EXPECT_TRUE(r.swapped);
  r = s->compare_and_set("leader", as_bytes(""), as_bytes("rank 0"));
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(as_text(r.value.value()), "rank 0");
  // An expected value on an absent key: stays absent.
  r = s->compare_and_set("nobody", as_bytes("x"), as_bytes("y"));
  EXPECT_FALSE(r.swapped);
  EXPECT_FALSE(r.value.has_value());
  EXPECT_FALSE(s->check({"nobody"}));
}

TEST_P(StoreContract, RacingCreatorsExactlyOneWins) {
  constexpr int kThreads = 8;
  std::vector<CasResult> results(kThreads);
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto own = open_store();
      go.arrive_and_wait();
      results[t] =
          own->compare_and_set("race", std::nullopt, as_bytes("rank " + std::to_string(t)));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int> winners;
  for (int t = 0; t < kThreads; ++t) {
    if (results[t].swapped) winners.push_back(t);
  }
  ASSERT_EQ(winners.size(), 1U);
  const std::string winner = "rank " + std::to_string(winners[0]);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].value.has_value()) << "thread " << t;
    EXPECT_EQ(as_text(*results[t].value), winner) << "thread " << t;
  }
  EXPECT_EQ(as_text(open_store()->get("race", 100)), winner);
}

TEST_P(StoreContract, WaitAndCheck) {
  auto waiter = open_store();
  auto writer = open_store();
  EXPECT_FALSE(waiter->check({"a", "b"}));
  auto done = std::async(std::launch::async, [&] { waiter->wait({"a", "b"}, 5000); });
  writer->set("a", as_bytes("1"));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(done.wait_for(0ms), std::future_status::timeout) << "wait returned with b missing";
  EXPECT_FALSE(writer->check({"a", "b"}));
  writer->set("b", as_bytes("2"));
  ASSERT_EQ(done.wait_for(3s), std::future_status::ready);
  done.get();
  EXPECT_TRUE(waiter->check({"a", "b"}));
  EXPECT_TRUE(waiter->check({"a", "a"}));
  EXPECT_TRUE(waiter->check({}));
  waiter->wait({}, 0);
  waiter->wait({"a"}, 0);

  const auto start = SteadyClock::now();
  const Error e = test::thrown_error([&] { waiter->wait({"a", "c", "d"}, 150); });
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  expect_mentions(e.what(), {"'c', 'd'", "150 ms", expected_description()});
  EXPECT_EQ(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  EXPECT_GE(elapsed_ms(start), 140);
  EXPECT_LT(elapsed_ms(start), 3000);
}

TEST_P(StoreContract, DeletePrefixRemovesOnlyThoseKeys) {
  auto s = open_store();
  const std::vector<std::string> keys{"c0/a", "c0/b", "c0/c/d", "c1/a", "c",
                                      "g*1",  "gx1",  "g[1]x",  "g1x"};
  for (const auto& k : keys) s->set(k, as_bytes(k));
  EXPECT_EQ(s->delete_prefix("c0/"), 3);
  EXPECT_FALSE(s->check({"c0/a"}));
  EXPECT_FALSE(s->check({"c0/c/d"}));
  EXPECT_TRUE(s->check({"c1/a", "c"}));
  EXPECT_EQ(s->delete_prefix("c0/"), 0);
  // A prefix is taken as it is, not as a pattern.
  EXPECT_EQ(s->delete_prefix("g*"), 1);
  EXPECT_EQ(s->delete_prefix("g[1]"), 1);
  EXPECT_TRUE(s->check({"gx1", "g1x"}));
  EXPECT_EQ(s->delete_prefix("nothing"), 0);
  EXPECT_EQ(s->delete_prefix(""), 4);
  for (const auto& k : keys) EXPECT_FALSE(s->check({k})) << k;
}

TEST_P(StoreContract, NamespacesKeepStoresApart) {
  auto one = open_store("one");
  auto two = open_store("two");
  one->set("c0/w/rank0", as_bytes("one"));
  two->set("c0/w/rank0", as_bytes("two"));
  EXPECT_EQ(as_text(one->get("c0/w/rank0", 100)), "one");
  EXPECT_EQ(as_text(two->get("c0/w/rank0", 100)), "two");
  EXPECT_EQ(one->add("n", 1), 1);
  EXPECT_EQ(two->add("n", 1), 1);
  // The first run ends: its keys go, the second's stay.
  EXPECT_EQ(one->delete_prefix(""), 2);
  EXPECT_FALSE(one->check({"c0/w/rank0"}));
  EXPECT_EQ(as_text(two->get("c0/w/rank0", 100)), "two");
  EXPECT_EQ(two->add("n", 1), 2);
  EXPECT_EQ(two->delete_prefix(""), 2);
}

TEST_P(StoreContract, LongKeysRoundTripAndGo) {
  auto s = open_store();
  std::string base = "run 7/";
  while (base.size() < 290) base += "a segment with spaces/";
  base.resize(290);
  const std::string a = base + "-a";
  const std::string b = base + "-b";
  ASSERT_GE(a.size(), 290U);
  s->set(a, as_bytes("value a"));
  s->set(b, as_bytes("value b"));
  s->set("short", as_bytes("s"));
  EXPECT_EQ(as_text(open_store()->get(a, 1000)), "value a");
  EXPECT_EQ(as_text(open_store()->get(b, 1000)), "value b");
  EXPECT_TRUE(s->check({a, b}));
  EXPECT_EQ(s->add(base + "-n", 2), 2);
  EXPECT_TRUE(s->compare_and_set(a, as_bytes("value a"), as_bytes("new a")).swapped);
  EXPECT_EQ(as_text(s->get(a, 1000)), "new a");
  // A prefix as long as the keys, and one that stops early.
  EXPECT_EQ(s->delete_prefix(a), 1);
  EXPECT_FALSE(s->check({a}));
  EXPECT_TRUE(s->check({b}));
  EXPECT_EQ(s->delete_prefix(base.substr(0, 100)), 2);
  EXPECT_FALSE(s->check({b}));
  EXPECT_TRUE(s->check({"short"}));
}

TEST_P(StoreContract, ReadersNeverSeeAPartialValue) {
  auto writer = open_store();
  auto reader = open_store();
  constexpr size_t kSize = 256 * 1024;
  writer->set("big", std::vector<char>(kSize, 'a'));
  std::atomic<bool> writing{true};
  auto written = std::async(std::launch::async, [&] {
    for (int i = 0; i < 40; ++i)
      writer->set("big", std::vector<char>(kSize, i % 2 == 0 ? 'b' : 'a'));
    writing = false;
  });
  int reads = 0;
  const auto start = SteadyClock::now();
  while ((writing || reads == 0) && elapsed_ms(start) < 10000) {
    const std::vector<char> v = reader->get("big", 1000);
    ASSERT_EQ(v.size(), kSize);
    ASSERT_TRUE(std::all_of(v.begin(), v.end(), [&](char c) { return c == v[0]; }))
        << "read a value that mixes two writes";
    ++reads;
  }
  ASSERT_EQ(written.wait_for(5s), std::future_status::ready);
  written.get();
  EXPECT_GT(reads, 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreContract, ::testing::Values("tcp", "file", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& kind) {
                           return kind.param;
                         });

// ---- the file store ---------------------------------------------------------

Config file_config(const std::filesystem::path& dir, const std::string& ns = "run") {
  Config c;
  c.kind = Kind::kFile;
  c.dir = dir.string();
  c.ns = ns;
  return c;
}

TEST(FileStore, AMissingDirectoryIsNamed) {
  const test::TempDir dir("store");
  const std::string missing = (dir / "absent").string();
  const Error e = test::thrown_error([&] { (void)open(file_config(missing)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"'" + missing + "'", "does not exist", "option store_dir",
                             "TESSERA_RENDEZVOUS_DIR"});
}

TEST(FileStore, AFileIsNoDirectory) {
  const test::TempDir dir("store");
  const std::string plain = dir.write("plain", "not a directory").string();
  const Error e = test::thrown_error([&] { (void)open(file_config(plain)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"'" + plain + "'", "not a directory", "option store_dir",
                             "TESSERA_RENDEZVOUS_DIR"});
}

TEST(FileStore, AReadOnlyDirectoryIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories";
  const test::TempDir dir("store");
  const std::filesystem::path locked = dir / "locked";
  std::filesystem::create_directory(locked);
  std::filesystem::permissions(
      locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const Error e = test::thrown_error([&] { (void)open(file_config(locked)); });
  std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"'" + locked.string() + "'", "is not writable by this process"});
}

TEST(FileStore, OneFileAKeyAndOtherFilesLeftAlone) {
  const test::TempDir dir("store");
  dir.write("notes.txt", "not the store's");
  dir.write(".tmp.1.2.3", "a temporary file a writer left behind");
  dir.write("key.junk", "");  // named like an entry, but none
  auto s = open(file_config(dir.path(), ""));
  EXPECT_EQ(s->description(), "file store at '" + dir.path().string() + "'");
  s->set("a b/c", as_bytes("1"));
  auto in_run = open(file_config(dir.path(), "run"));
  in_run->set("x", as_bytes("2"));
  std::string long_key(300, 'k');
  long_key[150] = '/';
  in_run->set(long_key, as_bytes("3"));

  const std::vector<std::string> names = dir.entries();
  const std::set<std::string> found(names.begin(), names.end());
  EXPECT_EQ(found.count("key.a%20b%2fc"), 1U);
  EXPECT_EQ(found.count("key.run%2fx"), 1U);
  for (const auto& name : names) {
    EXPECT_LE(name.size(), 200U) << name;
    EXPECT_FALSE(name.rfind(".tmp.", 0) == 0 && name != ".tmp.1.2.3") << "left behind: " << name;
  }
  EXPECT_EQ(as_text(in_run->get(long_key, 100)), "3");

  EXPECT_EQ(in_run->delete_prefix(""), 2);
  EXPECT_EQ(s->delete_prefix(""), 1);
  for (const char* kept : {"notes.txt", ".tmp.1.2.3", "key.junk"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / kept)) << kept;
  }
  // A file named like an entry that is none is an error to read, not a value.
  const Error e = test::thrown_error([&] { (void)s->get("junk", 100); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INTERNAL);
  expect_mentions(e.what(), {"key.junk", "not an entry"});
}

// ---- the Redis store --------------------------------------------------------

TEST(RedisStore, AnUnreachableServerIsNamed) {
  if (!has_redis()) GTEST_SKIP() << "this build has no Redis store";
  const int32_t port = test::free_loopback_port();
  Config c;
  c.kind = Kind::kRedis;
  c.host = "127.0.0.1";
  c.port = port;
  c.timeout_ms = 500;
  c.source = "options redis_host / redis_port";
  const auto start = SteadyClock::now();
  const Error e = test::thrown_error([&] { (void)open(c); });
  EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
  expect_mentions(e.what(), {"Redis store at 127.0.0.1:" + std::to_string(port),
                             "options redis_host / redis_port"});
  EXPECT_LT(elapsed_ms(start), 3000);
}

TEST(RedisStore, ASilentPeerIsBoundedByTheTimeout) {
  if (!has_redis()) GTEST_SKIP() << "this build has no Redis store";
  const test::LoopbackListener silent;
  Config c;
  c.kind = Kind::kRedis;
  c.host = "127.0.0.1";
  c.port = silent.port();
  c.timeout_ms = 300;
  const auto start = SteadyClock::now();
  const Error e = test::thrown_error([&] { (void)open(c); });
  EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
  expect_mentions(e.what(), {"127.0.0.1:" + std::to_string(silent.port()), "300 ms"});
  EXPECT_LT(elapsed_ms(start), 3000);
}

TEST(RedisStore, AServerGoneIsAnErrorNotAHang) {
  std::string why;
  auto server = RedisServer::start(why);
  if (server == nullptr) GTEST_SKIP() << "no Redis store to test: " << why;
  Config c;
  c.kind = Kind::kRedis;
  c.host = "127.0.0.1";
  c.port = server->port();
  c.ns = "gone";
  c.timeout_ms = 2000;
  auto s = open(c);
  s->set("k", as_bytes("v"));
  server.reset();
  const auto start = SteadyClock::now();
  // A value larger than the socket buffers: writing it to a closed
  // connection must not end the process (SIGPIPE).
  const Error e = test::thrown_error([&] { s->set("big", std::vector<char>(8 << 20, 'x')); });
  EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
  expect_mentions(e.what(), {"Redis store at 127.0.0.1:" + std::to_string(c.port), "'big'"});
  // Later operations try to connect again, and fail at once.
  const Error again = test::thrown_error([&] { (void)s->get("k", 100); });
  EXPECT_EQ(again.status(), TESSERA_ERR_PEER_LOST);
  expect_mentions(again.what(), {"cannot reach", "'k'"});
  EXPECT_LT(elapsed_ms(start), 3000);
}

TEST(RedisStore, ABuildWithoutHiredisSaysSo) {
  if (has_redis()) GTEST_SKIP() << "this build has a Redis store";
  Config c;
  c.kind = Kind::kRedis;
  c.host = "127.0.0.1";
  c.port = 6379;
  const Error e = test::thrown_error([&] { (void)open(c); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"no Redis store", "hiredis"});
}

}  // namespace
}  // namespace tessera::store::contract
