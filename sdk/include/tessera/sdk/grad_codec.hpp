// The one path of the strategies' gradient reductions through a compressor.
//
// GradCodec says what a strategy's gradient buckets travel as: f32 (none),
// the SDK's f16/bf16 cast of a `reduce_dtype`-style option, or the
// compressor of [compression] (strategy 2.4). BucketCodec reduces one
// bucket with it, as an allreduce (ddp) or a reduce-scatter (zero1, and the
// per-unit reducers of zero2/zero3/fsdp):
//   none        the f32 collective itself;
//   summable    encode, the collective on the encoded elements (SUM in the
//               wire dtype), decode (this rank's block after a
//               reduce-scatter);
//   gather      encode, allgather of every rank's encoding, decode of all
//               of them (a reduce-scatter keeps its block of the result);
//   collective  the compressor's own reduce through the communicator, in
//               finish() (no overlap with the backward).
// With one rank nothing is sent and nothing is encoded: the local gradients
// are the sums. Encoding buffers are tracked as TESSERA_MEM_COMM from start
// to finish. Each start counts on the communicator the bytes compression
// kept off the wire (f32's volume minus what was sent; negative when the
// encoding sends more) and the time spent encoding and decoding
// (CommStats, reported by CommMeter as comm_bytes_raw and compress_ns).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/c/host.h"
#include "tessera/sdk/cast_compressor.hpp"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::sdk {

namespace codec_detail {
// Nanoseconds since `t0` on the steady clock: the compressor's time.
inline int64_t elapsed_ns(std::chrono::steady_clock::time_point t0) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}
// Bytes `comm` counts for `coll` over `elements` f32 values: the volume an
// encoding's bytes are compared with.
inline int64_t f32_volume(const CommView& comm, tessera_coll_type coll,
                          uint64_t elements) noexcept {
  const tessera_buffer all = wire_buffer(nullptr, elements, TESSERA_F32);
  return comm.bytes_sent(CommView::args(coll, all, all));
}
}  // namespace codec_detail

class GradCodec {
 public:
  // None: f32 on the wire.
  GradCodec() = default;
  // The SDK's cast to `wire` (F16 or BF16; F32: none), unscaled: what a
  // strategy's reduce_dtype option names.
  static GradCodec cast(tessera_dtype wire) {
    GradCodec c;
    if (wire == TESSERA_F32) return c;
    c.cast_.emplace(wire, 1.0f, false);
    c.name_ = ::tessera::detail::concat(dtype_name(wire), " (reduce_dtype)");
    return c;
  }
  // The compressor of the environment.
  static GradCodec of(const CompressorView& view) {
    GradCodec c;
    c.plugin_ = view;
    c.name_ = view.name();
    return c;
  }
  // The environment's compressor if it has one, else the cast to
  // `reduce_dtype` (strategy option `option` of strategy `who`). Both at
  // once is refused (invalid argument) naming both.
  static GradCodec select(StrategyEnv& env, tessera_dtype reduce_dtype, const char* who,
                          const char* option = "reduce_dtype") {
    const CompressorView& view = env.compressor();
    if (!view) return cast(reduce_dtype);
    TESSERA_CHECK(reduce_dtype == TESSERA_F32, TESSERA_ERR_INVALID_ARGUMENT, "strategy '", who,
                  "': option '", option, "' = '", dtype_name(reduce_dtype),
                  "' and [compression] name = '", view.name(),
                  "' both compress the gradients; keep one (the '", dtype_name(reduce_dtype),
                  "' compressor is the same as the option)");
    return of(view);
  }

