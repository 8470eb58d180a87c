#include "comm.hpp"

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {
namespace {

constexpr uint32_t kAccepted = TESSERA_BACKEND_CAP_CPU_BUFFERS | TESSERA_BACKEND_CAP_CUDA_BUFFERS;

Clock::time_point deadline_after(int64_t timeout_ms) {
  return timeout_ms < 0 ? Clock::time_point::max()
                        : Clock::now() + std::chrono::milliseconds(timeout_ms);
}

// Block `i` of `n` elements of `esz` bytes in `base`.
void* block(void* base, uint64_t i, uint64_t n, size_t esz) {
  return static_cast<char*>(base) + i * n * esz;
}

// Copies block `rank` of a gather/scatter/alltoall that stays on this rank.
ncclResult_t copy_own(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return ncclSuccess;
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess
             ? ncclSuccess
             : ncclUnhandledCudaError;
}

// Ends an NCCL group started by the caller, keeping the first error.
ncclResult_t end_group(ncclResult_t first) {
  const ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

// The NCCL calls of `a` on `comm` and `stream` (device pointers).
ncclResult_t nccl_calls(const tessera_coll_args& a, int32_t rank, int32_t size, ncclComm_t comm,
                        cudaStream_t stream, void* scratch) {
  const tessera_dtype dt = sdk::coll_uses_send(a.coll, rank, a.root) ? a.send.dtype : a.recv.dtype;
  const ncclDataType_t type = nccl_dtype(dt);
  const size_t esz = dtype_bytes(dt);
  const uint64_t n = sdk::coll_block_count(a, size);
  const auto p = static_cast<uint64_t>(size);
  // Averaging over one rank is the identity; NCCL's own one-rank path for
  // ncclAvg left the last element of an f64 buffer of 3001 unwritten on an
  // H100 (NCCL 2.28.9, non-blocking communicator), while ncclSum is a copy.
  const ncclRedOp_t op = size == 1 && a.op == TESSERA_AVG ? ncclSum : nccl_op(a.op);
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
      return ncclAllReduce(a.send.data, a.recv.data, n, type, op, comm, stream);
    case TESSERA_COLL_BROADCAST:
      return ncclBroadcast(rank == a.root ? a.send.data : a.recv.data, a.recv.data, n, type, a.root,
                           comm, stream);
    case TESSERA_COLL_REDUCE:
      return ncclReduce(a.send.data, a.recv.data, n, type, op, a.root, comm, stream);
    case TESSERA_COLL_ALLGATHER:
      return ncclAllGather(a.send.data, a.recv.data, n, type, comm, stream);
    case TESSERA_COLL_REDUCE_SCATTER:
      return ncclReduceScatter(a.send.data, a.recv.data, n, type, op, comm, stream);
    case TESSERA_COLL_BARRIER:
      return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream);
    case TESSERA_COLL_SEND:
      return ncclSend(a.send.data, n, type, a.peer, comm, stream);
    case TESSERA_COLL_RECV:
      return ncclRecv(a.recv.data, n, type, a.peer, comm, stream);
    case TESSERA_COLL_GATHER: {
      ncclResult_t r = ncclGroupStart();
      if (rank == a.root) {
        for (uint64_t i = 0; i < p && r == ncclSuccess; ++i) {
          void* dst = block(a.recv.data, i, n, esz);
          r = static_cast<int32_t>(i) == rank
                  ? copy_own(dst, a.send.data, n * esz, stream)
                  : ncclRecv(dst, n, type, static_cast<int>(i), comm, stream);
        }
      } else if (r == ncclSuccess) {
        r = ncclSend(a.send.data, n, type, a.root, comm, stream);
      }
      return end_group(r);
    }
    case TESSERA_COLL_SCATTER: {
      ncclResult_t r = ncclGroupStart();
      if (rank == a.root) {
        for (uint64_t i = 0; i < p && r == ncclSuccess; ++i) {
          const void* src = block(a.send.data, i, n, esz);
          r = static_cast<int32_t>(i) == rank
                  ? copy_own(a.recv.data, src, n * esz, stream)
                  : ncclSend(src, n, type, static_cast<int>(i), comm, stream);
        }
      } else if (r == ncclSuccess) {
        r = ncclRecv(a.recv.data, n, type, a.root, comm, stream);
      }
      return end_group(r);
    }
    case TESSERA_COLL_ALLTOALL: {
      ncclResult_t r = ncclGroupStart();
      for (uint64_t i = 0; i < p && r == ncclSuccess; ++i) {
        const void* src = block(a.send.data, i, n, esz);
        void* dst = block(a.recv.data, i, n, esz);
        if (static_cast<int32_t>(i) == rank) {
          r = copy_own(dst, src, n * esz, stream);
        } else {
          r = ncclSend(src, n, type, static_cast<int>(i), comm, stream);
          if (r == ncclSuccess) r = ncclRecv(dst, n, type, static_cast<int>(i), comm, stream);
        }
      }
      return end_group(r);
    }
    default:
      return ncclInvalidArgument;
  }
}

}  // namespace

