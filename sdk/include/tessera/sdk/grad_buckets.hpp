// Gradient buckets: the owned parameters grouped, in backward order, into
// contiguous flat ranges that are communicated as one operation each
// (allreduce for DDP; zero1 reduce-scatters buckets of N equal blocks in
// place, planned by plan_shard_buckets). Grouping small tensors
// saves per-operation latency; starting each bucket as soon as its
// gradients are complete overlaps communication with the rest of the
// backward pass.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"

namespace tessera::sdk {

// One bucket: a contiguous flat range made of whole parameters.
struct GradBucket {
  FlatRange range;         // flat elements of the bucket
  size_t first_entry = 0;  // lowest entry index it holds
  size_t last_entry = 0;   // highest entry index it holds
  // The bucket's gradients are complete for the step once the backward of
  // this unit has returned (the lowest final_grad_unit of its parameters).
  int32_t ready_after_unit = 0;
};

// Elements of f32 in `mb` mebibytes (2^20 bytes), at least 1. Throws
// tessera::Error (invalid argument) naming `option` unless mb is finite and
// > 0.
inline uint64_t bucket_elements(double mb, const char* option) {
  TESSERA_CHECK(std::isfinite(mb) && mb > 0.0, TESSERA_ERR_INVALID_ARGUMENT, "option '", option,
                "' must be a positive number of MiB, got ", mb);
  const double elements = mb * 1024.0 * 1024.0 / static_cast<double>(sizeof(float));
  if (elements >= 9.0e18) return UINT64_MAX / 2;
  return elements < 1.0 ? 1 : static_cast<uint64_t>(elements);
}

// Groups the owned parameters of `layout` into buckets, walking them in
// reverse flat order (the order their gradients become final in backward).
// The first bucket holds up to `first_capacity` elements, every later one up
// to `capacity`; a parameter is never split, so one larger than the
// capacity gets a bucket of its own. Parameters with no elements join the
// bucket being filled. Bucket i+1 lies just before bucket i in the flat
// layout. Returns no bucket for a layout without elements.
inline std::vector<GradBucket> plan_grad_buckets(const FlatLayout& layout, uint64_t first_capacity,
                                                 uint64_t capacity) {
  std::vector<GradBucket> out;
  const auto& entries = layout.entries();
  bool open = false;
  GradBucket cur;
  for (size_t k = entries.size(); k-- > 0;) {
    const FlatEntry& e = entries[k];
    const uint64_t cap = out.empty() ? first_capacity : capacity;
    if (open && e.numel > 0 && cur.range.size() > 0 && cur.range.size() + e.numel > cap) {
      out.push_back(cur);
      open = false;
    }
    if (!open) {
      cur = GradBucket{};
      cur.range = {e.offset + e.numel, e.offset + e.numel};
      cur.last_entry = k;
      cur.ready_after_unit = e.final_grad_unit();
      open = true;
    }
    cur.range.begin = e.offset;
    cur.first_entry = k;
    cur.ready_after_unit = std::min(cur.ready_after_unit, e.final_grad_unit());
  }
  // A bucket is only opened by a parameter with elements, except the first
  // one, which stays empty when the whole layout is.
  if (open && cur.range.size() > 0) out.push_back(cur);
  return out;
}

// Plans the buckets of zero1's in-place reduce-scatter over `world` ranks.
// The flat range is padded to P = N·S elements (S = ceil(total / N), the
// padding after the model's end, as sdk::even_shard) and cut, from the end
// down, into buckets of N·len elements: bucket i+1 lies just before bucket
// i, the first holds up to `first_capacity` elements, later ones up to
// `capacity` (rounded down to a multiple of N, at least N). A bucket is N
// equal blocks of `len` elements; rank r owns block r of every bucket, so a
// reduce-scatter of the bucket's own elements in place gives each rank the
// sums of its blocks and an in-place allgather of the blocks restores the
// bucket. GradBucket::range is the bucket's flat range (its end may lie in
// the padding); first_entry/last_entry are the lowest and highest entry it
// touches; ready_after_unit is the lowest final_grad_unit of its entries,
// or the last unit when it is all padding. The per-rank lengths add up to
// S, and equal those of sdk::shard_grid_plan. Throws tessera::Error
// (invalid argument) for a world size < 1. Returns no bucket for a layout
// without elements.
inline std::vector<GradBucket> plan_shard_buckets(const FlatLayout& layout, int32_t world,
                                                  uint64_t first_capacity, uint64_t capacity) {
  std::vector<GradBucket> out;
  const ShardRange shard = even_shard(layout.total(), world, 0);
  const auto w = static_cast<uint64_t>(world);
  const int32_t last_unit = std::max(layout.num_units() - 1, 0);
  uint64_t end = shard.shard_size;  // in rows of N elements
  while (end > 0) {
    const uint64_t cap = out.empty() ? first_capacity : capacity;
    const uint64_t len = std::min(end, std::max<uint64_t>(1, cap / w));
    GradBucket b;
    b.range = {(end - len) * w, end * w};
    b.ready_after_unit = last_unit;
    b.first_entry = layout.entries().size();
    b.last_entry = 0;
    const uint64_t real_end = std::min(b.range.end, layout.total());
    if (b.range.begin < real_end) {
      for (const FlatPiece& p : layout.pieces(b.range.begin, real_end)) {
        const FlatEntry& e = layout.entry(p.entry);
        b.ready_after_unit = std::min(b.ready_after_unit, e.final_grad_unit());
        b.first_entry = std::min(b.first_entry, p.entry);
        b.last_entry = std::max(b.last_entry, p.entry);
      }
    }
    if (b.first_entry > b.last_entry) b.first_entry = b.last_entry;
    out.push_back(b);
    end -= len;
  }
  return out;
}

// Tracks which buckets of a step have been started. Buckets are started in
// plan order only (every rank posts the same sequence of operations), so a
// ready bucket waits behind an earlier one that is not ready yet.
class BucketSchedule {
 public:
  explicit BucketSchedule(const std::vector<GradBucket>& buckets) : buckets_(&buckets) {}

  // Starts a new step: no bucket started.
  void reset() noexcept { next_ = 0; }
  // Index of the next bucket to start, or size() when all have started.
  [[nodiscard]] size_t next() const noexcept { return next_; }
  [[nodiscard]] size_t size() const noexcept { return buckets_->size(); }

  // After the backward of `unit` (units run in descending order): calls
  // start(i) for every not yet started bucket, in order, that is complete,
  // stopping at the first that is not.
  template <typename Fn>
  void after_unit(int32_t unit, Fn&& start) {
    while (next_ < buckets_->size() && (*buckets_)[next_].ready_after_unit >= unit) {
      start(next_++);
    }
  }
  // Calls start(i) for every bucket not started yet, in order (the end of
  // the backward pass, or no overlap).
  template <typename Fn>
  void start_rest(Fn&& start) {
    while (next_ < buckets_->size()) start(next_++);
  }

 private:
  const std::vector<GradBucket>* buckets_;
  size_t next_ = 0;
};

}  // namespace tessera::sdk
