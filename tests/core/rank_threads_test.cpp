// run_rank_threads when the system refuses a thread (an error, never
// std::terminate), run_rank_threads_each handing back every rank's failure,
// and how many ranks can run as threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/core/rank_threads.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// Starts real threads, but refuses the `refuse_at`-th one (1-based) the way
// std::thread does when pthread_create fails with EAGAIN.
detail::ThreadStarter refusing_starter(int refuse_at, std::atomic<int>& started) {
  return [refuse_at, &started](std::function<void()> fn) {
    if (started.load() + 1 == refuse_at) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    ++started;
    return std::thread(std::move(fn));
  };
}

TEST(RankThreads, EveryRankRunsOnceWhenEveryThreadStarts) {
  std::atomic<int> started{0};
  std::mutex mu;
  std::vector<int> ran;
  detail::run_rank_threads_with(
      5,
      [&](int rank) {
        const std::lock_guard lock(mu);
        ran.push_back(rank);
      },
      nullptr, refusing_starter(0, started));
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(started.load(), 4);  // rank 0 runs on the calling thread
}

// run_rank_threads_each: every rank runs to its end, each failure is
// reported to on_failure and handed back, and nothing is rethrown.
TEST(RankThreads, EachRankFailureComesBackAndEveryOneIsReported) {
  std::mutex mu;
  std::vector<int> reported;
  const RankFailures failures = run_rank_threads_each(
      4,
      [](int rank) {
        if (rank == 1 || rank == 3) throw Error(TESSERA_ERR_INTERNAL, "rank fails");
      },
      [&](int rank, const std::string& message) {
        const std::lock_guard lock(mu);
        reported.push_back(rank);
        EXPECT_THAT(message, HasSubstr("rank fails"));
      });
  const std::vector<std::exception_ptr>& each = failures.each;
  EXPECT_TRUE(failures.first);
  ASSERT_EQ(each.size(), 4U);
  EXPECT_FALSE(each[0]);
  EXPECT_TRUE(each[1]);
  EXPECT_FALSE(each[2]);
  EXPECT_TRUE(each[3]);
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<int>{1, 3}));
}

TEST(RankThreads, ARefusedThreadIsAnErrorAndNoRankRuns) {
  std::atomic<int> started{0};
  std::atomic<int> bodies{0};
  std::vector<std::pair<int, std::string>> failures;
  try {
    detail::run_rank_threads_with(
        8, [&](int /*rank*/) { ++bodies; },
        [&](int rank, const std::string& message) { failures.emplace_back(rank, message); },
        refusing_starter(3, started));
    FAIL() << "no error although the third thread was refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INTERNAL);
    const std::string reason =
        std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again)).what();
    EXPECT_EQ(std::string(e.what()),
              "cannot start rank thread 3 of 8: " + reason +
                  " (the system's thread limit, or the memory for thread stacks, ran out after 3 "
                  "rank threads; run fewer ranks)");
  }
  // The two threads that did start were released and joined (a joinable
  // thread destroyed would have ended the test in std::terminate), and no
  // rank began: one would wait for the ranks that never started.
  EXPECT_EQ(started.load(), 2);
  EXPECT_EQ(bodies.load(), 0);
  ASSERT_EQ(failures.size(), 1U);
  EXPECT_EQ(failures[0].first, 3);
  EXPECT_THAT(failures[0].second, HasSubstr("cannot start rank thread 3 of 8"));
}

TEST(RankThreads, TheFirstThreadRefusedLeavesNothingRunning) {
  std::atomic<int> started{0};
  std::atomic<int> bodies{0};
  EXPECT_THROW(detail::run_rank_threads_with(
                   2, [&](int /*rank*/) { ++bodies; }, nullptr, refusing_starter(1, started)),
               Error);
  EXPECT_EQ(started.load(), 0);
  EXPECT_EQ(bodies.load(), 0);
}