NcclComm::NcclComm(std::shared_ptr<Engine> engine, std::shared_ptr<Group> group)
    : engine_(std::move(engine)), group_(std::move(group)) {
  engine_->watchdog.add(group_);
}

std::string NcclComm::label_of(const tessera_coll_args& a) {
  const std::string_view name = coll_name(a.coll);
  if (a.coll == TESSERA_COLL_SEND) {
    return detail::concat(name, " #", group_->next_send(a.peer), " to rank ", a.peer, " (tag ",
                          a.tag, ")");
  }
  if (a.coll == TESSERA_COLL_RECV) {
    return detail::concat(name, " #", group_->next_recv(a.peer), " from rank ", a.peer, " (tag ",
                          a.tag, ")");
  }
  return detail::concat(name, " #", group_->next_seq());
}

std::shared_ptr<Event> NcclComm::start(const tessera_coll_args& a, const std::string& label,
                                       Clock::time_point deadline) {
  void* scratch = nullptr;
  if (a.coll == TESSERA_COLL_BARRIER) {
    scratch = group_->scratch().reserve(sizeof(float), "barrier scratch on " + group_->where());
  }
  const int32_t rank = group_->rank();
  const int32_t size = group_->size();
  cudaStream_t stream = group_->stream();
  auto event = std::make_shared<Event>();
  const bool p2p = a.coll == TESSERA_COLL_SEND || a.coll == TESSERA_COLL_RECV;
  group_->start(
      label, deadline,
      [&](ncclComm_t comm) { return nccl_calls(a, rank, size, comm, stream, scratch); }, event,
      p2p ? 0 : group_->current_seq());
  return event;
}

std::unique_ptr<sdk::Work> NcclComm::post(const tessera_coll_args& args, bool nonblocking) {
  const int32_t rank = group_->rank();
  const int32_t size = group_->size();
  sdk::validate_coll_args(args, rank, size, kAccepted);
  check_buffer_devices(args, rank, size, engine_->settings.stage_host, group_->device());
  group_->throw_if_failed();
  const int64_t timeout_ms = engine_->settings.resolve_timeout(args.timeout_ms);
  const std::string label = label_of(args);
  const bool on_host = (sdk::coll_uses_send(args.coll, rank, args.root) &&
                        args.send.device.type == TESSERA_DEVICE_CPU) ||
                       (sdk::coll_uses_recv(args.coll, rank, args.root) &&
                        args.recv.device.type == TESSERA_DEVICE_CPU);
  if (on_host) {
    post_staged(args, label, timeout_ms);
    return nullptr;
  }
  auto work =
      std::make_unique<NcclWork>(group_, start(args, label, deadline_after(timeout_ms)), label);
  if (!nonblocking) {
    work->wait(-1);
    return nullptr;
  }
  return work;
}

