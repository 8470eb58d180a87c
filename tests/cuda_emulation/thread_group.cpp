// The emulation's tensor-parallel group of threads (see thread_group.hpp).
#include "thread_group.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

namespace tessera::emu {

struct ThreadGroup::Rank {
  ThreadGroup* group;
  int32_t rank;
};

namespace {

ThreadGroup::Rank* group_rank_of(tessera_comm* comm) {
  return reinterpret_cast<ThreadGroup::Rank*>(comm);  // NOLINT: the table's opaque handle
}

// Whether the host may read `data`: not device-only memory.
bool host_reads(const void* data) {
  cudaPointerAttributes a{};
  (void)cudaPointerGetAttributes(&a, data);
  return a.type != cudaMemoryTypeDevice;
}

}  // namespace

ThreadGroup::ThreadGroup(int32_t size, bool cuda_buffers)
    : size_(size), posted_(static_cast<size_t>(size), nullptr) {
  api_.struct_size = sizeof(api_);
  api_.capabilities = cuda_buffers ? static_cast<uint32_t>(TESSERA_BACKEND_CAP_CUDA_BUFFERS) : 0U;
  api_.post = &ThreadGroup::post;
  for (int32_t r = 0; r < size; ++r) ranks_.push_back(new Rank{this, r});  // NOLINT: owned below
}

ThreadGroup::~ThreadGroup() {
  for (Rank* r : ranks_) delete r;  // NOLINT: made in the constructor
}

void ThreadGroup::run(const std::function<void(int32_t, const tessera_tp_group&)>& body,
                      uint32_t flags) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size_));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < size_; ++r) {
    threads.emplace_back([&, r] {
      tessera_tp_group group{};
      group.struct_size = sizeof(group);
      group.rank = r;
      group.size = size_;
      group.flags = flags;
      group.backend = &api_;
      group.comm = reinterpret_cast<tessera_comm*>(ranks_[static_cast<size_t>(r)]);  // NOLINT
      try {
        body(r, group);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

tessera_status ThreadGroup::post(tessera_comm* comm, const tessera_coll_args* args,
                                 tessera_work** work) {
  if (work != nullptr) *work = nullptr;
  Rank* r = group_rank_of(comm);
  return r->group->collective(r->rank, *args);
}

bool ThreadGroup::meet() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t generation = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return true;
  }
  return arrived_.wait_for(lock, std::chrono::seconds(20),
                           [&] { return generation_ != generation; });
}

tessera_status ThreadGroup::collective(int32_t rank, const tessera_coll_args& args) {
  const bool cuda_buffers = (api_.capabilities & TESSERA_BACKEND_CAP_CUDA_BUFFERS) != 0;
  const tessera_buffer* sides[] = {&args.send, &args.recv};
  for (const tessera_buffer* b : sides) {
    const char* wrong = b->dtype != TESSERA_F32 ? "not f32"
                        : !cuda_buffers && !host_reads(b->data)
                            ? "device memory, which a CPU backend cannot read"
                        : (b->device.type == TESSERA_DEVICE_CUDA) != cuda_buffers
                            ? (cuda_buffers ? "a CPU buffer, which nccl refuses"
                                            : "a CUDA buffer, which a CPU backend refuses")
                            : nullptr;
    if (wrong != nullptr) {
      std::fprintf(stderr, "thread group: rank %d: collective %d of %llu floats: %s\n", rank,
                   static_cast<int>(args.coll), static_cast<unsigned long long>(b->count), wrong);
      return TESSERA_ERR_INVALID_ARGUMENT;
    }
  }
  if (rank == 0) {
    ++collectives_;
    const bool on_device = !host_reads(args.send.data) || !host_reads(args.recv.data);
    if (on_device) ++device_collectives_;
    if (args.coll == TESSERA_COLL_ALLGATHER || args.coll == TESSERA_COLL_REDUCE_SCATTER) {
      ++exchanges_;
      if (on_device) ++device_exchanges_;
    }
  }
  posted_[static_cast<size_t>(rank)] = &args;
  if (!meet()) return TESSERA_ERR_TIMEOUT;
  // Every rank's result first, into its own buffer: an in-place allreduce
  // must not overwrite what the others still read.
  const tessera_coll_args& mine = args;
  const auto count = static_cast<size_t>(mine.recv.count);
  std::vector<float> result(count);
  const auto send_of = [&](int32_t k) {
    return static_cast<const float*>(posted_[static_cast<size_t>(k)]->send.data);
  };
  tessera_status status = TESSERA_OK;
  switch (mine.coll) {
    case TESSERA_COLL_ALLREDUCE:
      for (size_t i = 0; i < count; ++i) {
        float v = send_of(0)[i];
        for (int32_t k = 1; k < size_; ++k) {
          v = mine.op == TESSERA_MAX ? std::max(v, send_of(k)[i]) : v + send_of(k)[i];
        }
        result[i] = v;
      }
      break;
    case TESSERA_COLL_ALLGATHER: {
      const size_t block = count / static_cast<size_t>(size_);
      for (int32_t k = 0; k < size_; ++k) {
        std::memcpy(result.data() + static_cast<size_t>(k) * block, send_of(k),
                    block * sizeof(float));
      }
      break;
    }
    case TESSERA_COLL_REDUCE_SCATTER:
      for (size_t i = 0; i < count; ++i) {
        float v = 0.0f;
        for (int32_t k = 0; k < size_; ++k) v += send_of(k)[static_cast<size_t>(rank) * count + i];
        result[i] = v;
      }
      break;
    default:
      status = TESSERA_ERR_UNSUPPORTED;
  }
  if (!meet()) return TESSERA_ERR_TIMEOUT;
  if (status == TESSERA_OK && count > 0) {
    std::memcpy(mine.recv.data, result.data(), count * sizeof(float));
  }
  return status;
}

}  // namespace tessera::emu