  [[nodiscard]] bool active() const noexcept { return cast_.has_value() || bool(plugin_); }
  // "none", "bf16 (reduce_dtype)" or the compressor plugin's name.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] CompressKind kind() const noexcept {
    return bool(plugin_) ? plugin_.kind() : CompressKind::kSummable;
  }
  // SUMMABLE: the encoded dtype (F32 for none).
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept {
    if (cast_) return cast_->wire_dtype();
    return bool(plugin_) ? plugin_.wire_dtype() : TESSERA_F32;
  }
  // Refuses (invalid argument), naming strategy `who` and the compressor,
  // unless the codec can reduce-scatter as it is: none or summable.
  void require_summable(const char* who) const {
    TESSERA_CHECK(!active() || kind() == CompressKind::kSummable, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy '", who,
                  "' reduce-scatters its gradients and takes only summable "
                  "compressors (fp16, bf16); compressor '",
                  name_, "' is of kind '", compress_kind_name(kind()), "'");
  }
  // A state for `bucket`; nullptr without a codec.
  [[nodiscard]] std::unique_ptr<CompressorBucket> bucket(const CompressBucket& b) const {
    if (cast_) return cast_->bucket(b);
    if (plugin_) return plugin_.bucket(b);
    return nullptr;
  }

 private:
  std::optional<CastCompressor> cast_;
  CompressorView plugin_;
  std::string name_ = "none";
};

// Flat range `range` of `layout` (elements past the layout's end are
// padding) as bucket `index` for a compressor: every parameter inside it
// whole as a matrix (rows = all dimensions but the last), a parameter cut
// by the range and the padding as vectors (rows = 1).
inline CompressBucket describe_bucket(const FlatLayout& layout, FlatRange range, int32_t index,
                                      int32_t world_size, int32_t rank) {
  CompressBucket b;
  b.index = index;
  b.elements = range.size();
  b.world_size = world_size;
  b.rank = rank;
  const uint64_t end = std::min(range.end, layout.total());
  if (range.begin < end) {
    for (const FlatPiece& p : layout.pieces(range.begin, end)) {
      const FlatEntry& e = layout.entries()[p.entry];
      CompressTensor t;
      t.offset = p.flat_offset - range.begin;
      if (p.count == e.numel && e.shape.size() >= 2) {
        t.cols = e.shape.back();
        t.rows = static_cast<int64_t>(e.numel) / std::max<int64_t>(t.cols, 1);
      } else {
        t.rows = 1;
        t.cols = static_cast<int64_t>(p.count);
      }
      b.tensors.push_back(t);
    }
  }
  if (range.end > std::max(end, range.begin)) {
    const uint64_t pad_begin = std::max(end, range.begin);
    b.tensors.push_back(
        CompressTensor{pad_begin - range.begin, 1, static_cast<int64_t>(range.end - pad_begin)});
  }
  return b;
}

// One bucket's reduction with a GradCodec; its state (error feedback, warm
// starts) lives as long as the object. Not copyable; not thread-safe; the
// communicator passed to start must outlive finish().
class BucketCodec {
 public:
  BucketCodec(const Host& host, int32_t memory_rank, const GradCodec& codec,
              const CompressBucket& desc)
      : host_(host),
        rank_(memory_rank),
        kind_(codec.kind()),
        wire_(codec.wire_dtype()),
        elements_(desc.elements),
        state_(codec.bucket(desc)) {}
  BucketCodec(BucketCodec&&) noexcept = default;
  BucketCodec& operator=(BucketCodec&&) noexcept = default;
  BucketCodec(const BucketCodec&) = delete;
  BucketCodec& operator=(const BucketCodec&) = delete;
  ~BucketCodec() { abandon(); }

  [[nodiscard]] bool pending() const noexcept { return mode_ != Mode::kIdle; }

  // Starts the SUM of `values` (the bucket's elements) over `comm`; after
  // finish() `values` hold it. Throws the backend's or the compressor's
  // error (nothing is then in flight).
  void start_allreduce(CommView& comm, std::span<float> values) {
    begin(comm, values, {});
    if (comm_->size() <= 1) return;
    if (!state_) {
      op_ = comm.start_allreduce(values);
      return;
    }
    start_encoded(TESSERA_COLL_ALLREDUCE, ring_bytes(TESSERA_COLL_ALLREDUCE));
  }

