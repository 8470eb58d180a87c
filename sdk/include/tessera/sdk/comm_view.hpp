// Strategy-side view of a communicator (tessera_backend_api, c/backend.h):
// typed blocking and non-blocking collectives and point-to-point sends and
// receives that count the time spent blocked and the bytes sent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "tessera/c/backend.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Time blocked on communication and bytes sent, accumulated by a CommView.
struct CommStats {
  int64_t wait_ns = 0;
  int64_t bytes_sent = 0;
  // Gradient compression on this communicator (grad_codec.hpp): the bytes
  // it kept off the wire (what f32 would have sent minus what was sent)
  // and the time spent encoding and decoding.
  int64_t bytes_saved = 0;
  int64_t compress_ns = 0;
};

// Whether a collective on `backend` may take the buffers of this rank's
// device as CUDA buffers: a CUDA run over a backend that accepts them.
inline bool buffers_on_device(const Host& host, const tessera_backend_api& backend) noexcept {
  return host.compute_device().type == TESSERA_DEVICE_CUDA &&
         (backend.capabilities & TESSERA_BACKEND_CAP_CUDA_BUFFERS) != 0;
}

// Marks the send and receive buffers of `a`, built as CPU ones, as CUDA
// buffers when the device reads both in place (device or managed memory,
// such as the host's TrackedBuffer), so a backend for which
// buffers_on_device holds works on them where they are. They stay CPU
// buffers when either is ordinary host memory (a backend takes both on one
// kind of device).
inline void place_on_device(const Host& host, tessera_coll_args& a) noexcept {
  tessera_buffer* sides[] = {&a.send, &a.recv};
  tessera_device device{TESSERA_DEVICE_CPU, 0};
  for (tessera_buffer* b : sides) {
    if (b->data == nullptr || b->count == 0) continue;
    if (b->device.type != TESSERA_DEVICE_CPU) return;
    const tessera_device d = host.pointer_device(b->data);
    if (d.type != TESSERA_DEVICE_CUDA) return;
    device = d;
  }
  if (device.type != TESSERA_DEVICE_CUDA) return;
  for (tessera_buffer* b : sides) b->device = device;
}

// A started non-blocking operation of a CommView. Must be waited on; the
// destructor waits (and swallows errors) only as a last resort.
class PendingOp {
 public:
  PendingOp() = default;
  PendingOp(const tessera_backend_api* api, tessera_work* work, CommStats* stats)
      : api_(api), work_(work), stats_(stats) {}
  PendingOp(PendingOp&& o) noexcept
      : api_(o.api_), work_(std::exchange(o.work_, nullptr)), stats_(o.stats_) {}
  PendingOp& operator=(PendingOp&& o) noexcept {
    if (this != &o) {
      drop();
      api_ = o.api_;
      work_ = std::exchange(o.work_, nullptr);
      stats_ = o.stats_;
    }
    return *this;
  }
  PendingOp(const PendingOp&) = delete;
  PendingOp& operator=(const PendingOp&) = delete;
  ~PendingOp() { drop(); }

  [[nodiscard]] bool pending() const noexcept { return work_ != nullptr; }

  // Blocks until done (time counted as communication wait); throws the
  // operation's error.
  void wait(const Host& host) {
    if (work_ == nullptr) return;
    const auto t0 = std::chrono::steady_clock::now();
    const tessera_status s = api_->work_wait(work_, -1);
    if (stats_ != nullptr) {
      stats_->wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
    }
    api_->work_free(work_);
    work_ = nullptr;
    detail::check_host_call(host, s, "wait");
  }

  // Never blocks: true (and the operation released) once it has finished,
  // false while it is still running; throws the operation's error. For
  // loops that serve several peers at once (work_test).
  [[nodiscard]] bool done(const Host& host) {
    if (work_ == nullptr) return true;
    int32_t finished = 0;
    const tessera_status s = api_->work_test(work_, &finished);
    if (s == TESSERA_OK && finished == 0) return false;
    api_->work_free(work_);
    work_ = nullptr;
    detail::check_host_call(host, s, "test");
    return true;
  }

 private:
  void drop() noexcept {
    if (work_ != nullptr) {
      (void)api_->work_wait(work_, -1);
      api_->work_free(work_);
      work_ = nullptr;
    }
  }
  const tessera_backend_api* api_ = nullptr;
  tessera_work* work_ = nullptr;
  CommStats* stats_ = nullptr;
};

