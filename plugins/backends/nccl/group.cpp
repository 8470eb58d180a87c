#include "group.hpp"

#include <algorithm>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {
namespace {

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// An asynchronous NCCL error: a peer or the network went away, or a bug.
tessera_status status_of(ncclResult_t r) noexcept {
  return r == ncclRemoteError || r == ncclSystemError ? TESSERA_ERR_PEER_LOST
                                                      : TESSERA_ERR_INTERNAL;
}

}  // namespace

Group::Group(std::string name, int32_t device, ncclComm_t comm, std::string key,
             std::shared_ptr<ProgressBoard> board)
    : name_(std::move(name)),
      key_(std::move(key)),
      board_(std::move(board)),
      device_(device),
      comm_(comm) {
  int rank = 0;
  int size = 1;
  (void)ncclCommUserRank(comm_, &rank);
  (void)ncclCommCount(comm_, &size);
  rank_ = rank;
  size_ = size;
  sends_.assign(static_cast<size_t>(size_), 0);
  recvs_.assign(static_cast<size_t>(size_), 0);
  const cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    cuda_check(err, "cudaStreamCreateWithFlags", where());
  }
}

Group::~Group() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (comm_ != nullptr) {
      // Flush and release the communicator; a bounded wait, then abort.
      ncclResult_t r = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (r == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        (void)ncclCommGetAsyncError(comm_, &r);
      }
      if (r == ncclSuccess) {
        (void)ncclCommDestroy(comm_);
      } else {
        (void)ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    pending_.clear();
  }
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

std::string Group::where() const {
  return detail::concat("group '", name_, "' (rank ", rank_, " of ", size_, ")");
}

uint64_t Group::next_send(int32_t peer) { return ++sends_.at(static_cast<size_t>(peer)); }
uint64_t Group::next_recv(int32_t peer) { return ++recvs_.at(static_cast<size_t>(peer)); }

void Group::throw_if_failed() const {
  if (!failed()) return;
  const std::lock_guard<std::mutex> lock(mu_);
  throw Error(status_, message_);
}

void Group::abort_locked() noexcept {
  if (comm_ == nullptr) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

void Group::fail_locked(tessera_status status, const std::string& message) noexcept {
  if (!failed_.load(std::memory_order_relaxed)) {
    status_ = status;
    message_ = message;
    failed_.store(true, std::memory_order_release);
  }
  abort_locked();
}

void Group::fail(tessera_status status, const std::string& message) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  fail_locked(status, message);
}

ncclResult_t Group::call_locked(std::unique_lock<std::mutex>& lock, const std::string& label,
                                Clock::time_point deadline,
                                const std::function<ncclResult_t(ncclComm_t)>& call,
                                bool may_defer) {
  if (failed_.load(std::memory_order_relaxed)) return ncclInternalError;
  if (comm_ == nullptr) {
    fail_locked(TESSERA_ERR_PEER_LOST, detail::concat("nccl: ", where(), " has no communicator"));
    return ncclInternalError;
  }
  ncclResult_t r = call(comm_);
  // Non-blocking communicator: the call, or what it started in the
  // background (a split's new communicator), may still be in progress even
  // when it returned ncclSuccess; the communicator's state says when it is
  // done, and the next call must not come before.
  if (r == ncclSuccess) (void)ncclCommGetAsyncError(comm_, &r);
  while (r == ncclInProgress && !may_defer) {
    if (Clock::now() >= deadline) {
      fail_locked(TESSERA_ERR_TIMEOUT,
                  detail::concat("nccl: ", label, " on ", where(),
                                 " could not be enqueued before its timeout; the NCCL "
                                 "communicator was aborted (ncclCommAbort)"));
      return ncclInternalError;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
    if (comm_ == nullptr) return ncclInternalError;
    (void)ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess && r != ncclInProgress && comm_ != nullptr) {
    fail_locked(status_of(r), detail::concat("nccl: ", label, " on ", where(),
                                             " failed: ", nccl_error_text(r, comm_)));
  }
  return r;
}

void Group::finish_deferred_locked(ncclResult_t state) noexcept {
  if (!deferred_ || state == ncclInProgress) return;
  if (state != ncclSuccess) {
    const std::string label =
        pending_.empty() ? std::string("an operation") : pending_.back().label;
    fail_locked(status_of(state), detail::concat("nccl: ", label, " on ", where(),
                                                 " failed: ", nccl_error_text(state, comm_)));
    return;
  }
  const cudaError_t err = deferred_->record(stream_);
  deferred_.reset();
  if (err != cudaSuccess) {
    fail_locked(TESSERA_ERR_INTERNAL, detail::concat("nccl: cudaEventRecord on ", where(),
                                                     " failed: ", cudaGetErrorString(err)));
  }
}

void Group::settle_locked(std::unique_lock<std::mutex>& lock, Clock::time_point deadline) {
  while (deferred_ && !failed_.load(std::memory_order_relaxed) && comm_ != nullptr) {
    ncclResult_t r = ncclSuccess;
    (void)ncclCommGetAsyncError(comm_, &r);
    if (r != ncclInProgress) {
      finish_deferred_locked(r);
      return;
    }
    if (Clock::now() >= deadline) {
      fail_locked(
          TESSERA_ERR_TIMEOUT,
          detail::concat(
              "nccl: ", pending_.empty() ? std::string("an operation") : pending_.back().label,
              " on ", where(),
              " was still being enqueued when the next operation's timeout "
              "passed (a peer is missing, late or gone); the NCCL "
              "communicator was aborted (ncclCommAbort)"));
      return;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
}

void Group::enqueue(const std::string& label, Clock::time_point deadline,
                    const std::function<ncclResult_t(ncclComm_t)>& call) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    settle_locked(lock, deadline);
    (void)call_locked(lock, label, deadline, call, false);
  }
  throw_if_failed();
}

void Group::start(const std::string& label, Clock::time_point deadline,
                  const std::function<ncclResult_t(ncclComm_t)>& call,
                  const std::shared_ptr<Event>& event, uint64_t seq) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    settle_locked(lock, deadline);
    const ncclResult_t r = call_locked(lock, label, deadline, call, true);
    if (!failed_.load(std::memory_order_relaxed)) {
      pending_.push_back(Pending{event, label, Clock::now(), deadline, seq});
      if (r == ncclInProgress) {
        deferred_ = event;
      } else {
        const cudaError_t err = event->record(stream_);
        if (err != cudaSuccess) {
          fail_locked(TESSERA_ERR_INTERNAL,
                      detail::concat("nccl: cudaEventRecord after ", label, " on ", where(),
                                     " failed: ", cudaGetErrorString(err)));
        }
      }
    }
  }
  throw_if_failed();
}

