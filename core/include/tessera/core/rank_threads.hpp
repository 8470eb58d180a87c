// Runs the ranks of a thread-rank backend (e.g. inmemory) as threads of this
// process: one thread per rank, each with its rank set for logging; and the
// most ranks that can run that way here.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tessera {

// Calls body(rank) on `world_size` threads and joins them all. When a rank
// throws, `on_failure(rank, message)` runs once (on that rank's thread), so
// the caller can abort its communicators and release ranks blocked waiting
// for the failed one; after every thread has finished, the first failure is
// rethrown (as the original exception type). world_size must be >= 1.
//
// Every thread is started before any rank's body runs. When the system
// refuses a thread, no body runs: the threads already started are released
// and joined, on_failure runs for the rank that could not start, and an
// Error(TESSERA_ERR_INTERNAL) "cannot start rank thread K of N: <reason>"
// is thrown (never std::terminate).
void run_rank_threads(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure = nullptr);

// What each rank's body threw (null for a rank that finished), and the
// first failure in time (null when none failed).
struct RankFailures {
  std::vector<std::exception_ptr> each;
  std::exception_ptr first;
};

// The same, but a rank's failure is the caller's to judge: on_failure runs
// for every rank that throws, and the failures come back instead of the
// first being rethrown (for ranks that may go on without a failed one: the
// elastic strategy). A thread the system refuses still throws as above.
RankFailures run_rank_threads_each(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure = nullptr);

// The most ranks Tessera runs as threads of one process, whatever the system
// allows: each rank thread reserves its own stack (8 MiB by default, so
// 32 GiB of address space for 4096) and holds its own model state, and all
// of them share one machine's cores. Larger worlds need a process backend.
inline constexpr int kMaxRankThreads = 4096;

// How many ranks can run as threads of this process now, and why no more.
struct RankThreadLimit {
  int64_t ranks = kMaxRankThreads;  // >= 1
  std::string reason;               // e.g. "kernel.threads-max = 1000, 900 threads running"
};

// What the system says about threads; std::nullopt where unknown or
// unlimited.
struct SystemThreads {
  std::optional<int64_t> threads_max;     // /proc/sys/kernel/threads-max
  std::optional<int64_t> pid_max;         // /proc/sys/kernel/pid_max (every thread takes an id)
  std::optional<int64_t> system_threads;  // threads running on the system (/proc/loadavg)
  std::optional<int64_t> nproc_limit;     // RLIMIT_NPROC (none for root or when unlimited)
  std::optional<int64_t> user_threads;    // threads of this process's user
  std::optional<int64_t> cgroup_max;      // pids.max of this process's cgroup
  std::optional<int64_t> cgroup_current;  // pids.current of that cgroup
};

// The system's thread limits as read now (Linux /proc, /sys/fs/cgroup,
// getrlimit).
SystemThreads read_system_threads();

// The lower of kMaxRankThreads and what `system` leaves for new threads
// (rank 0 runs on the calling thread, so N ranks need N - 1 more threads).
RankThreadLimit rank_thread_limit(const SystemThreads& system);
RankThreadLimit rank_thread_limit();

// Empty when `ranks` ranks can run as threads here; otherwise the reason,
// naming `what` (e.g. "run.world_size = 40000"), backend `backend` and the
// limit: "<what> is more than the N ranks backend '<backend>' can run as
// threads of this process (<why>); ...".
std::string rank_thread_excess(int64_t ranks, const std::string& what, const std::string& backend,
                               const SystemThreads& system);
std::string rank_thread_excess(int64_t ranks, const std::string& what, const std::string& backend);

namespace detail {
// Starts a thread running `fn`; throws std::system_error when the system
// refuses (as the std::thread constructor does).
using ThreadStarter = std::function<std::thread(std::function<void()> fn)>;

// run_rank_threads with the threads started by `start` (tests make it fail);
// with `each` (and `first_out`), run_rank_threads_each into them.
void run_rank_threads_with(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure,
    const ThreadStarter& start, std::vector<std::exception_ptr>* each = nullptr,
    std::exception_ptr* first_out = nullptr);
}  // namespace detail

}  // namespace tessera