// Under a real limit: a child process whose address space has room for a
// few thread stacks only. std::thread's refusal must become the Error.
TEST(RankThreads, ARealThreadLimitEndsInTheErrorNotInTerminate) {
#ifdef TESSERA_TEST_SANITIZED
  GTEST_SKIP() << "sanitizers need more address space than the limit leaves";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // VmSize now plus 64 MiB: fewer than the 64 stacks of 8 MiB below.
        std::ifstream status("/proc/self/status");
        std::string word;
        long long vm_kib = 0;
        while (status >> word) {
          if (word == "VmSize:") {
            status >> vm_kib;
            break;
          }
        }
        rlimit limit{};
        limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(vm_kib + 65536) * 1024;
        if (vm_kib == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
        try {
          run_rank_threads(64, [](int /*rank*/) {});
        } catch (const Error& e) {
          const std::string message = e.what();
          std::_Exit(message.find("cannot start rank thread ") == 0 &&
                             message.find(" of 64: ") != std::string::npos
                         ? 0
                         : 2);
        }
        std::_Exit(1);  // every thread started: the limit did not bite
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(RankThreadLimit, WithoutSystemLimitsItIsTheDocumentedMaximum) {
  const RankThreadLimit limit = rank_thread_limit(SystemThreads{});
  EXPECT_EQ(limit.ranks, kMaxRankThreads);
  EXPECT_EQ(limit.ranks, 4096);
  EXPECT_EQ(limit.reason, "at most 4096 rank threads per process");
}

TEST(RankThreadLimit, TheTightestSystemLimitWins) {
  SystemThreads system;
  system.threads_max = 100000;
  system.pid_max = 32768;
  system.system_threads = 900;
  EXPECT_EQ(rank_thread_limit(system).ranks, 4096);
  system.pid_max = 2000;  // 1100 ids left, plus rank 0 on the calling thread
  RankThreadLimit limit = rank_thread_limit(system);
  EXPECT_EQ(limit.ranks, 1101);
  EXPECT_EQ(limit.reason,
            "the system's thread limit: kernel.pid_max = 2000 with 900 threads running on the "
            "system");
  system.nproc_limit = 500;
  system.user_threads = 450;
  limit = rank_thread_limit(system);
  EXPECT_EQ(limit.ranks, 51);
  EXPECT_THAT(limit.reason, HasSubstr("RLIMIT_NPROC (ulimit -u) = 500 with 450 threads"));
  system.cgroup_max = 64;
  system.cgroup_current = 60;
  limit = rank_thread_limit(system);
  EXPECT_EQ(limit.ranks, 5);
  EXPECT_THAT(limit.reason, HasSubstr("the cgroup's pids.max = 64 with 60 in use"));
  system.cgroup_current = 80;  // over the limit already: only rank 0's thread
  EXPECT_EQ(rank_thread_limit(system).ranks, 1);
}

TEST(RankThreadLimit, TheExcessNamesWhatTheBackendAndTheLimit) {
  EXPECT_EQ(rank_thread_excess(4096, "run.world_size = 4096", "inmemory", SystemThreads{}), "");
  EXPECT_EQ(rank_thread_excess(40000, "run.world_size = 40000", "inmemory", SystemThreads{}),
            "run.world_size = 40000 is more than the 4096 ranks backend 'inmemory' can run as "
            "threads of this process (at most 4096 rank threads per process); use fewer ranks, "
            "or a backend whose ranks are processes (mpi, gloo) for a larger world");
  SystemThreads system;
  system.threads_max = 1000;
  system.system_threads = 990;
  EXPECT_THAT(rank_thread_excess(12, "--ranks 12", "inmemory", system),
              HasSubstr("--ranks 12 is more than the 11 ranks backend 'inmemory' can run as "
                        "threads of this process (the system's thread limit: "
                        "kernel.threads-max = 1000 with 990 threads running on the system)"));
}

TEST(RankThreadLimit, ThisMachineAllowsAFewRankThreads) {
  const SystemThreads system = read_system_threads();
  ASSERT_TRUE(system.system_threads.has_value()) << "/proc/loadavg was not read";
  EXPECT_GE(*system.system_threads, 1);
  EXPECT_GE(rank_thread_limit(system).ranks, 4);
}

}  // namespace
}  // namespace tessera
