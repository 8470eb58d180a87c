#include "tessera/core/rank_threads.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"
#include "whole_number.hpp"

namespace tessera {
namespace detail {

void run_rank_threads_with(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure,
    const ThreadStarter& start, std::vector<std::exception_ptr>* each,
    std::exception_ptr* first_out) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "world size must be at least 1, got ", world_size);
  std::mutex mu;
  std::exception_ptr first;
  bool failed = false;
  // Records the first failure; true when this was it.
  auto record = [&](std::exception_ptr error) {
    const std::lock_guard lock(mu);
    if (failed) return false;
    failed = true;
    first = std::move(error);
    return true;
  };
  if (each != nullptr) each->assign(static_cast<size_t>(world_size), nullptr);
  auto rank_main = [&](int rank) {
    ThreadRankGuard guard(rank);
    try {
      body(rank);
    } catch (const std::exception& e) {
      const bool was_first = record(std::current_exception());
      if (each != nullptr) (*each)[static_cast<size_t>(rank)] = std::current_exception();
      if ((was_first || each != nullptr) && on_failure) on_failure(rank, e.what());
    } catch (...) {
      (void)record(std::current_exception());
      if (each != nullptr) (*each)[static_cast<size_t>(rank)] = std::current_exception();
    }
  };

  // No rank's body runs before every thread exists: a rank that started
  // would wait in connect() or its first collective for the ranks that
  // never will. The gate opens (or cancels them) once the loop is done.
  enum class Gate { kClosed, kOpen, kCancelled };
  Gate gate = Gate::kClosed;
  std::condition_variable gate_cv;
  auto thread_main = [&](int rank) {
    {
      std::unique_lock lock(mu);
      gate_cv.wait(lock, [&] { return gate != Gate::kClosed; });
      if (gate == Gate::kCancelled) return;
    }
    rank_main(rank);
  };
  auto release = [&](Gate to) {
    {
      const std::lock_guard lock(mu);
      gate = to;
    }
    gate_cv.notify_all();
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size - 1));
  int refused = 0;  // the rank whose thread the system refused; 0: none
  std::string reason;
  for (int r = 1; r < world_size; ++r) {
    try {
      threads.push_back(start([&thread_main, r] { thread_main(r); }));
    } catch (const std::exception& e) {  // std::system_error, or std::bad_alloc
      refused = r;
      reason = e.what();
      break;
    }
  }
  if (refused != 0) {
    release(Gate::kCancelled);
    for (auto& t : threads) t.join();
    const std::string message = fmt::format(
        "cannot start rank thread {} of {}: {} (the system's thread limit, or the memory for "
        "thread stacks, ran out after {} rank threads; run fewer ranks)",
        refused, world_size, reason, refused);
    if (record(std::make_exception_ptr(Error(TESSERA_ERR_INTERNAL, message))) && on_failure) {
      on_failure(refused, message);
    }
    std::rethrow_exception(first);
  }
  release(Gate::kOpen);
  rank_main(0);  // rank 0 runs on the calling thread
  for (auto& t : threads) t.join();
  if (first_out != nullptr) *first_out = first;
  if (first && each == nullptr) std::rethrow_exception(first);
}

}  // namespace detail

void run_rank_threads(int world_size, const std::function<void(int rank)>& body,
                      const std::function<void(int rank, const std::string& message)>& on_failure) {
  detail::run_rank_threads_with(world_size, body, on_failure, [](std::function<void()> fn) {
    return std::thread(std::move(fn));
  });
}

RankFailures run_rank_threads_each(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure) {
  RankFailures failures;
  detail::run_rank_threads_with(
      world_size, body, on_failure,
      [](std::function<void()> fn) { return std::thread(std::move(fn)); }, &failures.each,
      &failures.first);
  return failures;
}

// ---- how many rank threads can start ----

