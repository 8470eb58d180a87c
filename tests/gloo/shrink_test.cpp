// comm_shrink (backend 1.3) with forked gloo ranks: when a rank is killed,
// the survivors abort the world and re-form it without the dead rank,
// through the file store and through the TCP store, in their old order; a
// survivor that calls after the others agreed is left out with PEER_LOST.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../support/loopback.hpp"
#include "process_ranks.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::glootest {
namespace {

using std::chrono::milliseconds;

constexpr int kVictim = 2;

std::string describe_all(const std::vector<RankOutcome>& outcomes) {
  std::string out;
  for (const auto& o : outcomes) {
    out += "\n  rank " + std::to_string(o.rank) + " exit " + std::to_string(o.exit_code) + ": " +
           o.text;
  }
  return out;
}

// The communicator comm_shrink returns for `comm`, through the plugin's own
// table; destroyed before `comm`.
class Reformed {
 public:
  Reformed(const Communicator& comm, int64_t grace_ms) : api_(comm.c_api()) {
    if (api_->comm_shrink == nullptr) {
      throw Error(TESSERA_ERR_UNSUPPORTED, "the gloo table has no comm_shrink");
    }
    throw_if_failed(api_->comm_shrink(comm.c_handle(), grace_ms, &comm_), "comm_shrink");
  }
  Reformed(const Reformed&) = delete;
  Reformed& operator=(const Reformed&) = delete;
  ~Reformed() {
    if (comm_ != nullptr) api_->comm_destroy(comm_);
  }
  [[nodiscard]] int rank() const { return api_->comm_rank(comm_); }
  [[nodiscard]] int size() const { return api_->comm_size(comm_); }
  // Allreduce (sum) of `value` in every element of a vector.
  float sum(float value) {
    std::vector<float> v(1000, value);
    tessera_coll_args a{};
    a.struct_size = sizeof a;
    a.coll = TESSERA_COLL_ALLREDUCE;
    a.send = cpu_buffer(std::span<float>(v));
    a.recv = a.send;
    a.op = TESSERA_SUM;
    throw_if_failed(api_->post(comm_, &a, nullptr), "allreduce on the re-formed group");
    return v[999];
  }

 private:
  const tessera_backend_api* api_;
  tessera_comm* comm_ = nullptr;
};

// The victim dies once every rank is past connect (connect returns on all
// ranks within moments of each other), while the survivors are shrinking.
// The survivors abort the world right after connect, with no operation of
// theirs pending on it.
[[noreturn]] void die_after_connecting() {
  std::this_thread::sleep_for(milliseconds(300));
  ::raise(SIGKILL);
  std::abort();
}

// "new rank, size, sum of old rank + 1" of a survivor.
std::string report(Reformed& reformed, int rank) {
  const float sum = reformed.sum(static_cast<float>(rank + 1));
  return std::to_string(reformed.rank()) + " " + std::to_string(reformed.size()) + " " +
         std::to_string(static_cast<int>(sum));
}

// Survivors find the lost rank by a failing collective, abort, and shrink.
TEST(GlooShrink, SurvivorsOfAKilledRankReformThroughTheFileStore) {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_ranks(4, {0, 1, 2, 3}, {}, [](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(5000));
    auto world = backend->connect();
    std::vector<float> data(1000, 1.0F);
    world->allreduce(std::span<float>(data), TESSERA_SUM);
    if (rank == kVictim) ::raise(SIGKILL);
    try {
      for (int i = 0; i < 2000; ++i) world->allreduce(std::span<float>(data), TESSERA_SUM);
      text = "the collectives went on without rank 2";
      return 3;
    } catch (const Error& e) {
      if (e.status() != TESSERA_ERR_PEER_LOST && e.status() != TESSERA_ERR_TIMEOUT) throw;
    }
    world->abort("rank 2 is gone");
    Reformed reformed(*world, 500);
    text = report(reformed, rank);
    return 0;
  });
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(outcomes.size(), 4U);
  EXPECT_EQ(outcomes[2].exit_code, -SIGKILL) << describe_all(outcomes);
  EXPECT_EQ(outcomes[0].exit_code, 0) << describe_all(outcomes);
  EXPECT_EQ(outcomes[1].exit_code, 0) << describe_all(outcomes);
  EXPECT_EQ(outcomes[3].exit_code, 0) << describe_all(outcomes);
  EXPECT_EQ(outcomes[0].text, "0 3 7") << describe_all(outcomes);  // 1 + 2 + 4
  EXPECT_EQ(outcomes[1].text, "1 3 7") << describe_all(outcomes);
  EXPECT_EQ(outcomes[3].text, "2 3 7") << describe_all(outcomes);
  EXPECT_LT(took, std::chrono::seconds(30)) << describe_all(outcomes);
}

