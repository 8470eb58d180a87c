// Allreduce with gloo's algorithms. ring and bcube go through
// gloo::allreduce (unbound buffers, out of place, per-call timeout);
// ring_chunked and halving_doubling construct gloo's algorithm objects, which
// work in place, so an out-of-place call first copies send into recv.
//
// The algorithm objects are built for every call, in the plugin and in raw
// alike. They cannot be cached by buffer address: each construction takes
// the next slot numbers of the context, and a rank that reused a cached
// object while another rank built a new one (its buffer moved) would leave
// their slot numbers out of step and hang the group.
#include <climits>
#include <cstring>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>

#include "collectives.hpp"
#include "reduce_fn.hpp"
#include "tessera/sdk/coll.hpp"

namespace tessera::gloo_backend {
namespace {

template <typename T>
void run_unbound(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& a,
                 const RunOptions& opts) {
  const auto n = static_cast<size_t>(a.send.count);
  gloo::AllreduceOptions o(context);
  std::vector<Waits::Watched> guards;  // after `o`, which owns the buffers
  o.setAlgorithm(opts.allreduce == Algorithm::kBcube ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                     : gloo::AllreduceOptions::Algorithm::RING);
  if (a.send.data != a.recv.data) o.setInput<T>(watched<T>(context, a.send.data, n, opts, guards));
  o.setOutput<T>(watched<T>(context, a.recv.data, n, opts, guards));
  o.setReduceFunction(reduce_fn(a.send.dtype, a.op));
  o.setTimeout(opts.timeout);
  gloo::allreduce(o);
}

template <typename T>
void run_object(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& a,
                const RunOptions& opts) {
  const auto n = static_cast<size_t>(a.send.count);
  if (a.send.data != a.recv.data) std::memmove(a.recv.data, a.send.data, n * sizeof(T));
  const std::vector<T*> ptrs{static_cast<T*>(a.recv.data)};
  const auto* fn = class_reduction<T>(a.op);
  if (opts.allreduce == Algorithm::kRingChunked) {
    gloo::AllreduceRingChunked<T> algorithm(context, ptrs, static_cast<int>(n), fn);
    algorithm.run();
  } else {
    gloo::AllreduceHalvingDoubling<T> algorithm(context, ptrs, static_cast<int>(n), fn);
    algorithm.run();
  }
  if (opts.sockets != nullptr) opts.sockets->restore_send_buffers();
}

}  // namespace

Algorithm resolve_allreduce(Algorithm configured, const tessera_coll_args& args, int32_t size,
                            uint64_t threshold_bytes) noexcept {
  const uint64_t count = args.send.count;
  Algorithm a = configured;
  if (a == Algorithm::kAuto) {
    const uint64_t bytes = count * tessera_dtype_size(args.send.dtype);
    a = (size > 1 && bytes < threshold_bytes) ? Algorithm::kBcube : Algorithm::kRing;
  }
  const bool object = a == Algorithm::kRingChunked || a == Algorithm::kHalvingDoubling;
  if (object && count > static_cast<uint64_t>(INT_MAX)) a = Algorithm::kRing;
  return a;
}

void run_allreduce(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& a,
                   const RunOptions& opts) {
  const uint64_t n = a.send.count;
  if (n == 0) return;
  const size_t bytes = static_cast<size_t>(n) * tessera_dtype_size(a.send.dtype);
  if (context->size == 1) {
    if (a.send.data != a.recv.data) std::memmove(a.recv.data, a.send.data, bytes);
    return;
  }
  const bool object =
      opts.allreduce == Algorithm::kRingChunked || opts.allreduce == Algorithm::kHalvingDoubling;
  tessera_coll_args staged = a;
  if (!object && a.send.data != a.recv.data &&
      sdk::buffers_overlap(a.send.data, bytes, a.recv.data, bytes)) {
    // gloo reads the input while it writes the output: give it a copy.
    staged.send.data = opts.scratch->get(bytes);
    std::memcpy(staged.send.data, a.send.data, bytes);
  }
  sdk::visit_dtype(a.send.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (object) {
      run_object<T>(context, staged, opts);
    } else {
      run_unbound<T>(context, staged, opts);
    }
  });
  if (a.op == TESSERA_AVG) finish_avg(a.recv.data, n, a.recv.dtype, context->size);
}

}  // namespace tessera::gloo_backend