void Group::poll() noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  if (failed_.load(std::memory_order_relaxed) || comm_ == nullptr) return;
  if (deferred_) {
    ncclResult_t state = ncclSuccess;
    (void)ncclCommGetAsyncError(comm_, &state);
    finish_deferred_locked(state);
    if (failed_.load(std::memory_order_relaxed)) return;
  }
  while (!pending_.empty() && pending_.front().event->recorded()) {
    const cudaError_t q = cudaEventQuery(pending_.front().event->get());
    if (q == cudaErrorNotReady) break;
    if (q != cudaSuccess) {
      fail_locked(TESSERA_ERR_INTERNAL,
                  detail::concat("nccl: ", pending_.front().label, " on ", where(),
                                 " failed: CUDA reported ", cudaGetErrorName(q), ": ",
                                 cudaGetErrorString(q)));
      return;
    }
    pending_.pop_front();
  }
  ncclResult_t r = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(comm_, &r);
  if (got != ncclSuccess) r = got;
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string what =
        pending_.empty() ? std::string("the last operation") : pending_.front().label;
    const std::string absent =
        pending_.empty() ? std::string() : absent_locked(pending_.front().seq);
    fail_locked(status_of(r), detail::concat("nccl: ", what, " on ", where(),
                                             " failed: ", nccl_error_text(r, comm_), absent,
                                             "; the NCCL communicator was aborted"));
    return;
  }
  if (!pending_.empty() && Clock::now() >= pending_.front().deadline) {
    const Pending& late = pending_.front();
    const std::string absent = absent_locked(late.seq);
    fail_locked(TESSERA_ERR_TIMEOUT,
                detail::concat("nccl: ", late.label, " on ", where(), " timed out after ",
                               ms_since(late.start), " ms",
                               absent.empty() ? " (a peer is missing, late or gone)" : absent,
                               "; the NCCL communicator was aborted (ncclCommAbort) and every "
                               "later operation on the group fails"));
  }
}

