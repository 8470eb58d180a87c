// The gloo backend refuses to start without what it needs, and says what
// is missing: the rank variables (and how to get them), a consistent world
// size, a directory for the file store, MASTER_ADDR and MASTER_PORT for the
// TCP store (the default when both are set) and a port free to serve it on,
// a known algorithm.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "../support/loopback.hpp"
#include "../support/temp_dir.hpp"
#include "process_ranks.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::glootest {
namespace {

// Sets (or, with std::nullopt, unsets) environment variables for the life of
// the object and restores them afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = ::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// The error opening the backend throws (fails the test if it opens).
Error open_error(const std::vector<std::string>& options, int world_size = -1) {
  return test::thrown_error(
      [&] { auto backend = open_gloo(options, std::chrono::milliseconds(2000), world_size); });
}

using test::expect_mentions;

TEST(GlooSettings, MissingRankVariablesNameThemAndTheLauncher) {
  const ScopedEnv env({{"RANK", std::nullopt}, {"WORLD_SIZE", std::nullopt}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"WORLD_SIZE", "RANK", "tessera launch -n N"});
}

// A joining process reads no RANK or WORLD_SIZE and serves no store: it
// connects at once as a world of itself alone (comm_grow admits it later).
TEST(GlooSettings, AJoiningProcessStartsAsAWorldOfItsOwn) {
  const test::TempDir dir("gloo-joining");
  const ScopedEnv env({{"RANK", std::nullopt},
                       {"WORLD_SIZE", std::nullopt},
                       {"MASTER_ADDR", std::nullopt},
                       {"MASTER_PORT", std::nullopt},
                       {"TESSERA_STORE_ADDR", std::nullopt},
                       {"TESSERA_RENDEZVOUS_DIR", dir.path().string()}});
  auto backend = open_gloo({}, std::chrono::milliseconds(2000), -1, /*joining=*/true);
  const auto world = backend->connect(-1);
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
}

TEST(GlooSettings, RankOutsideTheWorldIsRejected) {
  const ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"TESSERA_RENDEZVOUS_DIR", "/tmp"}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"RANK=4", "WORLD_SIZE=4"});
}

TEST(GlooSettings, ConfiguredWorldSizeMustMatchTheEnvironment) {
  const ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TESSERA_RENDEZVOUS_DIR", "/tmp"}});
  const Error e = open_error({}, 3);
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"world_size = 3", "WORLD_SIZE=2"});
}

TEST(GlooSettings, FileStoreNeedsADirectory) {
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"TESSERA_RENDEZVOUS_DIR", std::nullopt},
                       {"MASTER_ADDR", std::nullopt},
                       {"MASTER_PORT", std::nullopt}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"store_dir", "TESSERA_RENDEZVOUS_DIR"});
}

TEST(GlooSettings, UnknownAlgorithmAndStoreAreNamed) {
  const ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TESSERA_RENDEZVOUS_DIR", "/tmp"}});
  expect_mentions(open_error({"algorithm=tree"}).what(), {"algorithm", "tree", "halving_doubling"});
  expect_mentions(open_error({"store=etcd"}).what(), {"store", "etcd", "tcp", "redis"});
}

TEST(GlooSettings, TcpStoreNeedsMasterAddrAndPort) {
  {
    const ScopedEnv env({{"RANK", "0"},
                         {"WORLD_SIZE", "1"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", std::nullopt}});
    const Error e = open_error({"store=tcp"});
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    expect_mentions(e.what(), {"TCP store", "MASTER_ADDR", "MASTER_PORT", "tessera launch"});
  }
  const ScopedEnv env(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "0"}});
  expect_mentions(open_error({"store=tcp"}).what(), {"MASTER_PORT='0'", "1..65535"});
}

TEST(GlooSettings, TcpIsTheDefaultWithMasterAddrAndPort) {
  // Rank 0 serves the store at backend creation: on a port in use it says so.
  const test::LoopbackListener busy;  // the port is in use
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"TESSERA_RENDEZVOUS_DIR", "/tmp"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(busy.port())}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(),
                  {"gloo", "127.0.0.1:" + std::to_string(busy.port()), "in use", "MASTER_PORT"});
  // An explicit store option wins over the rule.
  EXPECT_NO_THROW(open_gloo({"store=file"}, std::chrono::milliseconds(2000)));
}

TEST(GlooSettings, ALauncherStoreAddressMustBeHostAndPort) {
  for (const char* bad : {"127.0.0.1", "127.0.0.1:0", ":29500", "127.0.0.1:http"}) {
    const ScopedEnv env({{"RANK", "0"},
                         {"WORLD_SIZE", "1"},
                         {"TESSERA_STORE_ADDR", bad},
                         {"MASTER_ADDR", std::nullopt},
                         {"MASTER_PORT", std::nullopt}});
    const Error e = open_error({});  // the launcher's store is the default then
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << bad;
    expect_mentions(e.what(),
                    {"gloo", std::string("TESSERA_STORE_ADDR='") + bad + "'", "host:port"});
  }
}

TEST(GlooSettings, OneRankWorldOverTheTcpStore) {
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"TESSERA_RENDEZVOUS_DIR", std::nullopt},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(test::free_loopback_port())}});
  auto backend = open_gloo({}, std::chrono::milliseconds(3000));
  auto world = backend->connect();
  std::vector<float> v(3, 2.0F);
  world->allreduce(std::span<float>(v), TESSERA_SUM);
  EXPECT_EQ(v[2], 2.0F);
  auto again = backend->connect();  // a second world under its own prefix
  EXPECT_EQ(again->size(), 1);
}

// Every process holds the run in a file store (its keys go with the last
// one), so a missing directory fails the backend's creation, before any
// rank connects.
TEST(GlooSettings, MissingStoreDirectoryIsNamedAtCreation) {
  const ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  const Error e = open_error({"store_dir=/nonexistent/tessera-gloo"});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"gloo", "/nonexistent/tessera-gloo", "does not exist"});
}

}  // namespace
}  // namespace tessera::glootest
