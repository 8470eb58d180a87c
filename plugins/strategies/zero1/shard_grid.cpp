// The shard-grid communication of `zero1` (see shard_grid.hpp).
#include "shard_grid.hpp"

#include <algorithm>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

namespace {
// A CPU buffer of `count` f32 elements at `data`.
tessera_buffer cpu_f32(float* data, uint64_t count) {
  return tessera_buffer{data, count, TESSERA_F32, tessera_device{TESSERA_DEVICE_CPU, 0}};
}
}  // namespace

ShardGrid::ShardGrid(const sdk::Host& host, sdk::CommView& comm, const sdk::FlatLayout& layout,
                     uint64_t first_capacity, uint64_t capacity, int32_t memory_rank)
    : host_(host),
      comm_(comm),
      total_(layout.total()),
      world_(comm.size()),
      rank_(comm.rank()),
      shard_(sdk::even_shard(layout.total(), comm.size(), comm.rank())),
      buckets_(sdk::plan_shard_buckets(layout, comm.size(), first_capacity, capacity)),
      schedule_(buckets_) {
  pending_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Slot& s = slots_[b % kSlots];
    s.len = std::max(s.len, buckets_[b].range.size());
  }
  const auto w = static_cast<size_t>(world_);
  for (Slot& s : slots_) {
    // One rank communicates nothing, so it stages nothing.
    const size_t len = world_ > 1 ? static_cast<size_t>(s.len) : 0;
    s.send = sdk::TrackedBuffer<float>(host, memory_rank, TESSERA_MEM_COMM, len * w);
    s.recv = sdk::TrackedBuffer<float>(host, memory_rank, TESSERA_MEM_COMM, len);
  }
}

uint64_t ShardGrid::staging_elements() const noexcept {
  uint64_t n = 0;
  for (const Slot& s : slots_) n += s.send.size() + s.recv.size();
  return n;
}

uint64_t ShardGrid::real_count(uint64_t begin, uint64_t len) const noexcept {
  return begin < total_ ? std::min(len, total_ - begin) : 0;
}

void ShardGrid::begin_step(std::span<float> grads) {
  TESSERA_CHECK(grads.size() == total_, TESSERA_ERR_INTERNAL, "zero1: gradient buffer of ",
                grads.size(), " elements for a model of ", total_);
  grads_ = grads;
  schedule_.reset();
  completed_ = 0;
}

void ShardGrid::unit_done(int32_t unit) {
  schedule_.after_unit(unit, [this](size_t b) { start(b); });
}

void ShardGrid::start(size_t b) {
  // The slot is free once every bucket before the one that used it last
  // has been written back (buckets complete in plan order).
  while (completed_ + kSlots <= b) complete(completed_++);
  if (world_ <= 1) return;  // the local gradients are the sums
  Slot& s = slots_[b % kSlots];
  const sdk::FlatRange slice = buckets_[b].range;
  const uint64_t len = slice.size();
  const auto w = static_cast<uint64_t>(world_);
  for (uint64_t r = 0; r < w; ++r) {
    const uint64_t begin = r * shard_.shard_size + slice.begin;
    const uint64_t real = real_count(begin, len);
    float* at = s.send.data() + r * len;
    std::copy_n(grads_.begin() + static_cast<std::ptrdiff_t>(begin), real, at);
    std::fill(at + real, at + len, 0.0F);
  }
  pending_[b] =
      comm_.start(sdk::CommView::args(TESSERA_COLL_REDUCE_SCATTER, cpu_f32(s.send.data(), len * w),
                                      cpu_f32(s.recv.data(), len), TESSERA_SUM));
}

void ShardGrid::complete(size_t b) {
  if (world_ <= 1) return;
  pending_[b].wait(host_);
  const sdk::FlatRange slice = buckets_[b].range;
  const uint64_t begin = shard_.padded.begin + slice.begin;
  const uint64_t real = real_count(begin, slice.size());
  std::copy_n(slots_[b % kSlots].recv.data(), real,
              grads_.begin() + static_cast<std::ptrdiff_t>(begin));
}

void ShardGrid::finish() {
  try {
    schedule_.start_rest([this](size_t b) { start(b); });
    while (completed_ < buckets_.size()) complete(completed_++);
  } catch (...) {
    abandon();
    throw;
  }
  grads_ = {};
}

void ShardGrid::abandon() noexcept {
  // Replacing a pending operation waits for it and drops its error.
  for (sdk::PendingOp& op : pending_) op = sdk::PendingOp{};
  completed_ = buckets_.size();
  grads_ = {};
}

void ShardGrid::allgather(std::span<float> params) {
  TESSERA_CHECK(params.size() == total_, TESSERA_ERR_INTERNAL, "zero1: parameter buffer of ",
                params.size(), " elements for a model of ", total_);
  if (world_ <= 1) return;
  // The larger slot: its send area receives N chunks, its receive area
  // sends this rank's chunk.
  Slot& s = slots_[0].len >= slots_[1].len ? slots_[0] : slots_[1];
  const uint64_t chunk = s.len;
  const uint64_t size = shard_.shard_size;
  const auto w = static_cast<uint64_t>(world_);
  for (uint64_t c = 0; c < size; c += chunk) {
    const uint64_t n = std::min(chunk, size - c);
    // This rank's elements [begin, begin + n) of the padded range; the part
    // past the model's end is padding and sent as zeros.
    const uint64_t begin = shard_.padded.begin + c;
    const uint64_t real = real_count(begin, n);
    std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(begin), real, s.recv.data());
    std::fill(s.recv.data() + real, s.recv.data() + n, 0.0F);
    comm_.allgather(std::span<const float>(s.recv.data(), n),
                    std::span<float>(s.send.data(), n * w));
    for (uint64_t r = 0; r < w; ++r) {
      if (r == static_cast<uint64_t>(rank_)) continue;
      const uint64_t dst = r * size + c;
      std::copy_n(s.send.data() + r * n, real_count(dst, n),
                  params.begin() + static_cast<std::ptrdiff_t>(dst));
    }
  }
}

}  // namespace tessera::strategies
