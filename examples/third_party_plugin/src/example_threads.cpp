// example_threads: a backend plugin written against the installed Tessera
// SDK only, as an example of the SDK for third-party authors. It is NOT a
// fast backend; it favours code that is easy to check over speed.
//
// Ranks are threads of one process (TESSERA_BACKEND_CAP_THREAD_RANKS) that
// share a Group: one mutex and one condition variable guard a generation-
// counted barrier, the buffers each rank published for the collective in
// progress and the send/recv queues (group.hpp). Each rank computes its own
// result of a collective by copying from the published buffers, reducing
// with the SDK's kernels (collectives.hpp). Each communicator owns a worker
// thread; every collective and split, blocking or not, runs there in posting
// order, so non-blocking collectives progress without wait() (worker.hpp).
// send/recv bypass the worker: sends are buffered and receives are matched
// in posting order (p2p.hpp).
//
// Option: check_calls (bool, default true) compares every rank's call
// before running a collective and fails all of them with MISMATCH if the
// ranks disagree on dtype, count, op or root.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <tessera/sdk/backend.hpp>
#include <tessera/sdk/coll.hpp>
#include <tessera/sdk/error.hpp>

#include "collectives.hpp"
#include "group.hpp"
#include "p2p.hpp"
#include "worker.hpp"

namespace example_threads {
namespace {

namespace sdk = tessera::sdk;

constexpr uint32_t kCapabilities =
    TESSERA_BACKEND_CAP_THREAD_RANKS | TESSERA_BACKEND_CAP_CPU_BUFFERS;

const tessera_option_decl kOptions[] = {
    {"check_calls", TESSERA_OPT_BOOL, "true",
     "compare every rank's collective (kind, dtype, count, op, root) before running it"},
};

// One rank's handle on a group. Its operations run on its own worker.
class ThreadsComm final : public sdk::Comm {
 public:
  ThreadsComm(std::shared_ptr<Group> group, int32_t rank, int32_t world_rank, int64_t timeout_ms,
              bool check_calls, const sdk::Host& host)
      : ctx_{std::move(group), rank, world_rank, timeout_ms, check_calls, host},
        worker_(std::make_unique<Worker>()) {}

  ~ThreadsComm() override { worker_.reset(); }  // finishes queued work first

  [[nodiscard]] int32_t rank() const override { return ctx_.rank; }
  [[nodiscard]] int32_t size() const override { return ctx_.group->size(); }

  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override {
    std::pair<std::shared_ptr<Group>, int32_t> result;
    const std::string what = name("comm_split");
    const auto task = worker_->push([&] { result = run_split(ctx_, color, key, what); });
    task->wait_for(-1);
    task->rethrow();
    if (!result.first) return nullptr;
    ctx_.host.log(TESSERA_LOG_DEBUG, ctx_.world_rank, what, ": colour ", color, " -> rank ",
                  result.second, " of ", result.first->size());
    return std::make_unique<ThreadsComm>(std::move(result.first), result.second, ctx_.world_rank,
                                         ctx_.timeout_ms, ctx_.check_calls, ctx_.host);
  }

  void abort(const char* reason) noexcept override {
    try {
      ctx_.group->abort(reason);
    } catch (...) {  // only std::bad_alloc copying the reason; nothing to report it to
    }
  }

  std::unique_ptr<sdk::Work> post(const tessera_coll_args& args, bool nonblocking) override {
    sdk::validate_coll_args(args, ctx_.rank, size(), kCapabilities);
    std::string what = name(tessera::coll_name(args.coll));
    if (args.coll == TESSERA_COLL_SEND) {  // buffered: complete once posted
      run_send(ctx_, args);
      return nullptr;
    }
    if (args.coll == TESSERA_COLL_RECV) {
      auto work = std::make_unique<RecvWork>(ctx_, args, std::move(what));
      if (nonblocking) return work;
      work->wait(-1);
      return nullptr;
    }
    auto task = worker_->push([this, args, what] { run_collective(ctx_, args, what); });
    if (nonblocking) return std::make_unique<TaskWork>(std::move(task), std::move(what));
    task->wait_for(-1);
    task->rethrow();
    return nullptr;
  }

 private:
  // "example_threads allreduce #7 (rank 1 of 4)": names an operation in
  // errors and log lines.
  std::string name(std::string_view op) {
    return "example_threads " + std::string(op) + " #" + std::to_string(++posted_) + " (rank " +
           std::to_string(ctx_.rank) + " of " + std::to_string(size()) + ")";
  }

  RankContext ctx_;
  uint64_t posted_ = 0;
  std::unique_ptr<Worker> worker_;
};

// The process-wide engine: knows the world size and hands out the world
// group to the ranks that connect.
class ThreadsBackend final : public sdk::Backend {
 public:
  ThreadsBackend(const sdk::Host& host, const sdk::Options& options,
                 const tessera_backend_config& config)
      : sdk::Backend(host),
        world_size_(config.world_size),
        timeout_ms_(config.timeout_ms > 0 ? config.timeout_ms : 60000),
        check_calls_(options.get_bool("check_calls")) {
    TESSERA_CHECK(world_size_ >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "example_threads: world_size must be >= 1 (ranks are threads of this "
                  "process), got ",
                  world_size_);
    host.debug("example_threads: ", world_size_, " thread ranks, timeout ", timeout_ms_,
               " ms, check_calls ", check_calls_ ? "on" : "off");
  }

  // Joins the world group as `rank`; returns when all ranks have joined.
  std::unique_ptr<sdk::Comm> connect(int32_t rank) override {
    TESSERA_CHECK(rank >= 0 && rank < world_size_, TESSERA_ERR_INVALID_ARGUMENT,
                  "example_threads: connect as rank ", rank, " but the world has ranks 0..",
                  world_size_ - 1, " (ranks are threads; rank -1 is not supported)");
    const std::shared_ptr<Group> group = join_round();
    const std::string what = "example_threads connect (rank " + std::to_string(rank) + " of " +
                             std::to_string(world_size_) + ")";
    try {
      group->arrive_and_wait(rank, what, Deadline::after(timeout_ms_), true, nullptr);
    } catch (...) {
      forget_round(group);
      throw;
    }
    host().debug(what, ": joined");
    return std::make_unique<ThreadsComm>(group, rank, rank, timeout_ms_, check_calls_, host());
  }

 private:
  // The world group the next world_size connects share: a new one once the
  // previous has all its ranks, so a backend can be connected again.
  std::shared_ptr<Group> join_round() {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!round_ || joined_ == world_size_) {
      round_ = std::make_shared<Group>(world_size_);
      joined_ = 0;
    }
    ++joined_;
    return round_;
  }
  // After a failed connect the round is abandoned; late ranks start anew.
  void forget_round(const std::shared_ptr<Group>& group) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (round_ == group) round_ = nullptr;
  }

  const int32_t world_size_;
  const int64_t timeout_ms_;
  const bool check_calls_;
  std::mutex mu_;
  std::shared_ptr<Group> round_;
  int32_t joined_ = 0;
};

}  // namespace
}  // namespace example_threads

TESSERA_REGISTER_BACKEND(example_threads::ThreadsBackend, "example_threads", "1.0.0",
                         "Example third-party backend: thread ranks, simple and readable, not fast",
                         example_threads::kCapabilities, example_threads::kOptions)
