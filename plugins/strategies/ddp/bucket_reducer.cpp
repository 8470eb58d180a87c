// Bucketed gradient allreduce of `ddp` (see bucket_reducer.hpp).
#include "bucket_reducer.hpp"

#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

BucketReducer::BucketReducer(const sdk::Host& host, sdk::CommView& comm,
                             const sdk::FlatLayout& layout, const DdpOptions& options, int32_t rank)
    : host_(host),
      comm_(comm),
      total_(layout.total()),
      dtype_(options.reduce_dtype),
      buckets_(sdk::plan_grad_buckets(
          layout, sdk::bucket_elements(options.first_bucket_mb, "first_bucket_mb"),
          sdk::bucket_elements(options.bucket_mb, "bucket_mb"))),
      schedule_(buckets_),
      staging_(host, rank, TESSERA_MEM_COMM,
               dtype_ == TESSERA_F32 ? 0 : static_cast<size_t>(layout.total())) {
  pending_.resize(buckets_.size());
}

void BucketReducer::begin_step(std::span<float> grads) {
  TESSERA_CHECK(grads.size() == total_, TESSERA_ERR_INTERNAL, "ddp: gradient buffer of ",
                grads.size(), " elements for a model of ", total_);
  grads_ = grads;
  schedule_.reset();
}

void BucketReducer::unit_done(int32_t unit) {
  schedule_.after_unit(unit, [this](size_t b) { start(b); });
}

void BucketReducer::start(size_t bucket) {
  const sdk::FlatRange r = buckets_[bucket].range;
  const std::span<float> values =
      grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
  if (dtype_ == TESSERA_F32) {
    pending_[bucket] = comm_.start_allreduce(values, TESSERA_SUM);
    return;
  }
  uint16_t* staged = staging_.data() + r.begin;
  sdk::pack_16bit(values, dtype_, staged);
  const tessera_buffer buf{staged, r.size(), dtype_, tessera_device{TESSERA_DEVICE_CPU, 0}};
  pending_[bucket] =
      comm_.start(sdk::CommView::args(TESSERA_COLL_ALLREDUCE, buf, buf, TESSERA_SUM));
}

void BucketReducer::finish() {
  try {
    schedule_.start_rest([this](size_t b) { start(b); });
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b].wait(host_);
      if (dtype_ != TESSERA_F32) {
        const sdk::FlatRange r = buckets_[b].range;
        sdk::unpack_16bit(
            staging_.data() + r.begin, dtype_,
            grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
      }
    }
  } catch (...) {
    abandon();
    throw;
  }
  grads_ = {};
}

void BucketReducer::abandon() noexcept {
  // Replacing a pending operation waits for it and drops its error.
  for (sdk::PendingOp& op : pending_) op = sdk::PendingOp{};
  grads_ = {};
}

}  // namespace tessera::strategies