  // Starts a reduce-scatter: `values` is the bucket (comm.size() equal
  // blocks), `piece` receives block comm.rank() of the sum in finish()
  // (it may be that block of `values`: in place). A gather or collective
  // codec allreduces the bucket and keeps the block.
  void start_reduce_scatter(CommView& comm, std::span<float> values, std::span<float> piece) {
    TESSERA_CHECK(piece.size() * static_cast<size_t>(comm.size()) == values.size(),
                  TESSERA_ERR_INTERNAL, "bucket codec: piece of ", piece.size(),
                  " for a bucket of ", values.size(), " over ", comm.size(), " ranks");
    begin(comm, values, piece);
    if (comm_->size() <= 1) return;
    if (!state_) {
      op_ = comm.start(CommView::args(TESSERA_COLL_REDUCE_SCATTER, f32(values), f32(piece)));
      return;
    }
    start_encoded(
        kind_ == CompressKind::kSummable ? TESSERA_COLL_REDUCE_SCATTER : TESSERA_COLL_ALLREDUCE,
        ring_bytes(TESSERA_COLL_REDUCE_SCATTER));
  }

  // Waits for the bucket's collective and decodes the result (see the
  // start calls). Throws the first error (the bucket is then idle).
  void finish() {
    if (mode_ == Mode::kIdle) return;
    try {
      op_.wait(host_);
      if (comm_->size() > 1 && state_) decode();
      // The block is in values_ with one rank, or after a gather or
      // collective codec's allreduce; a reduce-scatter wrote it to piece_.
      const bool allreduced = state_ != nullptr && kind_ != CompressKind::kSummable;
      if (!piece_.empty() && (comm_->size() <= 1 || allreduced)) copy_block();
    } catch (...) {
      abandon();
      throw;
    }
    end();
  }

  // Waits for an operation in flight, ignoring its error, and frees the
  // encoding buffers (the error path).
  void abandon() noexcept {
    op_ = PendingOp{};
    end();
  }

 private:
  enum class Mode { kIdle, kBusy };
  using Clock = std::chrono::steady_clock;

