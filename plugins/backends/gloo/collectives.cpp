#include "collectives.hpp"

#include <climits>
#include <cstring>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include "reduce_fn.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

using Ctx = std::shared_ptr<gloo::Context>;

size_t bytes_of(uint64_t count, tessera_dtype dtype) {
  return static_cast<size_t>(count) * tessera_dtype_size(dtype);
}

template <typename T>
T* typed(void* p) {
  return static_cast<T*>(p);
}

// gloo's barrier creates its buffer itself; this exposes it to the waits.
class WatchedBarrierOptions : public gloo::BarrierOptions {
 public:
  using gloo::BarrierOptions::BarrierOptions;
  [[nodiscard]] gloo::transport::UnboundBuffer* own_buffer() const noexcept { return buffer.get(); }
};

// A copy of `send` in scratch memory when it overlaps `recv` in a way gloo
// does not support (gloo's own in-place forms are passed through).
void* stage(void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
            const void* in_place_send, Scratch& scratch) {
  if (send == in_place_send || !sdk::buffers_overlap(send, send_bytes, recv, recv_bytes))
    return send;
  void* copy = scratch.get(send_bytes);
  std::memcpy(copy, send, send_bytes);
  return copy;
}

void broadcast(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.recv.count;
  const bool root = ctx->rank == a.root;
  sdk::visit_dtype(a.recv.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::BroadcastOptions o(ctx);
    std::vector<Waits::Watched> guards;
    if (root && a.send.data != a.recv.data) {
      void* in = stage(a.send.data, bytes_of(n, a.send.dtype), a.recv.data,
                       bytes_of(n, a.recv.dtype), nullptr, *opts.scratch);
      o.setInput<T>(watched<T>(ctx, in, n, opts, guards));
    }
    o.setOutput<T>(watched<T>(ctx, a.recv.data, n, opts, guards));
    o.setRoot(a.root);
    o.setTimeout(opts.timeout);
    gloo::broadcast(o);
  });
}

void reduce(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.send.count;
  const size_t bytes = bytes_of(n, a.send.dtype);
  const bool root = ctx->rank == a.root;
  // gloo reduces into the output buffer on every rank, then gathers the
  // pieces at the root: other ranks need a full-size output too.
  void* out = root ? a.recv.data : opts.scratch->get(bytes);
  void* in = root ? stage(a.send.data, bytes, out, bytes, out, *opts.scratch) : a.send.data;
  sdk::visit_dtype(a.send.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::ReduceOptions o(ctx);
    std::vector<Waits::Watched> guards;
    if (in != out) o.setInput<T>(watched<T>(ctx, in, n, opts, guards));
    o.setOutput<T>(watched<T>(ctx, out, n, opts, guards));
    o.setRoot(a.root);
    o.setReduceFunction(reduce_fn(a.send.dtype, a.op));
    o.setTimeout(opts.timeout);
    gloo::reduce(o);
  });
  if (root && a.op == TESSERA_AVG) finish_avg(out, n, a.recv.dtype, ctx->size);
}

void allgather(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.send.count;
  const size_t block = bytes_of(n, a.send.dtype);
  const size_t total = block * static_cast<size_t>(ctx->size);
  auto* own_block = static_cast<std::byte*>(a.recv.data) + block * static_cast<size_t>(ctx->rank);
  void* in = stage(a.send.data, block, a.recv.data, total, own_block, *opts.scratch);
  sdk::visit_dtype(a.send.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::AllgatherOptions o(ctx);
    std::vector<Waits::Watched> guards;
    if (in != own_block) o.setInput<T>(watched<T>(ctx, in, n, opts, guards));
    o.setOutput<T>(watched<T>(ctx, a.recv.data, n * static_cast<size_t>(ctx->size), opts, guards));
    o.setTimeout(opts.timeout);
    gloo::allgather(o);
  });
}

void gather(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.send.count;
  const size_t block = bytes_of(n, a.send.dtype);
  const bool root = ctx->rank == a.root;
  void* in = a.send.data;
  if (root) {
    auto* own = static_cast<std::byte*>(a.recv.data) + block * static_cast<size_t>(ctx->rank);
    in = stage(in, block, a.recv.data, block * static_cast<size_t>(ctx->size), own, *opts.scratch);
  }
  sdk::visit_dtype(a.send.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::GatherOptions o(ctx);
    std::vector<Waits::Watched> guards;
    o.setInput<T>(watched<T>(ctx, in, n, opts, guards));
    if (root) {
      o.setOutput<T>(
          watched<T>(ctx, a.recv.data, n * static_cast<size_t>(ctx->size), opts, guards));
    }
    o.setRoot(a.root);
    o.setTimeout(opts.timeout);
    gloo::gather(o);
  });
}

void scatter(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.recv.count;
  const size_t block = bytes_of(n, a.recv.dtype);
  const auto size = static_cast<size_t>(ctx->size);
  const bool root = ctx->rank == a.root;
  void* in = a.send.data;
  if (root) {
    const void* own = static_cast<std::byte*>(in) + block * static_cast<size_t>(ctx->rank);
    if (own != a.recv.data)
      in = stage(in, block * size, a.recv.data, block, nullptr, *opts.scratch);
  }
  sdk::visit_dtype(a.recv.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::ScatterOptions o(ctx);
    std::vector<Waits::Watched> guards;
    if (root) {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> blocks;
      blocks.reserve(size);
      for (size_t r = 0; r < size; ++r) {
        blocks.push_back(
            watched<T>(ctx, typed<T>(in) + r * static_cast<size_t>(n), n, opts, guards));
      }
      o.setInputs<T>(std::move(blocks));
    }
    o.setOutput<T>(watched<T>(ctx, a.recv.data, n, opts, guards));
    o.setRoot(a.root);
    o.setTimeout(opts.timeout);
    gloo::scatter(o);
  });
}

