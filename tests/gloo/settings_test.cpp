// The gloo backend refuses to start without what it needs, and says what
// is missing: the rank variables (and how to get them), a consistent world
// size, a directory for the file store, MASTER_ADDR and MASTER_PORT for the
// TCP store (the default when both are set) and a port free to serve it on,
// a known algorithm.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

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
  try {
    auto backend = open_gloo(options, std::chrono::milliseconds(2000), world_size);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the gloo backend opened although it should not";
  return Error(TESSERA_OK, "");
}

void expect_mentions(const std::string& text, std::initializer_list<std::string> words) {
  for (const auto& w : words) {
    EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' missing from: " << text;
  }
}

TEST(GlooSettings, MissingRankVariablesNameThemAndTheLauncher) {
  const ScopedEnv env({{"RANK", std::nullopt}, {"WORLD_SIZE", std::nullopt}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"WORLD_SIZE", "RANK", "tessera launch -n N"});
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

// A socket listening on a free port of 127.0.0.1, so that port is in use.
class BusyPort {
 public:
  BusyPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    auto* sa =
        reinterpret_cast<sockaddr*>(&addr);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    if (::bind(fd_, sa, len) != 0 || ::listen(fd_, 4) != 0 || ::getsockname(fd_, sa, &len) != 0) {
      throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
  }
  BusyPort(const BusyPort&) = delete;
  BusyPort& operator=(const BusyPort&) = delete;
  ~BusyPort() { ::close(fd_); }
  [[nodiscard]] std::string port() const { return std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(GlooSettings, TcpIsTheDefaultWithMasterAddrAndPort) {
  // Rank 0 serves the store at backend creation: on a port in use it says so.
  const BusyPort busy;
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"TESSERA_RENDEZVOUS_DIR", "/tmp"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", busy.port()}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"gloo", "127.0.0.1:" + busy.port(), "in use", "MASTER_PORT"});
  // An explicit store option wins over the rule.
  EXPECT_NO_THROW(open_gloo({"store=file"}, std::chrono::milliseconds(2000)));
}

TEST(GlooSettings, OneRankWorldOverTheTcpStore) {
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"TESSERA_RENDEZVOUS_DIR", std::nullopt},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(free_port())}});
  auto backend = open_gloo({}, std::chrono::milliseconds(3000));
  auto world = backend->connect();
  std::vector<float> v(3, 2.0F);
  world->allreduce(std::span<float>(v), TESSERA_SUM);
  EXPECT_EQ(v[2], 2.0F);
  auto again = backend->connect();  // a second world under its own prefix
  EXPECT_EQ(again->size(), 1);
}

TEST(GlooSettings, MissingStoreDirectoryIsNamedAtConnect) {
  const ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  auto backend = open_gloo({"store_dir=/nonexistent/tessera-gloo"}, std::chrono::seconds(2));
  try {
    auto world = backend->connect();
    FAIL() << "connect succeeded without a store directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    expect_mentions(e.what(), {"/nonexistent/tessera-gloo", "does not exist"});
  }
}

}  // namespace
}  // namespace tessera::glootest
