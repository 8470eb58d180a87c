// The `fp16` and `bf16` plugins: the SDK's CastCompressor, with the scratch
// its buckets keep for a scaled encode reported to the host.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "compress_support.hpp"
#include "tessera/c/host.h"
#include "tessera/sdk/cast_compressor.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::compressors {

// A CastBucket whose scratch (one f32 per element when the scale is not 1,
// allocated by its first encode) is reported as TESSERA_MEM_COMM of the
// calling thread's rank for the bucket's lifetime, and whose sum
// overflowing the wire type is a warning (once per compressor) naming the
// cause, which the gradient-norm check that then stops the run cannot see.
class TrackedCastBucket final : public sdk::CompressorBucket {
 public:
  // What the overflow warning says: the wire type, and what to change.
  struct Overflow {
    tessera_dtype wire = TESSERA_F16;
    std::string remedy;
    std::shared_ptr<std::atomic<bool>> warned;  // shared by the compressor's buckets
  };
  TrackedCastBucket(const sdk::Host& host, std::unique_ptr<sdk::CastBucket> inner,
                    int64_t scratch_bytes, Overflow overflow)
      : host_(host),
        inner_(std::move(inner)),
        scratch_bytes_(scratch_bytes),
        overflow_(std::move(overflow)) {
    inner_->watch_overflow();
    if (scratch_bytes_ > 0)
      host_.track_memory(TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM, scratch_bytes_);
  }
  TrackedCastBucket(const TrackedCastBucket&) = delete;
  TrackedCastBucket& operator=(const TrackedCastBucket&) = delete;
  ~TrackedCastBucket() override {
    if (scratch_bytes_ > 0)
      host_.track_memory(TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM, -scratch_bytes_);
  }

  [[nodiscard]] uint64_t encoded_bytes() const override { return inner_->encoded_bytes(); }
  void encode(std::span<const float> grads, void* out) override { inner_->encode(grads, out); }
  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    inner_->decode(in, encodings, offset, out);
    if (!inner_->overflowed() || overflow_.warned->exchange(true)) return;
    const std::string_view type = dtype_name(overflow_.wire);
    host_.warn("the ", type,
               " sum of the gradients over the ranks overflowed (it is not finite although this "
               "rank's gradients were; the largest ",
               type, " value is ", overflow_.wire == TESSERA_F16 ? "65504" : "3.39e38",
               "): the gradients times the scale ", inner_->scale(),
               ", and their sum, must stay below it; ", overflow_.remedy,
               " (said once; under dynamic loss scaling such a step is skipped)");
  }

 private:
  sdk::Host host_;
  std::unique_ptr<sdk::CastBucket> inner_;
  int64_t scratch_bytes_;
  Overflow overflow_;
};

// A cast to `dtype` with a scale (checked: positive and finite, the message
// naming `scale_key`) and optionally divided by the world size.
class CastPlugin {
 public:
  CastPlugin(const sdk::Host& host, tessera_dtype dtype, double scale, const char* scale_key,
             bool divide_by_world)
      : host_(host),
        scale_(checked_scale(scale, scale_key)),
        divide_by_world_(divide_by_world),
        cast_(dtype, scale_, divide_by_world),
        remedy_(std::string("lower option '") + scale_key + "'" +
                (divide_by_world ? "" : ", or set divide_by_world = true") +
                (dtype == TESSERA_F16 ? ", or use bf16" : "")) {}

  [[nodiscard]] sdk::CompressKind kind() const noexcept { return cast_.kind(); }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return cast_.wire_dtype(); }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    check_bucket("cast compressor", b);
    const float effective = divide_by_world_ ? scale_ / static_cast<float>(b.world_size) : scale_;
    const int64_t scratch =
        effective == 1.0F ? 0 : static_cast<int64_t>(b.elements * sizeof(float));
    return std::make_unique<TrackedCastBucket>(
        host_, cast_.bucket(b), scratch,
        TrackedCastBucket::Overflow{cast_.wire_dtype(), remedy_, warned_});
  }

 private:
  static float checked_scale(double scale, const char* key) {
    const auto f = static_cast<float>(scale);
    TESSERA_CHECK(std::isfinite(f) && f > 0.0F && std::isnormal(f), TESSERA_ERR_INVALID_ARGUMENT,
                  "option '", key, "' = ", scale,
                  " must be a positive finite number (a normal f32: the gradients are multiplied "
                  "by it before the cast)");
    return f;
  }
  sdk::Host host_;
  float scale_;
  bool divide_by_world_;
  sdk::CastCompressor cast_;
  std::string remedy_;  // what the overflow warning advises
  std::shared_ptr<std::atomic<bool>> warned_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace tessera::compressors
