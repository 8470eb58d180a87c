// The gloo backend refuses to start without what it needs, and says what
// is missing: the rank variables (and how to get them), a consistent world
// size, a directory for the file store, a known algorithm.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>

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

void expect_mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words) {
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
  const ScopedEnv env(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TESSERA_RENDEZVOUS_DIR", std::nullopt}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"store_dir", "TESSERA_RENDEZVOUS_DIR"});
}

TEST(GlooSettings, UnknownAlgorithmAndStoreAreNamed) {
  const ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TESSERA_RENDEZVOUS_DIR", "/tmp"}});
  expect_mentions(open_error({"algorithm=tree"}).what(), {"algorithm", "tree", "halving_doubling"});
  expect_mentions(open_error({"store=etcd"}).what(), {"store", "etcd", "redis"});
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
