// Running one operation of tessera/c/backend.h on a gloo context with gloo's
// own calls. Shared by the plugin's checked path and by raw_post, so both
// time exactly the same library work.
//
// Mapping (see README.md): allreduce -> gloo::allreduce (ring, bcube) or the
// AllreduceRingChunked / AllreduceHalvingDoubling algorithm objects;
// broadcast, reduce, allgather, gather, scatter, alltoall, barrier -> the
// gloo function of the same name; reduce_scatter -> the
// ReduceScatterHalvingDoubling algorithm object; send/recv -> unbound
// buffers (p2p.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <gloo/context.h>

#include "scratch.hpp"
#include "settings.hpp"
#include "sockets.hpp"
#include "tessera/c/backend.h"
#include "waits.hpp"

namespace tessera::gloo_backend {

// How to run one collective.
struct RunOptions {
  std::chrono::milliseconds timeout{60000};  // handed to gloo; > 0
  Algorithm allreduce = Algorithm::kRing;    // resolved: never kAuto
  Scratch* scratch = nullptr;                // staging memory of the communicator
  // The group's sockets: their send buffers are restored after each run of
  // an algorithm object (see PairSockets::restore_send_buffers). May be null.
  const PairSockets* sockets = nullptr;
  // The operation's waits: every unbound buffer handed to gloo is recorded
  // there while gloo uses it (waits.hpp). May be null (nothing recorded).
  Waits* waits = nullptr;
};

// The allreduce algorithm for `args` on a group of `size`: `configured`
// unless it is kAuto, which picks bcube below `threshold_bytes` and ring
// from there on (both gloo::allreduce). The algorithm objects take an int
// count, so larger counts always use ring.
Algorithm resolve_allreduce(Algorithm configured, const tessera_coll_args& args, int32_t size,
                            uint64_t threshold_bytes) noexcept;

// True when gloo enforces `opts.timeout` itself for this operation. The
// algorithm objects (ring_chunked, halving_doubling, reduce_scatter) wait
// with their pairs' timeout, fixed when the group connected; the caller
// enforces shorter deadlines by breaking the group's sockets.
bool gloo_enforces_timeout(tessera_coll_type coll, Algorithm allreduce) noexcept;

// gloo's unbound buffer over `elements` of T at `p`, recorded in the
// operation's waits (if any) while `guards` lives. Declare `guards` after
// the options object that will own the buffer, so that the buffer is
// forgotten before it is freed.
template <typename T>
std::unique_ptr<gloo::transport::UnboundBuffer> watched(const std::shared_ptr<gloo::Context>& ctx,
                                                        void* p, size_t elements,
                                                        const RunOptions& opts,
                                                        std::vector<Waits::Watched>& guards) {
  auto buffer = ctx->createUnboundBuffer(p, elements * sizeof(T));
  if (opts.waits != nullptr) guards.emplace_back(opts.waits, buffer.get());
  return buffer;
}

// Runs collective `args` (not send/recv) to completion on `context`.
// `args` must be valid (sdk::validate_coll_args). Zero counts and groups of
// one rank never call into gloo. Throws what gloo throws (gloo::IoException
// on timeouts and broken connections, gloo::EnforceNotMet on misuse).
void run_collective(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& args,
                    const RunOptions& opts);

// The allreduce part of run_collective (allreduce.cpp).
void run_allreduce(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& args,
                   const RunOptions& opts);

}  // namespace tessera::gloo_backend
