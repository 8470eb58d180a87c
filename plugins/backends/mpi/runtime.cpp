#include "runtime.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "backoff.hpp"
#include "dtypes.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpi {
namespace {

struct RuntimeState {
  std::mutex mu;
  int live = 0;               // backends holding the runtime
  bool started_here = false;  // this plugin called MPI_Init_thread
  bool types_ready = false;   // create_reduction_types() ran
  bool peer_lost = false;     // see note_peer_lost
  ProcessInfo info;
};

RuntimeState& state() {
  static RuntimeState s;
  return s;
}

const char* thread_level_name(int level) noexcept {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

// True when a process manager that MPI can join started this process.
bool launched_by_mpi() noexcept {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

// Open MPI's libnbc picks a binomial tree (reduce to one rank, then
// broadcast) for MPI_Iallreduce below 4 ranks, for in-place calls and under
// 64 KiB, about half as fast as the blocking MPI_Allreduce on large buffers;
// the reduce-scatter + allgather schedule matches it. The choice is an MCA
// variable, read from the environment when MPI starts; a value the user set
// is kept.
void choose_iallreduce_algorithm(const sdk::Host& host, const Settings& settings) {
  constexpr const char* kVariable = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";
  if (settings.iallreduce_algorithm == 0 || std::getenv(kVariable) != nullptr) return;
  const std::string value = std::to_string(settings.iallreduce_algorithm);
  if (::setenv(kVariable, value.c_str(), 0) == 0) {
    host.debug("mpi: ", kVariable, "=", value);
  }
}

// MPI_Init_thread waits for every process of the job, with no deadline and
// no way to interrupt it: a rank stopped or stuck before it joins would
// hold the others forever. While it lives, a watchdog thread waits
// `timeout_ms` (Settings::init_timeout); if MPI has not started by then it
// says so on stderr and ends this process (exit status 1), which mpirun
// reports and answers by ending the job. Nothing else is possible: MPI is
// half started, and no MPI call may be made to abort it.
class InitWatchdog {
 public:
  explicit InitWatchdog(int64_t timeout_ms) {
    if (timeout_ms < 0) return;  // no limit asked for
    thread_ = std::thread([this, timeout_ms] {
      std::unique_lock lock(mu_);
      if (done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [this] { return done_; })) {
        return;
      }
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");  // NOLINT(concurrency-mt-unsafe)
      const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");  // NOLINT(concurrency-mt-unsafe)
      const std::string line = detail::concat(
          "tessera: error: mpi: rank ", rank != nullptr ? rank : "?", " of ",
          size != nullptr ? size : "?", ": MPI_Init_thread did not complete within ", timeout_ms,
          " ms (option init_timeout_ms; by default the backend's timeout, at least 10 s): a "
          "process of the job did not start, or stopped before joining; exiting\n");
      (void)std::fwrite(line.data(), 1, line.size(), stderr);
      (void)std::fflush(stderr);
      std::_Exit(1);
    });
  }
  InitWatchdog(const InitWatchdog&) = delete;
  InitWatchdog& operator=(const InitWatchdog&) = delete;
  ~InitWatchdog() {
    if (!thread_.joinable()) return;
    {
      const std::lock_guard lock(mu_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

void start_mpi(const sdk::Host& host, const Settings& settings) {
  if (!launched_by_mpi()) {
    // Without a launcher MPI starts a one-rank world; several ranks asked
    // for (by the config, or by a torchrun-style launcher's WORLD_SIZE) would
    // each run alone.
    const char* env_size = std::getenv("WORLD_SIZE");
    const int64_t launched = env_size != nullptr ? std::strtoll(env_size, nullptr, 10) : 1;
    const int64_t wanted = std::max<int64_t>(settings.world_size, launched);
    TESSERA_CHECK(wanted <= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "mpi: ", settings.world_size > 1 ? "world_size is " : "WORLD_SIZE is ", wanted,
                  " but this process was not started by an MPI launcher (OMPI_COMM_WORLD_SIZE "
                  "is not set); start it with `mpirun -np ",
                  wanted, " <program> ...`",
                  env_size != nullptr ? " (`tessera launch` starts processes without MPI's "
                                        "runtime; use it with the gloo backend)"
                                      : "");
    host.info(
        "mpi: no MPI launcher in the environment, starting as a one-rank world "
        "(use `mpirun -np N <program>` for more ranks)");
  }
  choose_iallreduce_algorithm(host, settings);
  int provided = -1;
  int rc = MPI_SUCCESS;
  {
    const InitWatchdog watchdog(settings.init_timeout());
    rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  if (rc != MPI_SUCCESS) {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("mpi: MPI could not start (MPI_Init_thread: ", mpi_error_text(rc),
                               "); start the program with `mpirun -np N <program> ...`"));
  }
  state().started_here = true;
  // The plugin owns MPI in this process, so failures must come back as codes
  // on every communicator, the world included.
  return_errors(MPI_COMM_WORLD, "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  TESSERA_CHECK(provided >= MPI_THREAD_MULTIPLE, TESSERA_ERR_UNSUPPORTED, "mpi: MPI granted only ",
                thread_level_name(provided),
                "; the backend needs MPI_THREAD_MULTIPLE (its service thread talks to MPI "
                "while operations run)");
}

}  // namespace

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    return detail::concat("error code ", code);
  }
  int error_class = code;
  MPI_Error_class(code, &error_class);
  return detail::concat(std::string_view(text, static_cast<size_t>(len)), " (MPI error class ",
                        error_class, ")");
}

tessera_status status_of_mpi_error(int code, tessera_status fallback) noexcept {
  int error_class = code;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) return fallback;
  switch (error_class) {
    case MPI_ERR_TRUNCATE:
      return TESSERA_ERR_MISMATCH;
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_TAG:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_BUFFER:
    case MPI_ERR_ARG:
      return TESSERA_ERR_INVALID_ARGUMENT;
    case MPI_ERR_NO_MEM:
      return TESSERA_ERR_OUT_OF_MEMORY;
    default:
      return fallback;
  }
}

void throw_mpi(int rc, std::string_view what, tessera_status fallback) {
  throw Error(status_of_mpi_error(rc, fallback),
              detail::concat(what, ": MPI error ", mpi_error_text(rc)));
}

void return_errors(MPI_Comm comm, std::string_view what) {
  check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), what);
}