void alltoall(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const size_t bytes = bytes_of(a.send.count, a.send.dtype);
  void* in = stage(a.send.data, bytes, a.recv.data, bytes, nullptr, *opts.scratch);
  sdk::visit_dtype(a.send.dtype, [&](auto tag) {
    using T = decltype(tag);
    gloo::AlltoallOptions o(ctx);
    std::vector<Waits::Watched> guards;
    o.setInput<T>(watched<T>(ctx, in, a.send.count, opts, guards));
    o.setOutput<T>(watched<T>(ctx, a.recv.data, a.recv.count, opts, guards));
    o.setTimeout(opts.timeout);
    gloo::alltoall(o);
  });
}

// Reduce-scatter as an in-place allreduce of a scratch copy of send, of
// which this rank keeps its block. gloo's own ReduceScatterHalvingDoubling
// is not used: in its distribution phase it copies received blocks to the
// start of its buffer while its own block may still be in flight to a peer
// from that same buffer, so from a few MiB on the peer can receive data
// that is already overwritten (`tessera bench collectives --op
// reduce_scatter --sizes 16M:64M` with 2 ranks shows wrong elements, in the
// plugin and in a direct call alike). The allreduce moves twice the data of
// an ideal reduce-scatter; it uses bcube when that is the configured
// algorithm, else ring.
void reduce_scatter(const Ctx& ctx, const tessera_coll_args& a, const RunOptions& opts) {
  const uint64_t n = a.recv.count;
  const uint64_t total = a.send.count;
  const size_t bytes = bytes_of(total, a.send.dtype);
  void* work = opts.scratch->get(bytes);
  std::memcpy(work, a.send.data, bytes);
  tessera_coll_args whole = a;
  whole.coll = TESSERA_COLL_ALLREDUCE;
  whole.send.data = work;
  whole.recv = whole.send;
  whole.op = a.op == TESSERA_AVG ? TESSERA_SUM : a.op;
  RunOptions ring = opts;
  ring.allreduce = opts.allreduce == Algorithm::kBcube ? Algorithm::kBcube : Algorithm::kRing;
  run_allreduce(ctx, whole, ring);
  const size_t block = bytes_of(n, a.recv.dtype);
  std::memmove(a.recv.data, static_cast<const char*>(work) + block * static_cast<size_t>(ctx->rank),
               block);
  if (a.op == TESSERA_AVG) finish_avg(a.recv.data, n, a.recv.dtype, ctx->size);
}

void barrier(const Ctx& ctx, const RunOptions& opts) {
  WatchedBarrierOptions o(ctx);
  const Waits::Watched guard(opts.waits, o.own_buffer());  // after `o`, which owns the buffer
  o.setTimeout(opts.timeout);
  gloo::barrier(o);
}

// A group of one: every collective is a copy from send to recv.
void run_alone(const tessera_coll_args& a) {
  if (a.coll == TESSERA_COLL_BARRIER) return;
  const uint64_t count = a.coll == TESSERA_COLL_REDUCE_SCATTER || a.coll == TESSERA_COLL_SCATTER
                             ? a.recv.count
                             : a.send.count;
  if (count == 0 || a.send.data == a.recv.data) return;
  std::memmove(a.recv.data, a.send.data, bytes_of(count, a.send.dtype));
}

}  // namespace

bool gloo_enforces_timeout(tessera_coll_type coll, Algorithm allreduce) noexcept {
  if (coll == TESSERA_COLL_REDUCE_SCATTER) return false;
  if (coll == TESSERA_COLL_ALLREDUCE) {
    return allreduce != Algorithm::kRingChunked && allreduce != Algorithm::kHalvingDoubling;
  }
  return true;
}

void run_collective(const Ctx& context, const tessera_coll_args& a, const RunOptions& opts) {
  if (context->size == 1) {
    run_alone(a);
    return;
  }
  if (a.coll != TESSERA_COLL_BARRIER && a.send.count == 0 && a.recv.count == 0) return;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
      run_allreduce(context, a, opts);
      return;
    case TESSERA_COLL_BROADCAST:
      if (a.recv.count > 0) broadcast(context, a, opts);
      return;
    case TESSERA_COLL_REDUCE:
      if (a.send.count > 0) reduce(context, a, opts);
      return;
    case TESSERA_COLL_ALLGATHER:
      if (a.send.count > 0) allgather(context, a, opts);
      return;
    case TESSERA_COLL_REDUCE_SCATTER:
      if (a.recv.count > 0) reduce_scatter(context, a, opts);
      return;
    case TESSERA_COLL_GATHER:
      if (a.send.count > 0) gather(context, a, opts);
      return;
    case TESSERA_COLL_SCATTER:
      if (a.recv.count > 0) scatter(context, a, opts);
      return;
    case TESSERA_COLL_ALLTOALL:
      if (a.send.count > 0) alltoall(context, a, opts);
      return;
    case TESSERA_COLL_BARRIER:
      barrier(context, opts);
      return;
    default:
      break;
  }
  throw Error(
      TESSERA_ERR_INVALID_ARGUMENT,
      detail::concat("gloo: ", coll_name(a.coll), " is not a collective of run_collective"));
}

}  // namespace tessera::gloo_backend
