// Bucketed gradient reduction shared by the strategies that keep a full
// gradient buffer (ddp, zero1), in one of two modes:
//
//   allreduce       (ddp) the flat gradients cut into buckets of whole
//                   parameters (reverse parameter order, plan_grad_buckets),
//                   one non-blocking SUM allreduce per bucket: afterwards
//                   every rank holds the summed gradients.
//   reduce_scatter  (zero1) buckets are slices of the shard grid
//                   (plan_shard_buckets): bucket k covers shard offsets
//                   [o_k, o_k + len_k) of every rank's padded even_shard,
//                   i.e. flat elements [r*S + o_k, r*S + o_k + len_k) for
//                   every rank r. Its N pieces are packed, in rank order,
//                   into a staging buffer (padding past the model's end sent
//                   as zeros) that is reduce-scattered in place; rank r's
//                   block, the sum of its own piece, is copied back into the
//                   gradients. Afterwards only this rank's shard of the
//                   gradient buffer holds summed values; the rest holds this
//                   rank's local gradients and must not be used.
//
// In both modes a bucket is started as soon as its gradients are final and
// all are waited on, in order, before the optimizer runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::sdk {

// How the gradient buckets are cut and sent.
struct BucketConfig {
  double first_bucket_mb = 1.0;              // capacity of the first bucket, MiB
  double bucket_mb = 25.0;                   // capacity of every later bucket, MiB
  tessera_dtype reduce_dtype = TESSERA_F32;  // wire dtype: f32, bf16 or f16
  bool reduce_scatter = false;               // false: allreduce mode (see the top)
};

// One rank's bucketed reduction. Every rank builds the same plan from the
// same model and config, so all ranks post the same sequence of
// operations. In allreduce mode with a 16-bit reduce_dtype each bucket is
// converted into a staging buffer, reduced there and converted back; in
// reduce-scatter mode every bucket is packed into a staging buffer (padded
// total elements of the wire dtype, one region per bucket). Staging is
// tracked as TESSERA_MEM_COMM. Not copyable or movable; `comm` and `layout`
// must outlive it.
class BucketReducer {
 public:
  // Plans the buckets. Throws tessera::Error (invalid argument) naming the
  // option when a bucket capacity is not a positive finite number of MiB.
  BucketReducer(const Host& host, CommView& comm, const FlatLayout& layout,
                const BucketConfig& config, int32_t rank)
      : host_(host),
        comm_(comm),
        total_(layout.total()),
        dtype_(config.reduce_dtype),
        scatter_(config.reduce_scatter),
        world_(comm.size()),
        rank_(comm.rank()),
        shard_(even_shard(layout.total(), comm.size(), comm.rank())),
        buckets_(plan(layout, config, comm.size())),
        schedule_(buckets_),
        staging_(host, rank, TESSERA_MEM_COMM,
                 dtype_ == TESSERA_F32 ? 0 : staging_elements(layout.total())),
        staging_f32_(host, rank, TESSERA_MEM_COMM,
                     dtype_ == TESSERA_F32 && scatter_ ? staging_elements(layout.total()) : 0) {
    pending_.resize(buckets_.size());
    uint64_t base = 0;
    for (const GradBucket& b : buckets_) {
      base_.push_back(base);
      base += scatter_ ? b.range.size() * static_cast<uint64_t>(world_) : 0;
    }
  }
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;
  ~BucketReducer() = default;