// A communicator as a strategy uses it: typed collectives on CPU f32 (or any
// dtype through tessera_buffer), with the time spent blocked and the bytes
// sent counted into stats(). Borrows the handle unless made by split().
class CommView {
 public:
  CommView(const Host& host, const tessera_backend_api* api, tessera_comm* comm, bool owned = false)
      : host_(host), api_(api), comm_(comm), owned_(owned) {
    TESSERA_CHECK(api != nullptr && comm != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no communicator");
    rank_ = api_->comm_rank(comm_);
    size_ = api_->comm_size(comm_);
    // A CUDA run on a backend that takes CUDA buffers: the buffers kernels
    // read in place go to it as CUDA buffers (see place()).
    on_device_ = buffers_on_device(host_, *api_);
  }
  CommView(const CommView&) = delete;
  CommView& operator=(const CommView&) = delete;
  ~CommView() {
    if (owned_) api_->comm_destroy(comm_);
  }

  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t size() const noexcept { return size_; }
  [[nodiscard]] CommStats& stats() noexcept { return stats_; }
  [[nodiscard]] tessera_comm* raw() const noexcept { return comm_; }
  // The backend table the communicator runs on (e.g. for a tensor-parallel
  // group handed to a model's units, tessera_tp_group).
  [[nodiscard]] const tessera_backend_api* api() const noexcept { return api_; }

  // Collective split (see tessera_backend_api::comm_split); nullptr for color < 0.
  [[nodiscard]] std::unique_ptr<CommView> split(int32_t color, int32_t key) {
    tessera_comm* out = nullptr;
    wait_timed([&] { return api_->comm_split(comm_, color, key, &out); }, "comm_split");
    if (out == nullptr) return nullptr;
    return std::make_unique<CommView>(host_, api_, out, true);
  }

  // Counts compression on this communicator into stats() (see CommStats).
  void count_compression(int64_t bytes_saved, int64_t compress_ns) noexcept {
    stats_.bytes_saved += bytes_saved;
    stats_.compress_ns += compress_ns;
  }

  // Runs `args` to completion (all of it counted as wait).
  void run(tessera_coll_args args) {
    args.struct_size = sizeof args;
    place(args);
    stats_.bytes_sent += bytes_sent(args);
    wait_timed([&] { return api_->post(comm_, &args, nullptr); }, coll_name(args.coll));
  }
  // Starts `args`; buffers must stay untouched until the op is waited on.
  [[nodiscard]] PendingOp start(tessera_coll_args args) {
    args.struct_size = sizeof args;
    place(args);
    stats_.bytes_sent += bytes_sent(args);
    tessera_work* work = nullptr;
    detail::check_host_call(host_, api_->post(comm_, &args, &work), coll_name(args.coll));
    return {api_, work, &stats_};
  }

  // Convenience forms over CPU buffers; `send == recv` means in place.
  static tessera_coll_args args(tessera_coll_type coll, tessera_buffer send, tessera_buffer recv,
                                tessera_reduce_op op = TESSERA_SUM, int32_t root = 0) noexcept {
    tessera_coll_args a{};
    a.struct_size = sizeof a;
    a.coll = coll;
    a.send = send;
    a.recv = recv;
    a.op = op;
    a.root = root;
    return a;
  }
  template <typename T>
  static tessera_buffer buffer(std::span<T> data) noexcept {
    using E = std::remove_const_t<T>;
    return tessera_buffer{const_cast<E*>(data.data()), data.size(),  // NOLINT
                          dtype_of<E>::value, tessera_device{TESSERA_DEVICE_CPU, 0}};
  }

  template <typename T>
  void allreduce(std::span<T> data, tessera_reduce_op op = TESSERA_SUM) {
    run(args(TESSERA_COLL_ALLREDUCE, buffer(data), buffer(data), op));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_allreduce(std::span<T> data, tessera_reduce_op op = TESSERA_SUM) {
    return start(args(TESSERA_COLL_ALLREDUCE, buffer(data), buffer(data), op));
  }
  template <typename T>
  void broadcast(std::span<T> data, int32_t root) {
    run(args(TESSERA_COLL_BROADCAST, buffer(data), buffer(data), TESSERA_SUM, root));
  }
  // recv holds size() blocks of send.size() elements.
  template <typename T>
  void allgather(std::span<const T> send, std::span<T> recv) {
    run(args(TESSERA_COLL_ALLGATHER, buffer(send), buffer(recv)));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_allgather(std::span<const T> send, std::span<T> recv) {
    return start(args(TESSERA_COLL_ALLGATHER, buffer(send), buffer(recv)));
  }
  // send holds size() blocks of recv.size() elements.
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv,
                      tessera_reduce_op op = TESSERA_SUM) {
    run(args(TESSERA_COLL_REDUCE_SCATTER, buffer(send), buffer(recv), op));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_reduce_scatter(std::span<const T> send, std::span<T> recv,
                                               tessera_reduce_op op = TESSERA_SUM) {
    return start(args(TESSERA_COLL_REDUCE_SCATTER, buffer(send), buffer(recv), op));
  }
  void barrier() { run(args(TESSERA_COLL_BARRIER, {}, {})); }

  // Point-to-point: `data` to / from rank `peer` of this communicator,
  // matched by `tag` (>= 0) in posting order; the receiver's count must be
  // the sender's. Blocking forms return once `data` may be reused (a send
  // may complete before the peer receives: the backends buffer it);
  // start_* forms leave `data` untouched until waited on, so a receive can
  // be posted ahead of the compute that needs it.
  template <typename T>
  void send(std::span<const T> data, int32_t peer, int32_t tag) {
    run(p2p_args(TESSERA_COLL_SEND, buffer(data), peer, tag));
  }
  template <typename T>
  void recv(std::span<T> data, int32_t peer, int32_t tag) {
    run(p2p_args(TESSERA_COLL_RECV, buffer(data), peer, tag));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_send(std::span<const T> data, int32_t peer, int32_t tag) {
    return start(p2p_args(TESSERA_COLL_SEND, buffer(data), peer, tag));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_recv(std::span<T> data, int32_t peer, int32_t tag) {
    return start(p2p_args(TESSERA_COLL_RECV, buffer(data), peer, tag));
  }
  // The arguments of a send or receive of `data` with `peer` and `tag`.
  static tessera_coll_args p2p_args(tessera_coll_type coll, tessera_buffer data, int32_t peer,
                                    int32_t tag) noexcept {
    tessera_coll_args a = coll == TESSERA_COLL_SEND ? args(coll, data, {}) : args(coll, {}, data);
    a.peer = peer;
    a.tag = tag;
    return a;
  }

  // Bytes one rank sends for `a` with the usual bandwidth-optimal algorithms
  // (ring allreduce 2(P-1)/P·n, allgather and reduce-scatter (P-1)/P of the
  // full buffer, broadcast/reduce (P-1)/P·n, send n, recv 0). This is the volume
  // the ZeRO paper counts, independent of the backend's actual algorithm.
  [[nodiscard]] int64_t bytes_sent(const tessera_coll_args& a) const noexcept {
    const auto p = static_cast<int64_t>(size_);
    if (p <= 1 && a.coll != TESSERA_COLL_SEND) return 0;
    const auto el = static_cast<int64_t>(tessera_dtype_size(a.send.dtype));
    const auto n = static_cast<int64_t>(a.send.count) * el;
    const auto r = static_cast<int64_t>(a.recv.count) * el;
    switch (a.coll) {
      case TESSERA_COLL_ALLREDUCE:
        return 2 * (p - 1) * n / p;
      case TESSERA_COLL_ALLGATHER:
        return (p - 1) * r / p;
      case TESSERA_COLL_SEND:
        return n;
      case TESSERA_COLL_RECV:
        return 0;
      default:  // reduce_scatter (n: the full buffer), broadcast, reduce, ...
        return (p - 1) * n / p;
    }
  }

 private:
  // Buffers built as CPU ones (buffer()) that the device reads in place go
  // as CUDA buffers where the backend takes them (place_on_device).
  void place(tessera_coll_args& a) const noexcept {
    if (on_device_) place_on_device(host_, a);
  }

  template <typename Fn>
  void wait_timed(Fn&& fn, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    const tessera_status s = fn();
    stats_.wait_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    detail::check_host_call(host_, s, what);
  }
  static const char* coll_name(tessera_coll_type c) noexcept {
    static const char* const kNames[] = {"allreduce",      "broadcast", "reduce",  "allgather",
                                         "reduce_scatter", "gather",    "scatter", "alltoall",
                                         "barrier",        "send",      "recv"};
    return c >= 0 && c < TESSERA_COLL_TYPE_COUNT ? kNames[c] : "collective";
  }

  Host host_;
  const tessera_backend_api* api_;
  tessera_comm* comm_;
  bool owned_;
  bool on_device_ = false;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  CommStats stats_;
};

}  // namespace tessera::sdk