  static tessera_buffer f32(std::span<float> v) noexcept {
    return wire_buffer(v.data(), v.size(), TESSERA_F32);
  }
  // What f32 would send for `coll` over the bucket.
  [[nodiscard]] int64_t ring_bytes(tessera_coll_type coll) const noexcept {
    return codec_detail::f32_volume(*comm_, coll, elements_);
  }
  void begin(CommView& comm, std::span<float> values, std::span<float> piece) {
    TESSERA_CHECK(mode_ == Mode::kIdle, TESSERA_ERR_INTERNAL,
                  "bucket codec: a reduction is in flight already");
    TESSERA_CHECK(values.size() == elements_, TESSERA_ERR_INTERNAL, "bucket codec: ", values.size(),
                  " values for a bucket of ", elements_);
    comm_ = &comm;
    values_ = values;
    piece_ = piece;
    mode_ = Mode::kBusy;
  }
  void end() noexcept {
    send_.release();
    recv_.release();
    values_ = {};
    piece_ = {};
    mode_ = Mode::kIdle;
  }
  void copy_block() {
    const std::span<float> block =
        values_.subspan(static_cast<size_t>(comm_->rank()) * piece_.size(), piece_.size());
    if (block.data() != piece_.data()) std::copy(block.begin(), block.end(), piece_.begin());
  }
  // Encodes and starts: `coll` is the collective of a summable encoding
  // (allreduce or reduce-scatter); `raw` what f32 would have sent.
  void start_encoded(tessera_coll_type coll, int64_t raw) {
    try {
      const auto t0 = Clock::now();
      if (kind_ == CompressKind::kCollective) {
        // Runs in finish(); what it sends is counted there.
        raw_ = raw;
        return;
      }
      const uint64_t bytes = state_->encoded_bytes();
      send_ = TrackedBuffer<uint8_t>(host_, rank_, TESSERA_MEM_COMM, static_cast<size_t>(bytes));
      state_->encode(values_, send_.data());
      const auto n = static_cast<uint64_t>(comm_->size());
      tessera_coll_args args{};
      if (kind_ == CompressKind::kSummable) {
        const size_t el = tessera_dtype_size(wire_);
        TESSERA_CHECK(el > 0 && bytes == elements_ * el, TESSERA_ERR_INTERNAL,
                      "bucket codec: a summable encoding of ", bytes, " bytes for ", elements_,
                      " elements of ", dtype_name(wire_));
        const tessera_buffer all = wire_buffer(send_.data(), elements_, wire_);
        if (coll == TESSERA_COLL_REDUCE_SCATTER) {
          recv_ = TrackedBuffer<uint8_t>(host_, rank_, TESSERA_MEM_COMM, piece_.size() * el);
          args = CommView::args(coll, all, wire_buffer(recv_.data(), piece_.size(), wire_));
        } else {
          args = CommView::args(coll, all, all);
        }
      } else {
        recv_ =
            TrackedBuffer<uint8_t>(host_, rank_, TESSERA_MEM_COMM, static_cast<size_t>(bytes * n));
        args = CommView::args(TESSERA_COLL_ALLGATHER, wire_buffer(send_.data(), bytes, TESSERA_U8),
                              wire_buffer(recv_.data(), bytes * n, TESSERA_U8));
      }
      const int64_t encode_ns = since(t0);
      comm_->count_compression(raw - comm_->bytes_sent(args), encode_ns);
      op_ = comm_->start(args);
    } catch (...) {
      end();
      throw;
    }
  }
  // After the collective: the decoded sum into values_ (or piece_).
  void decode() {
    const auto t0 = Clock::now();
    if (kind_ == CompressKind::kCollective) {
      reduce_collective();
      return;
    }
    if (kind_ == CompressKind::kSummable) {
      if (piece_.empty()) {
        state_->decode(send_.data(), 1, 0, values_);
      } else {
        const auto offset = static_cast<uint64_t>(comm_->rank()) * piece_.size();
        state_->decode(recv_.data(), 1, offset, piece_);
      }
    } else {
      state_->decode(recv_.data(), comm_->size(), 0, values_);
    }
    comm_->count_compression(0, since(t0));
  }
  // The compressor's own reduce through comm_; its sends are counted by
  // comm_ as they happen, and its time less the time blocked on them.
  void reduce_collective() {
    const CommStats before = comm_->stats();
    const auto t0 = Clock::now();
    tessera_compress_comm c{};
    c.struct_size = sizeof c;
    c.rank = comm_->rank();
    c.size = comm_->size();
    c.ctx = this;
    c.allreduce = &BucketCodec::comm_allreduce;
    c.allgather = &BucketCodec::comm_allgather;
    state_->reduce(values_, CompressComm(host_, c));
    const CommStats& after = comm_->stats();
    const int64_t sent = after.bytes_sent - before.bytes_sent;
    const int64_t waited = after.wait_ns - before.wait_ns;
    comm_->count_compression(raw_ - sent, std::max<int64_t>(0, since(t0) - waited));
  }
  static tessera_status comm_allreduce(void* ctx, void* data, uint64_t count,
                                       tessera_dtype dtype) noexcept {
    auto* self = static_cast<BucketCodec*>(ctx);
    return detail::guard(self->host_.raw(), [&] {
      const tessera_buffer b = wire_buffer(data, count, dtype);
      self->comm_->run(CommView::args(TESSERA_COLL_ALLREDUCE, b, b));
    });
  }
  static tessera_status comm_allgather(void* ctx, const void* send, void* recv,
                                       uint64_t bytes) noexcept {
    auto* self = static_cast<BucketCodec*>(ctx);
    return detail::guard(self->host_.raw(), [&] {
      const auto n = static_cast<uint64_t>(self->comm_->size());
      self->comm_->run(CommView::args(TESSERA_COLL_ALLGATHER,
                                      wire_buffer(const_cast<void*>(send), bytes, TESSERA_U8),
                                      wire_buffer(recv, bytes * n, TESSERA_U8)));
    });
  }
  static int64_t since(Clock::time_point t0) noexcept { return codec_detail::elapsed_ns(t0); }

  Host host_;
  int32_t rank_;
  CompressKind kind_;
  tessera_dtype wire_;
  uint64_t elements_;
  std::unique_ptr<CompressorBucket> state_;  // nullptr: f32
  Mode mode_ = Mode::kIdle;
  CommView* comm_ = nullptr;
  std::span<float> values_;
  std::span<float> piece_;
  TrackedBuffer<uint8_t> send_;  // this rank's encoding
  TrackedBuffer<uint8_t> recv_;  // a reduce-scatter's block, or every rank's encoding
  int64_t raw_ = 0;              // collective: what f32 would have sent
  PendingOp op_;
};

}  // namespace tessera::sdk
