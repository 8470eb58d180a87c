// The `int8` compressor plugin (GATHER): each rank's gradients as int8 with
// one f32 scale per chunk of `chunk` elements (scale = max|x| / 127, value =
// x / scale rounded to nearest, or stochastically, and clamped to +-127).
// Encoding: the ceil(elements / chunk) scales, then the elements int8 values.
// Decode sums the dequantised encodings of all ranks in rank order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "compress_support.hpp"
#include "tessera/c/host.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::compressors {
namespace {

constexpr tessera_option_decl kInt8Options[] = {
    {"chunk", TESSERA_OPT_INT, "256", "elements per f32 scale, in [1, 2^30]"},
    {"stochastic", TESSERA_OPT_BOOL, "false",
     "round stochastically (unbiased) instead of to nearest, with a counter-based generator "
     "seeded by `seed`, the bucket, the rank and the step"},
    {"seed", TESSERA_OPT_INT, "0", "seed of stochastic rounding (the same run to run)"},
    {"error_feedback", TESSERA_OPT_BOOL, "false",
     "keep what the rounding lost and add it to the next step's gradients"},
};

constexpr float kInt8Max = 127.0F;

struct Int8Config {
  uint64_t chunk = 256;
  bool stochastic = false;
  uint64_t seed = 0;
  bool error_feedback = false;
};

class Int8Bucket final : public sdk::CompressorBucket {
 public:
  Int8Bucket(const sdk::Host& host, const Int8Config& config, const sdk::CompressBucket& b)
      : config_(config),
        elements_(b.elements),
        chunks_((b.elements + config.chunk - 1) / config.chunk),
        index_(b.index),
        rank_(b.rank),
        residual_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM,
                  config.error_feedback ? b.elements : 0),
        input_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM,
               config.error_feedback ? b.elements : 0) {}

  [[nodiscard]] uint64_t encoded_bytes() const override { return elements_ + 4 * chunks_; }

  void encode(std::span<const float> grads, void* out) override {
    std::span<const float> x = grads;
    if (config_.error_feedback) {
      for (uint64_t i = 0; i < elements_; ++i) input_[i] = grads[i] + residual_[i];
      x = input_.span();
    }
    auto* bytes = static_cast<unsigned char*>(out);
    auto* values = reinterpret_cast<int8_t*>(bytes + 4 * chunks_);
    const CounterRng rng(config_.seed, static_cast<uint64_t>(index_), static_cast<uint64_t>(rank_),
                         step_);
    for (uint64_t c = 0; c < chunks_; ++c) {
      const uint64_t begin = c * config_.chunk;
      const uint64_t end = std::min(elements_, begin + config_.chunk);
      float amax = 0.0F;
      for (uint64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
      // A non-finite chunk keeps its scale (NaN or inf), so the sum shows it.
      const float scale = amax / kInt8Max;
      std::memcpy(bytes + 4 * c, &scale, sizeof scale);
      const float inverse = scale > 0.0F && std::isfinite(scale) ? 1.0F / scale : 0.0F;
      for (uint64_t i = begin; i < end; ++i) {
        const float v = inverse > 0.0F ? x[i] * inverse : 0.0F;
        float q = config_.stochastic ? std::floor(v + rng.uniform(i)) : std::nearbyint(v);
        q = std::clamp(q, -kInt8Max, kInt8Max);
        values[i] = static_cast<int8_t>(q);
        if (config_.error_feedback) residual_[i] = x[i] - q * scale;
      }
    }
    ++step_;
  }

  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    check_decode("int8", elements_, encodings, offset, out.size());
    std::fill(out.begin(), out.end(), 0.0F);
    const auto* all = static_cast<const unsigned char*>(in);
    const uint64_t end = offset + out.size();
    for (int32_t r = 0; r < encodings; ++r) {
      const unsigned char* enc = all + static_cast<uint64_t>(r) * encoded_bytes();
      const auto* values = reinterpret_cast<const int8_t*>(enc + 4 * chunks_);
      for (uint64_t i = offset; i < end;) {
        const uint64_t c = i / config_.chunk;
        const uint64_t stop = std::min(end, (c + 1) * config_.chunk);
        float scale = 0.0F;
        std::memcpy(&scale, enc + 4 * c, sizeof scale);
        for (; i < stop; ++i) out[i - offset] += static_cast<float>(values[i]) * scale;
      }
    }
  }

 private:
  Int8Config config_;
  uint64_t elements_;
  uint64_t chunks_;
  int32_t index_;
  int32_t rank_;
  uint64_t step_ = 0;                   // encodes so far (stochastic rounding's counter)
  sdk::TrackedBuffer<float> residual_;  // error feedback: input - decode(own encoding)
  sdk::TrackedBuffer<float> input_;     // error feedback: gradients + residual
};

class Int8Compressor {
 public:
  Int8Compressor(const sdk::Host& host, const sdk::Options& options) : host_(host) {
    const int64_t chunk = options.get_int("chunk");
    TESSERA_CHECK(chunk >= 1 && chunk <= (int64_t{1} << 30), TESSERA_ERR_INVALID_ARGUMENT,
                  "option 'chunk' = ", chunk, " must be in [1, 2^30] (elements per scale)");
    config_.chunk = static_cast<uint64_t>(chunk);
    config_.stochastic = options.get_bool("stochastic");
    config_.seed = static_cast<uint64_t>(options.get_int("seed"));
    config_.error_feedback = options.get_bool("error_feedback");
  }
  [[nodiscard]] sdk::CompressKind kind() const noexcept { return sdk::CompressKind::kGather; }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return TESSERA_U8; }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    check_bucket("int8", b);
    return std::make_unique<Int8Bucket>(host_, config_, b);
  }

 private:
  sdk::Host host_;
  Int8Config config_;
};

}  // namespace
}  // namespace tessera::compressors

TESSERA_REGISTER_COMPRESSOR(tessera::compressors::Int8Compressor, "int8", "0.1.0",
                            "gradients as int8 with an f32 scale per chunk (about a quarter of "
                            "the bytes of f32), allgathered and summed",
                            tessera::compressors::kInt8Options)
