// Failure reports of the mpi backend: a collective or a receive that times
// out names the rank it waited for and how far that rank got; the group is
// then broken on every rank; an abort reaches the groups split from the
// aborted one on every rank.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mpi_session.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpitest {
namespace {

constexpr int64_t kShortMs = 300;

// Runs `fn`, which must throw tessera::Error with one of `statuses`;
// returns its text.
template <typename F>
std::string error_of(std::initializer_list<tessera_status> statuses, F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    bool expected = false;
    for (const tessera_status s : statuses) expected = expected || e.status() == s;
    EXPECT_TRUE(expected) << "status " << status_name(e.status()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return {};
}

tessera_coll_args allreduce_args(std::vector<int64_t>& v, int64_t timeout_ms) {
  tessera_coll_args a{};
  a.struct_size = sizeof a;
  a.coll = TESSERA_COLL_ALLREDUCE;
  a.send = cpu_buffer(std::span<int64_t>(v));
  a.recv = a.send;
  a.op = TESSERA_SUM;
  a.timeout_ms = timeout_ms;
  return a;
}

TEST(MpiStall, CollectiveTimeoutNamesTheRankThatNeverPosted) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int last = w.size() - 1;
  auto dup = w.split(0, w.rank());
  std::vector<int64_t> v(5, 1);
  if (w.rank() != last) {
    const std::string message = error_of({TESSERA_ERR_TIMEOUT, TESSERA_ERR_PEER_LOST},
                                         [&] { dup->run(allreduce_args(v, kShortMs)); });
    EXPECT_NE(message.find("timed out after"), std::string::npos) << message;
    EXPECT_NE(
        message.find("rank " + std::to_string(last) + " has not posted it yet (posted 0 of 1)"),
        std::string::npos)
        << message;
  }
  w.barrier();
  // Broken everywhere now, the last rank included (it learns it from the
  // others' notice): a later operation fails with the first failure's reason.
  const std::string later =
      error_of({TESSERA_ERR_PEER_LOST}, [&] { dup->run(allreduce_args(v, 5000)); });
  EXPECT_NE(later.find("the group is broken"), std::string::npos) << later;
  EXPECT_NE(later.find("gave up waiting"), std::string::npos) << later;
  w.barrier();
}

TEST(MpiStall, ReceiveTimeoutNamesThePeerThatSentNothing) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs two ranks";
  auto dup = w.split(0, w.rank());
  if (w.rank() == 0) {
    std::vector<float> in(4);
    tessera_coll_args a{};
    a.struct_size = sizeof a;
    a.coll = TESSERA_COLL_RECV;
    a.recv = cpu_buffer(std::span<float>(in));
    a.send = a.recv;
    a.send.count = 0;
    a.peer = 1;
    a.tag = 5;
    a.timeout_ms = kShortMs;
    const std::string message = error_of({TESSERA_ERR_TIMEOUT}, [&] { dup->run(a); });
    EXPECT_NE(message.find("recv #1 from rank 1 (tag 5)"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1 has not posted it yet (posted 0 of 1)"), std::string::npos)
        << message;
  }
  w.barrier();
}

TEST(MpiAbort, AbortFailsTheGroupsSplitFromItOnEveryRank) {
  Communicator& w = world();
  const int last = w.size() - 1;
  auto dup = w.split(0, w.rank());
  auto child = dup->split(w.rank() % 2, w.rank());
  ASSERT_NE(child, nullptr);
  const std::string reason = "mpi backend test: rank " + std::to_string(last) + " aborts";
  w.barrier();
  if (w.rank() == last) dup->abort(reason);
  std::vector<int64_t> v(3, 1);
  // The aborted group fails on every rank once the notice is in (the
  // aborting rank at once, so the others cannot complete it) ...
  const std::string on_dup =
      error_of({TESSERA_ERR_PEER_LOST}, [&] { dup->run(allreduce_args(v, 5000)); });
  EXPECT_NE(on_dup.find(reason), std::string::npos) << on_dup;
  // ... and so does the group split from it, even where it has one member.
  const std::string on_child =
      error_of({TESSERA_ERR_PEER_LOST}, [&] { child->run(allreduce_args(v, 5000)); });
  EXPECT_NE(on_child.find(reason), std::string::npos) << on_child;
  child.reset();
  dup.reset();
  w.barrier();
  // The parent of the aborted group still works.
  std::vector<int64_t> one{1};
  w.allreduce(std::span<int64_t>(one));
  EXPECT_EQ(one[0], w.size());
}

}  // namespace
}  // namespace tessera::mpitest
