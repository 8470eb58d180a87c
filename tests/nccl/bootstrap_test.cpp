// The unique id made by the root reaches every rank through the file store,
// with a made-up 128-byte id (no GPU needed); a root that never writes, a
// reused run id and a value of the wrong size are reported clearly.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "../support/host_store.hpp"
#include "../support/temp_dir.hpp"
#include "bootstrap.hpp"

namespace tessera::nccltest {
namespace {

constexpr size_t kIdBytes = 128;  // sizeof(ncclUniqueId)

std::unique_ptr<sdk::Store> file_store(const std::string& dir) {
  return test::file_store(dir, "nccl");
}

std::vector<char> fake_id(char seed) {
  std::vector<char> id(kIdBytes);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + static_cast<char>(i));
  return id;
}

TEST(NcclBootstrap, EveryRankGetsTheRootsId) {
  const test::TempDir dir("nccl-store");
  constexpr int kRanks = 4;
  std::vector<std::future<std::vector<char>>> ranks;
  // The non-roots start first and wait for the root's key.
  for (int r = kRanks - 1; r >= 0; --r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto store = file_store(dir.path().string());
      return nccl_backend::share_unique_id(
          *store, "run/c0/w", "world", r, 0, kIdBytes, [] { return fake_id(7); }, 5000);
    }));
  }
  for (auto& f : ranks) EXPECT_EQ(f.get(), fake_id(7));
}

TEST(NcclBootstrap, OnlyTheRootMakesAnId) {
  const test::TempDir dir("nccl-store");
  auto store = file_store(dir.path().string());
  int made = 0;
  const auto make = [&] {
    ++made;
    return fake_id(1);
  };
  (void)nccl_backend::share_unique_id(*store, "p", "world", 2, 2, kIdBytes, make, 1000);
  (void)nccl_backend::share_unique_id(*store, "p", "world", 0, 2, kIdBytes, make, 1000);
  EXPECT_EQ(made, 1);
}

TEST(NcclBootstrap, AMissingRootTimesOutNamingKeyStoreAndGroup) {
  const test::TempDir dir("nccl-store");
  auto store = file_store(dir.path().string());
  const Error e = test::thrown_error([&] {
    (void)nccl_backend::share_unique_id(
        *store, "run/c0/w", "world", 1, 0, kIdBytes, [] { return fake_id(0); }, 100);
  });
  EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
  const std::string msg = e.what();
  for (const std::string& word :
       {std::string("nccl: waiting for the NCCL unique id of group 'world' from rank 0"),
        std::string("key 'run/c0/w/unique_id'"), "file store at '" + dir.path().string() + "'",
        std::string("timed out after")}) {
    EXPECT_NE(msg.find(word), std::string::npos) << "'" << word << "' missing from: " << msg;
  }
}

TEST(NcclBootstrap, AReusedRunIdIsRefused) {
  const test::TempDir dir("nccl-store");
  auto store = file_store(dir.path().string());
  (void)nccl_backend::share_unique_id(
      *store, "p", "world", 0, 0, kIdBytes, [] { return fake_id(1); }, 1000);
  const Error e = test::thrown_error([&] {
    (void)nccl_backend::share_unique_id(
        *store, "p", "world", 0, 0, kIdBytes, [] { return fake_id(2); }, 1000);
  });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("another run_id"), std::string::npos) << e.what();
}

TEST(NcclBootstrap, AValueOfTheWrongSizeIsAMismatch) {
  const test::TempDir dir("nccl-store");
  auto store = file_store(dir.path().string());
  store->set("p/unique_id", std::vector<char>(5, 'x'));
  const Error e = test::thrown_error([&] {
    (void)nccl_backend::share_unique_id(
        *store, "p", "world", 1, 0, kIdBytes, [] { return fake_id(0); }, 1000);
  });
  EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
  EXPECT_NE(std::string(e.what()).find("has 5 bytes, expected 128"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace tessera::nccltest