std::string Group::absent_locked(uint64_t seq) const {
  return seq != 0 && seq == absent_seq_ ? absent_text(absent_) : std::string();
}

void Group::exchange_progress() noexcept {
  if (!board_) return;
  uint64_t seq = 0;
  std::string label;
  bool publish = false;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load(std::memory_order_relaxed) || pending_.empty() || size_ < 2) return;
    const Pending& front = pending_.front();
    if (front.seq == 0) return;  // a send or receive names its peer already
    const auto now = Clock::now();
    const auto interval = std::clamp<Clock::duration>(
        (front.deadline - front.start) / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
    if (now - front.start < interval) return;
    if (published_ == front.seq && now - looked_ < interval) return;
    seq = front.seq;
    label = front.label;
    publish = published_ != seq;
    published_ = seq;
    looked_ = now;
  }
  try {
    if (publish) board_->arrived(key_, rank_, seq);
    if (const std::optional<std::string> by = board_->aborted(key_)) {
      fail(TESSERA_ERR_PEER_LOST, detail::concat("nccl: ", label, " on ", where(),
                                                 " failed: the group was aborted by ", *by));
      return;
    }
    std::vector<int32_t> absent = board_->absent(key_, size_, rank_, seq);
    const std::lock_guard<std::mutex> lock(mu_);
    absent_seq_ = seq;
    absent_ = std::move(absent);
  } catch (...) {
    // Diagnostics only: the operation's own timeout still applies.
  }
}

bool NcclWork::test() {
  if (done_) return true;
  if (!event_->recorded()) {
    group_->poll();
    group_->throw_if_failed();
    if (!event_->recorded()) return false;
  }
  const cudaError_t q = cudaEventQuery(event_->get());
  if (q == cudaSuccess && !group_->failed()) {
    done_ = true;
    return true;
  }
  group_->poll();
  group_->throw_if_failed();
  if (q != cudaErrorNotReady && q != cudaSuccess) {
    group_->fail(
        TESSERA_ERR_INTERNAL,
        detail::concat("nccl: ", label_, " on ", group_->where(), " failed: CUDA reported ",
                       cudaGetErrorName(q), ": ", cudaGetErrorString(q)));
    group_->throw_if_failed();
  }
  return false;
}

void NcclWork::wait(int64_t timeout_ms) {
  // Polls without sleeping for the first moments (an operation on a GPU
  // often takes microseconds, and a sleep would add tens of them to each),
  // then backs off so that a long wait leaves the core to others.
  constexpr auto kSpin = std::chrono::milliseconds(2);
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(10);
  while (!test()) {
    if (timeout_ms >= 0 && ms_since(start) >= timeout_ms) {
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("nccl: waiting for ", label_, " on ", group_->where(),
                                 " timed out after ", ms_since(start), " ms"));
    }
    if (Clock::now() - start < kSpin) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::add(const std::shared_ptr<Group>& group) {
  const std::lock_guard<std::mutex> lock(mu_);
  groups_.push_back(group);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void Watchdog::loop() {
  (void)cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    std::erase_if(groups_, [](const std::weak_ptr<Group>& g) { return g.expired(); });
    std::vector<std::shared_ptr<Group>> live;
    for (const auto& g : groups_) {
      if (auto p = g.lock()) live.push_back(std::move(p));
    }
    lock.unlock();
    for (const auto& g : live) {
      g->poll();
      g->exchange_progress();
    }
    live.clear();
    lock.lock();
    cv_.wait_for(lock, period_, [this] { return stopping_; });
  }
}

}  // namespace tessera::nccl_backend