namespace {

// The first whitespace-separated word of a file, or "" when it cannot be read.
std::string first_word(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

// A count read from a file holding one number; std::nullopt when absent,
// unreadable or "max".
std::optional<int64_t> count_in(const std::filesystem::path& path) {
  return whole_number(first_word(path));
}

// Threads running on the system: the "running/total" field of /proc/loadavg.
std::optional<int64_t> system_thread_count() {
  std::ifstream in("/proc/loadavg");
  std::string field;
  for (int i = 0; i < 4 && in >> field; ++i) {
  }
  const size_t slash = field.find('/');
  if (!in || slash == std::string::npos) return std::nullopt;
  return whole_number(std::string_view(field).substr(slash + 1));
}

// Threads of the processes whose real user is `uid` (what RLIMIT_NPROC
// counts), from /proc/<pid>/status.
std::optional<int64_t> user_thread_count(uid_t uid) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc", ec);
  if (ec) return std::nullopt;
  int64_t total = 0;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        })) {
      continue;
    }
    std::ifstream status(entry.path() / "status");
    std::string line;
    bool mine = false;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::string_view rest = std::string_view(line).substr(4);
        rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
        const auto real = whole_number(rest.substr(0, rest.find_first_of(" \t")));
        mine = real && *real == static_cast<int64_t>(uid);
        if (!mine) break;
      } else if (mine && line.rfind("Threads:", 0) == 0) {
        std::string_view rest = std::string_view(line).substr(8);
        rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
        total += whole_number(rest).value_or(1);
        break;
      }
    }
  }
  return total;
}

// The tightest pids limit of this process's cgroup and its ancestors (v2,
// or the v1 pids controller): pids.max - pids.current is least there.
void read_cgroup_pids(SystemThreads& out) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::filesystem::path root;
    if (line.substr(0, a) == "0" && controllers.empty()) {
      root = "/sys/fs/cgroup";
    } else if (controllers == "pids" || controllers.find("pids,") == 0 ||
               controllers.find(",pids") != std::string::npos) {
      root = "/sys/fs/cgroup/pids";
    } else {
      continue;
    }
    std::filesystem::path group = line.substr(b + 1);
    while (true) {
      const std::filesystem::path dir = root / group.relative_path();
      const auto max = count_in(dir / "pids.max");
      const auto current = count_in(dir / "pids.current");
      if (max && current &&
          (!out.cgroup_max || *max - *current < *out.cgroup_max - *out.cgroup_current)) {
        out.cgroup_max = max;
        out.cgroup_current = current;
      }
      if (!group.has_relative_path()) break;
      group = group.parent_path();
    }
  }
}

}  // namespace

SystemThreads read_system_threads() {
  SystemThreads s;
  s.threads_max = count_in("/proc/sys/kernel/threads-max");
  s.pid_max = count_in("/proc/sys/kernel/pid_max");
  s.system_threads = system_thread_count();
  // RLIMIT_NPROC does not hold for root.
  rlimit nproc{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY) {
    s.nproc_limit = static_cast<int64_t>(nproc.rlim_cur);
    s.user_threads = user_thread_count(getuid());
  }
  read_cgroup_pids(s);
  return s;
}

RankThreadLimit rank_thread_limit(const SystemThreads& system) {
  RankThreadLimit limit{kMaxRankThreads,
                        fmt::format("at most {} rank threads per process", kMaxRankThreads)};
  const auto consider = [&](const std::optional<int64_t>& max, const std::optional<int64_t>& used,
                            const char* what, const char* users) {
    if (!max || !used) return;
    // N ranks need N - 1 new threads: rank 0 runs on the calling thread.
    const int64_t ranks = std::max<int64_t>(*max - *used, 0) + 1;
    if (ranks < limit.ranks) {
      limit.ranks = ranks;
      limit.reason =
          fmt::format("the system's thread limit: {} = {} with {} {}", what, *max, *used, users);
    }
  };
  consider(system.threads_max, system.system_threads, "kernel.threads-max",
           "threads running on the system");
  consider(system.pid_max, system.system_threads, "kernel.pid_max",
           "threads running on the system");
  consider(system.nproc_limit, system.user_threads, "RLIMIT_NPROC (ulimit -u)",
           "threads of this user running");
  consider(system.cgroup_max, system.cgroup_current, "the cgroup's pids.max", "in use");
  return limit;
}

RankThreadLimit rank_thread_limit() { return rank_thread_limit(read_system_threads()); }

std::string rank_thread_excess(int64_t ranks, const std::string& what, const std::string& backend,
                               const SystemThreads& system) {
  if (ranks <= 1) return {};
  const RankThreadLimit limit = rank_thread_limit(system);
  if (ranks <= limit.ranks) return {};
  return fmt::format(
      "{} is more than the {} ranks backend '{}' can run as threads of this process ({}); use "
      "fewer ranks, or a backend whose ranks are processes (mpi, gloo) for a larger world",
      what, limit.ranks, backend, limit.reason);
}

std::string rank_thread_excess(int64_t ranks, const std::string& what, const std::string& backend) {
  if (ranks <= 1) return {};
  return rank_thread_excess(ranks, what, backend, read_system_threads());
}

}  // namespace tessera