void NcclComm::post_staged(const tessera_coll_args& args, const std::string& label,
                           int64_t timeout_ms) {
  const int32_t rank = group_->rank();
  const bool use_send = sdk::coll_uses_send(args.coll, rank, args.root);
  const bool use_recv = sdk::coll_uses_recv(args.coll, rank, args.root);
  tessera_coll_args a = args;
  cudaStream_t stream = group_->stream();
  const std::string where = label + " on " + group_->where();
  if (use_send) {
    const size_t bytes = a.send.count * dtype_bytes(a.send.dtype);
    a.send.data = group_->staged_send().reserve(bytes, "staging for " + where);
    cuda_check(cudaMemcpyAsync(a.send.data, args.send.data, bytes, cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync (host to device staging)", where);
    a.send.device = tessera_device{TESSERA_DEVICE_CUDA, group_->device()};
  }
  const size_t recv_bytes = use_recv ? a.recv.count * dtype_bytes(a.recv.dtype) : 0;
  if (use_recv) {
    a.recv.data = group_->staged_recv().reserve(recv_bytes, "staging for " + where);
    a.recv.device = tessera_device{TESSERA_DEVICE_CUDA, group_->device()};
  }
  NcclWork work(group_, start(a, label, deadline_after(timeout_ms)), label);
  work.wait(-1);
  if (use_recv) {
    // On the group's stream, then waited for: ordered after the operation
    // whatever stream the copy engine would otherwise pick.
    cuda_check(
        cudaMemcpyAsync(args.recv.data, a.recv.data, recv_bytes, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (device staging to host)", where);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (device staging to host)",
               where);
  }
}

std::unique_ptr<sdk::Comm> NcclComm::split(int32_t color, int32_t key) {
  group_->throw_if_failed();
  const uint64_t number = group_->next_split();
  const std::string label = detail::concat("split ", number);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // NCCL writes the new communicator into the slot from its own thread once
  // the split is done, which may be after ncclCommSplit returned: the slot
  // lives on the heap and is left to NCCL if that never happens in time.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  const auto deadline = deadline_after(engine_->settings.timeout_ms);
  group_->enqueue(label, deadline, [&](ncclComm_t comm) {
    return ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot.get(), &config);
  });
  if (color < 0) return nullptr;
  ncclComm_t child = nullptr;
  while ((child = std::atomic_ref<ncclComm_t>(*slot).load(std::memory_order_acquire)) == nullptr) {
    if (Clock::now() >= deadline) {
      (void)slot.release();  // NOLINT(bugprone-unused-return-value): NCCL may still write it
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("nccl: ", label, " (colour ", color, ") of ", group_->where(),
                                 " timed out after ", engine_->settings.timeout_ms,
                                 " ms before NCCL handed out the new communicator"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // The child is non-blocking too: wait until it is ready.
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    (void)ncclCommGetAsyncError(child, &state);
    if (state != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      (void)ncclCommAbort(child);
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("nccl: ", label, " (colour ", color, ") of ", group_->where(),
                                 " timed out after ", engine_->settings.timeout_ms,
                                 " ms while the new communicator was forming"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (state != ncclSuccess) {
    const std::string text = nccl_error_text(state, child);
    (void)ncclCommAbort(child);
    throw Error(TESSERA_ERR_PEER_LOST, detail::concat("nccl: ", label, " (colour ", color, ") of ",
                                                      group_->where(), " failed: ", text));
  }
  auto group = std::make_shared<Group>(
      detail::concat(label, " colour ", color, " of ", group_->name()), group_->device(), child,
      detail::concat(group_->key(), "/s", number, "/c", color), group_->board());
  return std::make_unique<NcclComm>(engine_, std::move(group));
}

void NcclComm::abort(const char* reason) noexcept {
  group_->fail(TESSERA_ERR_PEER_LOST,
               detail::concat("nccl: ", group_->where(), " was aborted: ", reason));
  // ncclCommAbort ends this rank's communicator only: the others learn of
  // it from the progress board once their operation on the group waits.
  try {
    if (group_->board()) group_->board()->abort(group_->key(), group_->rank(), reason);
  } catch (...) {
    // The store is gone too: the others' timeouts still apply.
  }
}

void NcclComm::raw(const tessera_coll_args& args) {
  switch (args.coll) {
    case TESSERA_COLL_GATHER:
    case TESSERA_COLL_SCATTER:
    case TESSERA_COLL_ALLTOALL:
    case TESSERA_COLL_BARRIER:
      throw Error(TESSERA_ERR_UNSUPPORTED,
                  detail::concat("nccl: ", coll_name(args.coll),
                                 " has no single NCCL call to compare with"));
    default:
      break;
  }
  group_->throw_if_failed();
  group_->enqueue(
      "raw " + std::string(coll_name(args.coll)), Clock::time_point::max(), [&](ncclComm_t comm) {
        return nccl_calls(args, group_->rank(), group_->size(), comm, group_->stream(), nullptr);
      });
  cuda_check(cudaStreamSynchronize(group_->stream()), "cudaStreamSynchronize", "raw call");
}

}  // namespace tessera::nccl_backend
