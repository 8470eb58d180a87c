// The SDK's own compressor: f32 gradients cast to f16 or bf16 on the wire
// (SUMMABLE: the backend sums the 16-bit values, accumulating in f32), with
// an optional scale applied before the cast and undone after the sum. The
// `fp16` and `bf16` compressor plugins are this class; the strategies'
// `reduce_dtype` options use it directly (no scale), so both are one path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// One bucket of a cast: encode = (scale · g) rounded to `dtype`, decode =
// sum / scale. With scale 1 it is exactly pack_16bit / unpack_16bit. A sum
// that decodes to a non-finite value although this rank's gradients were
// finite overflowed the 16-bit range (f16's 65504): once watch_overflow()
// was called, overflowed() says so (the values stay as decoded: under
// dynamic loss scaling the step is then skipped, otherwise the
// gradient-norm check stops the run). Unwatched, as in the strategies'
// reduce_dtype, encode and decode make no extra pass for it.
class CastBucket final : public CompressorBucket {
 public:
  CastBucket(tessera_dtype dtype, uint64_t elements, float scale)
      : dtype_(dtype), elements_(elements), scale_(scale) {
    TESSERA_CHECK(dtype == TESSERA_F16 || dtype == TESSERA_BF16, TESSERA_ERR_INVALID_ARGUMENT,
                  "cast compressor: dtype ", dtype_name(dtype), " is not f16 or bf16");
    TESSERA_CHECK(std::isfinite(scale) && scale > 0.0f, TESSERA_ERR_INVALID_ARGUMENT,
                  "cast compressor: scale ", scale, " is not a positive finite number");
  }

  [[nodiscard]] uint64_t encoded_bytes() const override { return elements_ * 2; }
  void encode(std::span<const float> grads, void* out) override {
    if (watch_) {
      finite_in_ =
          std::all_of(grads.begin(), grads.end(), [](float g) { return std::isfinite(g); });
    }
    if (scale_ == 1.0f) {
      pack_16bit(grads, dtype_, out);
      return;
    }
    scaled_.resize(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) scaled_[i] = grads[i] * scale_;
    pack_16bit(scaled_, dtype_, out);
  }
  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    TESSERA_CHECK(encodings == 1, TESSERA_ERR_INTERNAL, "cast compressor: ", encodings,
                  " encodings to decode; a summable compressor decodes their sum");
    TESSERA_CHECK(offset + out.size() <= elements_, TESSERA_ERR_INTERNAL,
                  "cast compressor: decode of [", offset, ", ", offset + out.size(),
                  ") outside a bucket of ", elements_);
    unpack_16bit(in, dtype_, out);  // `in` holds the range's summed elements
    if (scale_ != 1.0f) {
      const float inverse = 1.0f / scale_;
      for (float& v : out) v *= inverse;
    }
    overflowed_ = watch_ && finite_in_ &&
                  std::any_of(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
  }
  // From now on, tell whether a decode's sum overflowed (see above).
  void watch_overflow() noexcept { watch_ = true; }
  // Whether the last decode's sum overflowed the wire type (false unwatched).
  [[nodiscard]] bool overflowed() const noexcept { return overflowed_; }
  [[nodiscard]] float scale() const noexcept { return scale_; }

 private:
  tessera_dtype dtype_;
  uint64_t elements_;
  float scale_;
  std::vector<float> scaled_;  // scratch for a scaled encode
  bool watch_ = false;
  bool finite_in_ = true;  // the last encode's gradients were all finite (watched)
  bool overflowed_ = false;
};

// The compressor of CastBuckets. `scale` multiplies the gradients before the
// cast; with `divide_by_world` it is further divided by the bucket's world
// size (the sum then stays within the range of one rank's values: f16's
// guard against overflow when many ranks add up).
class CastCompressor {
 public:
  CastCompressor(tessera_dtype dtype, float scale, bool divide_by_world)
      : dtype_(dtype), scale_(scale), divide_by_world_(divide_by_world) {}

  [[nodiscard]] CompressKind kind() const noexcept { return CompressKind::kSummable; }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return dtype_; }
  [[nodiscard]] std::unique_ptr<CastBucket> bucket(const CompressBucket& b) const {
    const float scale = divide_by_world_
                            ? scale_ / static_cast<float>(b.world_size > 0 ? b.world_size : 1)
                            : scale_;
    return std::make_unique<CastBucket>(dtype_, b.elements, scale);
  }

 private:
  tessera_dtype dtype_;
  float scale_;
  bool divide_by_world_;
};

}  // namespace tessera::sdk
