// Bucketed gradient allreduce of the strategies that keep a full,
// replicated gradient buffer (ddp): the flat gradients are cut into buckets
// of whole parameters (reverse parameter order, plan_grad_buckets), one
// non-blocking SUM allreduce per bucket, each started as soon as its
// gradients are final and all waited for, in order, before the optimizer
// runs: afterwards every rank holds the summed gradients. (zero1's
// reduce-scatter over the shard grid, with bounded staging, lives in the
// zero1 plugin; it plans its buckets with plan_shard_buckets.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/grad_codec.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::sdk {

// How the gradient buckets are cut and sent.
struct BucketConfig {
  double first_bucket_mb = 1.0;              // capacity of the first bucket, MiB
  double bucket_mb = 25.0;                   // capacity of every later bucket, MiB
  tessera_dtype reduce_dtype = TESSERA_F32;  // wire dtype: f32, bf16 or f16
};

// One rank's bucketed reduction. Every rank builds the same plan from the
// same model and config, so all ranks post the same sequence of
// operations. Each bucket is reduced through a BucketCodec
// (grad_codec.hpp): f32, the f16/bf16 cast of reduce_dtype, or the
// compressor `codec` names; an encoding's buffers are tracked as
// TESSERA_MEM_COMM while the bucket is in flight. Not copyable or movable;
// `comm` and `layout` must outlive it.
class BucketReducer {
 public:
  // Plans the buckets. Throws tessera::Error (invalid argument) naming the
  // option when a bucket capacity is not a positive finite number of MiB,
  // and the compressor's error when it refuses a bucket. `codec` replaces
  // config.reduce_dtype when given.
  BucketReducer(const Host& host, CommView& comm, const FlatLayout& layout,
                const BucketConfig& config, int32_t rank,
                const std::optional<GradCodec>& codec = std::nullopt)
      : comm_(comm), total_(layout.total()), buckets_(plan(layout, config)), schedule_(buckets_) {
    const GradCodec c = codec ? *codec : GradCodec::cast(config.reduce_dtype);
    codecs_.reserve(buckets_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) {
      codecs_.emplace_back(host, rank, c,
                           describe_bucket(layout, buckets_[b].range, static_cast<int32_t>(b),
                                           comm.size(), comm.rank()));
    }
  }
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;
  ~BucketReducer() = default;

  // The plan: flat ranges, in the order they are started.
  [[nodiscard]] const std::vector<GradBucket>& buckets() const noexcept { return buckets_; }

  // Starts a step whose gradients are `grads` (layout.total() elements;
  // anything else is an internal error). From the moment a bucket is
  // started until finish() returns, its part of `grads` must not be touched.
  void begin_step(std::span<float> grads) {
    TESSERA_CHECK(grads.size() == total_, TESSERA_ERR_INTERNAL,
                  "bucket reducer: gradient buffer of ", grads.size(), " elements for a model of ",
                  total_);
    grads_ = grads;
    schedule_.reset();
  }
  // The backward of `unit` on the step's last micro-batch has returned:
  // starts every complete bucket not started yet, in plan order.
  void unit_done(int32_t unit) {
    schedule_.after_unit(unit, [this](size_t b) { start(b); });
  }
  // Starts the buckets not started yet, then waits for every bucket in plan
  // order (time counted as communication wait in the communicator's stats)
  // and decodes the results into the gradients. Throws the first failed
  // operation's error after waiting for the operations still pending.
  void finish() {
    try {
      schedule_.start_rest([this](size_t b) { start(b); });
      for (BucketCodec& c : codecs_) c.finish();
    } catch (...) {
      abandon();
      throw;
    }
    grads_ = {};
  }
  // Waits for every started operation, ignoring their errors, and ends the
  // step: the clean-up after a step failed part-way.
  void abandon() noexcept {
    for (BucketCodec& c : codecs_) c.abandon();
    grads_ = {};
  }

 private:
  static std::vector<GradBucket> plan(const FlatLayout& layout, const BucketConfig& config) {
    const uint64_t first = bucket_elements(config.first_bucket_mb, "first_bucket_mb");
    const uint64_t rest = bucket_elements(config.bucket_mb, "bucket_mb");
    return plan_grad_buckets(layout, first, rest);
  }

  void start(size_t bucket) {
    const FlatRange r = buckets_[bucket].range;
    codecs_[bucket].start_allreduce(
        comm_, grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
  }

  CommView& comm_;
  uint64_t total_;  // gradient elements
  std::vector<GradBucket> buckets_;
  BucketSchedule schedule_;
  std::vector<BucketCodec> codecs_;  // per bucket, in plan order
  std::span<float> grads_;
};

// Starts the buckets a unit's backward completed, on the last micro-batch
// only: earlier micro-batches just accumulate into the local gradients.
// `Reducer` is any bucketed reducer with unit_done(int32_t unit)
// (BucketReducer, or zero1's shard-grid reducer).
template <typename Reducer>
class BucketHooks final : public RunnerHooks {
 public:
  explicit BucketHooks(Reducer& reducer) : reducer_(reducer) {}
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    if (last_micro) reducer_.unit_done(unit);
  }

 private:
  Reducer& reducer_;
};

}  // namespace tessera::sdk
