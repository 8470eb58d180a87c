// The `topk` compressor plugin (GATHER): each rank sends the k =
// max(1, ceil(ratio * elements)) entries of largest magnitude of its
// gradients (plus, with error feedback, what it has not sent before) as k
// uint32 indices followed by k f32 values; decode scatter-adds every rank's
// pairs in rank order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
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

constexpr tessera_option_decl kTopkOptions[] = {
    {"ratio", TESSERA_OPT_FLOAT, "0.01",
     "fraction of a bucket's elements each rank sends, in (0, 1] (at least one element)"},
    {"error_feedback", TESSERA_OPT_BOOL, "true",
     "keep what was not sent and add it to the next step's gradients"},
};

struct TopkConfig {
  double ratio = 0.01;
  bool error_feedback = true;
};

// The magnitude a value is ranked by: NaN ranks above everything (a NaN
// gradient is sent, not hidden in the residual).
float rank_key(float v) noexcept {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
}

// k = max(1, ceil(ratio * elements)), at most elements; a product within
// 1e-9 (relative) of an integer counts as that integer, so 0.07 * 100 is 7
// and not 8 for the double nearest 0.07.
uint64_t count_sent(double ratio, uint64_t elements) noexcept {
  const double product = ratio * static_cast<double>(elements);
  const auto k = static_cast<uint64_t>(std::ceil(product - 1e-9 * product));
  return std::clamp<uint64_t>(k, 1, elements);
}

class TopkBucket final : public sdk::CompressorBucket {
 public:
  TopkBucket(const sdk::Host& host, const TopkConfig& config, const sdk::CompressBucket& b)
      : config_(config),
        elements_(b.elements),
        k_(count_sent(config.ratio, b.elements)),
        residual_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM,
                  config.error_feedback ? b.elements : 0),
        order_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM, b.elements) {}

  [[nodiscard]] uint64_t k() const noexcept { return k_; }
  [[nodiscard]] uint64_t encoded_bytes() const override { return 8 * k_; }

  void encode(std::span<const float> grads, void* out) override {
    // With error feedback the residual becomes the input (gradients plus
    // what was not sent before); the sent entries are then zeroed in it.
    std::span<const float> x = grads;
    if (config_.error_feedback) {
      for (uint64_t i = 0; i < elements_; ++i) residual_[i] += grads[i];
      x = residual_.span();
    }
    std::iota(order_.span().begin(), order_.span().end(), uint32_t{0});
    // Largest magnitude first, the lower index first among equals: a strict
    // total order, so the chosen set is the same whatever the algorithm.
    const auto before = [&x](uint32_t a, uint32_t b) {
      const float ka = rank_key(x[a]);
      const float kb = rank_key(x[b]);
      return ka > kb || (ka == kb && a < b);
    };
    const auto first = order_.span().begin();
    const auto kth = first + static_cast<std::ptrdiff_t>(k_);
    if (k_ < elements_) std::nth_element(first, kth - 1, order_.span().end(), before);
    std::sort(first, kth);  // ascending indices: decode walks memory forward
    auto* indices = static_cast<unsigned char*>(out);
    unsigned char* values = indices + 4 * k_;
    for (uint64_t j = 0; j < k_; ++j) {
      const uint32_t i = order_[j];
      const float v = x[i];
      std::memcpy(indices + 4 * j, &i, sizeof i);
      std::memcpy(values + 4 * j, &v, sizeof v);
      if (config_.error_feedback) residual_[i] = 0.0F;
    }
  }

  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    check_decode("topk", elements_, encodings, offset, out.size());
    std::fill(out.begin(), out.end(), 0.0F);
    const auto* all = static_cast<const unsigned char*>(in);
    for (int32_t r = 0; r < encodings; ++r) {
      const unsigned char* indices = all + static_cast<uint64_t>(r) * encoded_bytes();
      const unsigned char* values = indices + 4 * k_;
      for (uint64_t j = 0; j < k_; ++j) {
        uint32_t i = 0;
        float v = 0.0F;
        std::memcpy(&i, indices + 4 * j, sizeof i);
        std::memcpy(&v, values + 4 * j, sizeof v);
        TESSERA_CHECK(i < elements_, TESSERA_ERR_INVALID_ARGUMENT, "topk: encoding of rank ", r,
                      " has index ", i, " outside a bucket of ", elements_, " elements");
        if (i >= offset && i - offset < out.size()) out[i - offset] += v;
      }
    }
  }

 private:
  TopkConfig config_;
  uint64_t elements_;
  uint64_t k_;
  sdk::TrackedBuffer<float> residual_;  // error feedback: what was not sent
  sdk::TrackedBuffer<uint32_t> order_;  // scratch: element indices, ranked
};

class TopkCompressor {
 public:
  TopkCompressor(const sdk::Host& host, const sdk::Options& options) : host_(host) {
    config_.ratio = options.get_float("ratio");
    TESSERA_CHECK(std::isfinite(config_.ratio) && config_.ratio > 0.0 && config_.ratio <= 1.0,
                  TESSERA_ERR_INVALID_ARGUMENT, "option 'ratio' = ", config_.ratio,
                  " must be in (0, 1] (the fraction of the elements sent)");
    config_.error_feedback = options.get_bool("error_feedback");
  }
  [[nodiscard]] sdk::CompressKind kind() const noexcept { return sdk::CompressKind::kGather; }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return TESSERA_U8; }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    check_bucket("topk", b);
    TESSERA_CHECK(b.elements <= std::numeric_limits<uint32_t>::max(), TESSERA_ERR_INVALID_ARGUMENT,
                  "topk: bucket ", b.index, " of ", b.elements,
                  " elements is too large for 32-bit indices (at most 2^32 - 1)");
    return std::make_unique<TopkBucket>(host_, config_, b);
  }

 private:
  sdk::Host host_;
  TopkConfig config_;
};

}  // namespace
}  // namespace tessera::compressors

TESSERA_REGISTER_COMPRESSOR(tessera::compressors::TopkCompressor, "topk", "0.1.0",
                            "each rank sends its ratio * elements largest gradients as (index, "
                            "value) pairs, keeping the rest for later steps (error feedback)",
                            tessera::compressors::kTopkOptions)
