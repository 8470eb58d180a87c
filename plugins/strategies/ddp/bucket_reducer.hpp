// The gradient side of `ddp`: the replicated flat gradient buffer cut into
// buckets (reverse parameter order, see tessera/sdk/grad_buckets.hpp), one
// non-blocking SUM allreduce per bucket, started as soon as the bucket's
// gradients are final and waited on, in order, before the optimizer runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ddp_options.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

// One rank's bucketed allreduce. Every rank builds the same plan from the
// same model and options, so all ranks post the same sequence of
// operations. With a 16-bit reduce_dtype each bucket is converted into a
// staging buffer (tracked as TESSERA_MEM_COMM), reduced there and converted
// back. Not copyable or movable; `comm` and `layout` must outlive it.
class BucketReducer {
 public:
  // Plans the buckets. Throws tessera::Error (invalid argument) for bad
  // bucket sizes (see DdpOptions::read).
  BucketReducer(const sdk::Host& host, sdk::CommView& comm, const sdk::FlatLayout& layout,
                const DdpOptions& options, int32_t rank);
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;
  ~BucketReducer() = default;

  [[nodiscard]] const std::vector<sdk::GradBucket>& buckets() const noexcept { return buckets_; }

  // Starts a step whose gradients are `grads` (layout.total() elements).
  // From the moment a bucket is started until finish() returns, its part of
  // `grads` must not be touched.
  void begin_step(std::span<float> grads);
  // The backward of `unit` on the step's last micro-batch has returned:
  // starts every complete bucket not started yet, in plan order.
  void unit_done(int32_t unit);
  // Starts the buckets not started yet, then waits for every bucket in plan
  // order (time counted as communication wait in the communicator's stats)
  // and converts 16-bit results back into `grads`. Throws the first failed
  // operation's error (tessera::Error from the backend) after waiting for
  // the operations still pending.
  void finish();
  // Waits for every started operation, ignoring their errors, and ends the
  // step: the clean-up after a step failed part-way.
  void abandon() noexcept;

 private:
  void start(size_t bucket);

  sdk::Host host_;
  sdk::CommView& comm_;
  uint64_t total_;  // gradient elements
  tessera_dtype dtype_;
  std::vector<sdk::GradBucket> buckets_;
  sdk::BucketSchedule schedule_;
  sdk::TrackedBuffer<uint16_t> staging_;  // 16-bit copy of the gradients, same offsets
  std::vector<sdk::PendingOp> pending_;   // per bucket, in plan order
  std::span<float> grads_;
};

}  // namespace tessera::strategies