  // The plan: flat ranges (allreduce mode) or shard-offset slices
  // (reduce-scatter mode), in the order they are started.
  [[nodiscard]] const std::vector<GradBucket>& buckets() const noexcept { return buckets_; }
  // This rank's shard of the flat range (what reduce-scatter mode sums).
  [[nodiscard]] const ShardRange& shard() const noexcept { return shard_; }

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
  // and copies (converting 16-bit) the results back into the gradients:
  // all of them in allreduce mode, this rank's real shard elements in
  // reduce-scatter mode. Throws the first
  // failed operation's error (tessera::Error from the backend) after
  // waiting for the operations still pending.
  void finish() {
    try {
      schedule_.start_rest([this](size_t b) { start(b); });
      for (size_t b = 0; b < buckets_.size(); ++b) {
        pending_[b].wait(host_);
        if (scatter_) {
          copy_back(b);
        } else if (dtype_ != TESSERA_F32) {
          const FlatRange r = buckets_[b].range;
          unpack_16bit(staging_.data() + r.begin, dtype_,
                       grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
        }
      }
    } catch (...) {
      abandon();
      throw;
    }
    grads_ = {};
  }
  // Waits for every started operation, ignoring their errors, and ends the
  // step: the clean-up after a step failed part-way.
  void abandon() noexcept {
    // Replacing a pending operation waits for it and drops its error.
    for (PendingOp& op : pending_) op = PendingOp{};
    grads_ = {};
  }

 private:
  static std::vector<GradBucket> plan(const FlatLayout& layout, const BucketConfig& config,
                                      int32_t world) {
    const uint64_t first = bucket_elements(config.first_bucket_mb, "first_bucket_mb");
    const uint64_t rest = bucket_elements(config.bucket_mb, "bucket_mb");
    if (config.reduce_scatter) return plan_shard_buckets(layout, world, first, rest);
    return plan_grad_buckets(layout, first, rest);
  }
  // Staging elements: the gradients (allreduce) or the padded grid.
  [[nodiscard]] size_t staging_elements(uint64_t total) const noexcept {
    return static_cast<size_t>(scatter_ ? shard_.padded_total : total);
  }

  void start(size_t bucket) {
    if (scatter_) {
      start_scatter(bucket);
      return;
    }
    const FlatRange r = buckets_[bucket].range;
    const std::span<float> values =
        grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
    if (dtype_ == TESSERA_F32) {
      pending_[bucket] = comm_.start_allreduce(values, TESSERA_SUM);
      return;
    }
    uint16_t* staged = staging_.data() + r.begin;
    pack_16bit(values, dtype_, staged);
    const tessera_buffer buf{staged, r.size(), dtype_, tessera_device{TESSERA_DEVICE_CPU, 0}};
    pending_[bucket] = comm_.start(CommView::args(TESSERA_COLL_ALLREDUCE, buf, buf, TESSERA_SUM));
  }

  // Packs the bucket's piece of every rank's shard, in rank order, into its
  // staging region and starts the in-place reduce-scatter (this rank's
  // block is the receive buffer).
  void start_scatter(size_t bucket) {
    const FlatRange slice = buckets_[bucket].range;
    const uint64_t len = slice.size();
    const uint64_t base = base_[bucket];
    const auto w = static_cast<uint64_t>(world_);
    for (uint64_t r = 0; r < w; ++r) {
      const uint64_t begin = r * shard_.shard_size + slice.begin;
      const uint64_t real = begin < total_ ? std::min(len, total_ - begin) : 0;
      const std::span<const float> src =
          grads_.subspan(static_cast<size_t>(begin), static_cast<size_t>(real));
      const uint64_t at = base + r * len;
      if (dtype_ == TESSERA_F32) {
        std::copy(src.begin(), src.end(), staging_f32_.data() + at);
        std::fill(staging_f32_.data() + at + real, staging_f32_.data() + at + len, 0.0F);
      } else {
        pack_16bit(src, dtype_, staging_.data() + at);
        std::fill(staging_.data() + at + real, staging_.data() + at + len, uint16_t{0});
      }
    }
    const auto mine = base + static_cast<uint64_t>(rank_) * len;
    const tessera_device cpu{TESSERA_DEVICE_CPU, 0};
    void* all = dtype_ == TESSERA_F32 ? static_cast<void*>(staging_f32_.data() + base)
                                      : static_cast<void*>(staging_.data() + base);
    void* own = dtype_ == TESSERA_F32 ? static_cast<void*>(staging_f32_.data() + mine)
                                      : static_cast<void*>(staging_.data() + mine);
    const tessera_buffer send{all, len * w, dtype_, cpu};
    const tessera_buffer recv{own, len, dtype_, cpu};
    pending_[bucket] =
        comm_.start(CommView::args(TESSERA_COLL_REDUCE_SCATTER, send, recv, TESSERA_SUM));
  }
  // Copies this rank's reduced block of a finished bucket into the real
  // elements of its shard of the gradients.
  void copy_back(size_t bucket) {
    const FlatRange slice = buckets_[bucket].range;
    const uint64_t len = slice.size();
    const uint64_t begin = shard_.padded.begin + slice.begin;
    const uint64_t real = begin < total_ ? std::min(len, total_ - begin) : 0;
    const uint64_t at = base_[bucket] + static_cast<uint64_t>(rank_) * len;
    const std::span<float> dst =
        grads_.subspan(static_cast<size_t>(begin), static_cast<size_t>(real));
    if (dtype_ == TESSERA_F32) {
      std::copy_n(staging_f32_.data() + at, real, dst.begin());
    } else {
      unpack_16bit(staging_.data() + at, dtype_, dst);
    }
  }

  Host host_;
  CommView& comm_;
  uint64_t total_;  // gradient elements
  tessera_dtype dtype_;
  bool scatter_;  // reduce-scatter mode
  int32_t world_;
  int32_t rank_;
  ShardRange shard_;
  std::vector<GradBucket> buckets_;
  BucketSchedule schedule_;
  // 16-bit staging: in allreduce mode a copy of the gradients at the same
  // offsets; in reduce-scatter mode the packed grid, bucket k at base_[k].
  TrackedBuffer<uint16_t> staging_;
  TrackedBuffer<float> staging_f32_;  // the packed grid, f32 reduce-scatter mode
  std::vector<uint64_t> base_;        // per bucket: first staging element
  std::vector<PendingOp> pending_;    // per bucket, in plan order
  std::span<float> grads_;
};

// Starts the buckets a unit's backward completed, on the last micro-batch
// only: earlier micro-batches just accumulate into the local gradients.
class BucketHooks final : public RunnerHooks {
 public:
  explicit BucketHooks(BucketReducer& reducer) : reducer_(reducer) {}
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    if (last_micro) reducer_.unit_done(unit);
  }

 private:
  BucketReducer& reducer_;
};

}  // namespace tessera::sdk