// Only MASTER_ADDR and MASTER_PORT: the agreement is a compare-and-set on the
// TCP store rank 0 serves.
TEST(GlooShrink, SurvivorsReformThroughTheTcpStore) {
  const std::map<std::string, std::string> env = {
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(test::free_loopback_port())},
      {"TESSERA_RENDEZVOUS_DIR", ""}};
  const auto outcomes = run_ranks(4, {0, 1, 2, 3}, env, [](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(5000));
    auto world = backend->connect();
    if (rank == kVictim) die_after_connecting();
    world->abort("rank 2 is gone");
    Reformed reformed(*world, 500);
    text = report(reformed, rank);
    return 0;
  });
  ASSERT_EQ(outcomes.size(), 4U);
  EXPECT_EQ(outcomes[2].exit_code, -SIGKILL) << describe_all(outcomes);
  for (const int survivor : {0, 1, 3}) {
    EXPECT_EQ(outcomes[static_cast<size_t>(survivor)].exit_code, 0) << describe_all(outcomes);
  }
  EXPECT_EQ(outcomes[0].text, "0 3 7") << describe_all(outcomes);
  EXPECT_EQ(outcomes[1].text, "1 3 7") << describe_all(outcomes);
  EXPECT_EQ(outcomes[3].text, "2 3 7") << describe_all(outcomes);
}

TEST(GlooShrink, SurvivorCallingAfterTheAgreementIsLeftOut) {
  const auto outcomes = run_ranks(4, {0, 1, 2, 3}, {}, [](int rank, std::string& text) {
    auto backend = open_gloo({}, milliseconds(5000));
    auto world = backend->connect();
    if (rank == kVictim) die_after_connecting();
    world->abort("rank 2 is gone");
    if (rank == 3) {
      std::this_thread::sleep_for(milliseconds(1500));
      try {
        Reformed late(*world, 300);
        text = "rank 3 joined the group the others agreed on without it";
        return 3;
      } catch (const Error& e) {
        text = e.what();
        return e.status() == TESSERA_ERR_PEER_LOST ? 0 : 2;
      }
    }
    Reformed reformed(*world, 300);
    text = report(reformed, rank);
    return 0;
  });
  ASSERT_EQ(outcomes.size(), 4U);
  EXPECT_EQ(outcomes[2].exit_code, -SIGKILL) << describe_all(outcomes);
  for (const int survivor : {0, 1, 3}) {
    EXPECT_EQ(outcomes[static_cast<size_t>(survivor)].exit_code, 0) << describe_all(outcomes);
  }
  EXPECT_EQ(outcomes[0].text, "0 2 3") << describe_all(outcomes);  // 1 + 2
  EXPECT_EQ(outcomes[1].text, "1 2 3") << describe_all(outcomes);
  const std::string& late = outcomes[3].text;
  EXPECT_NE(late.find("rank 3 arrived after the survivors of group 'world'"), std::string::npos)
      << describe_all(outcomes);
  EXPECT_NE(late.find("agreed on ranks [0, 1]"), std::string::npos) << describe_all(outcomes);
}

}  // namespace
}  // namespace tessera::glootest