bool wait_requests(MPI_Request* requests, int count, const Settings& settings,
                   std::chrono::steady_clock::time_point deadline, std::string_view what) {
  const Clock::time_point start = Clock::now();
  Backoff backoff(start, settings.spin, settings.yield, settings.max_sleep);
  for (;;) {
    int done = 0;
    check_mpi(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), what,
              TESSERA_ERR_PEER_LOST);
    if (done != 0) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    backoff.pause(now);
  }
}

ProcessInfo acquire_runtime(const sdk::Host& host, const Settings& settings) {
  RuntimeState& s = state();
  const std::lock_guard lock(s.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  TESSERA_CHECK(finalized == 0, TESSERA_ERR_UNSUPPORTED,
                "mpi: MPI was already finalized in this process and cannot start again (set "
                "the option finalize = false to keep it running between backends)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    start_mpi(host, settings);
  } else if (s.live == 0 && !s.started_here) {
    int level = -1;
    check_mpi(MPI_Query_thread(&level), "mpi: MPI_Query_thread");
    TESSERA_CHECK(level >= MPI_THREAD_MULTIPLE, TESSERA_ERR_UNSUPPORTED,
                  "mpi: MPI was initialised by the program with ", thread_level_name(level),
                  "; the backend needs MPI_THREAD_MULTIPLE (call MPI_Init_thread with it, or "
                  "let the backend start MPI)");
  }
  int rank = 0;
  int size = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "mpi: MPI_Comm_rank(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "mpi: MPI_Comm_size(MPI_COMM_WORLD)");
  TESSERA_CHECK(settings.world_size == -1 || settings.world_size == size,
                TESSERA_ERR_INVALID_ARGUMENT, "mpi: world_size is ", settings.world_size,
                " but mpirun started ", size, " rank", size == 1 ? "" : "s",
                " (MPI_COMM_WORLD has ", size, "); make them agree, e.g. `mpirun -np ",
                settings.world_size, " ...`, or set world_size = -1");
  if (!s.types_ready) {
    create_reduction_types();
    s.types_ready = true;
  }
  s.info = ProcessInfo{rank, size};
  ++s.live;
  return s.info;
}

void note_peer_lost() noexcept {
  RuntimeState& s = state();
  const std::lock_guard lock(s.mu);
  s.peer_lost = true;
}

bool peer_lost_noted() noexcept {
  RuntimeState& s = state();
  const std::lock_guard lock(s.mu);
  return s.peer_lost;
}

namespace {

// MPI_Finalize, unless a peer is known lost or not every rank arrives at
// the shutdown barrier in time. Called with the state's lock held.
void finalize_if_safe(RuntimeState& s, const sdk::Host& host, const Settings& settings) {
  const int32_t rank = s.info.rank;
  if (s.peer_lost) {
    host.log(TESSERA_LOG_WARN, rank,
             "mpi: not calling MPI_Finalize: a peer process was lost and MPI_Finalize could "
             "block on it");
    return;
  }
  // Every rank must get here, or MPI_Finalize could wait forever for one
  // that is gone; a barrier with a deadline finds out.
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &request) != MPI_SUCCESS) {
    host.log(TESSERA_LOG_WARN, rank,
             "mpi: not calling MPI_Finalize: the shutdown barrier could not start");
    return;
  }
  bool done = false;
  try {
    done = wait_requests(&request, 1, settings,
                         deadline_after(Clock::now(), settings.finalize_wait_ms),
                         "mpi: shutdown barrier");
  } catch (const Error&) {
    done = false;
  }
  if (!done) {
    host.log(TESSERA_LOG_WARN, rank,
             "mpi: not calling MPI_Finalize: not every rank reached "
             "shutdown within ",
             settings.finalize_wait_ms, " ms (finalize_wait_ms)");
    return;
  }
  free_reduction_types();
  s.types_ready = false;
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) {
    host.log(TESSERA_LOG_WARN, rank, "mpi: MPI_Finalize failed: ", mpi_error_text(rc));
  }
}

}  // namespace

void release_runtime(const sdk::Host& host, const Settings& settings) noexcept {
  RuntimeState& s = state();
  const std::lock_guard lock(s.mu);
  if (--s.live > 0 || !s.started_here || !settings.finalize) return;
  try {
    finalize_if_safe(s, host, settings);
  } catch (...) {  // NOLINT(bugprone-empty-catch): logging failed; MPI stays as it is
  }
}

}  // namespace tessera::mpi
