// signsgd: a gradient compressor built outside the Tessera tree.
//
// Sign compression with error feedback (1-bit SGD, Seide et al. 2014;
// EF-SignSGD, Karimireddy et al. 2019). Each rank, for each bucket of
// gradients g, forms x = g + residual and sends
//
//   one f32 scale per chunk: the mean of |x| over the chunk, and
//   one bit per element: whether x is negative,
//
// so a rank's encoding of a bucket of n elements in c chunks takes
// 4c + ceil(n / 8) bytes instead of 4n. The host's strategy allgathers
// every rank's encoding (the kind is GATHER: encodings do not add), and
// decode sums scale * sign over the ranks, in rank order, so every rank
// ends the step with the same gradients. What the encoding lost,
// residual = x - scale * sign(x), is added to the next step's gradients
// (error feedback), so nothing is lost for good.
//
// A run selects it with
//
//   [compression]
//   name = "signsgd"
//   [compression.options]
//   chunk = 0              # elements per scale; 0: one scale per bucket
//   error_feedback = true
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include <tessera/sdk/compressor.hpp>
#include <tessera/sdk/tracked_buffer.hpp>

namespace {

namespace sdk = tessera::sdk;

// The options of [compression.options]; `tessera plugins --describe
// signsgd` prints them, and the host refuses keys not declared here.
constexpr tessera_option_decl kSignSgdOptions[] = {
    {"chunk", TESSERA_OPT_INT, "0",
     "elements per f32 scale, in [1, 2^30]; 0: one scale for the whole bucket"},
    {"error_feedback", TESSERA_OPT_BOOL, "true",
     "keep what the signs lost (x - scale * sign(x)) and add it to the next step's gradients"},
};

constexpr int64_t kMaxChunk = int64_t{1} << 30;

struct SignSgdConfig {
  uint64_t chunk = 0;  // 0: the whole bucket
  bool error_feedback = true;
};

// One bucket: its residual (reported to the host as communication memory)
// and the layout of its encoding: `chunks_` f32 scales, then the sign bits
// of all elements, element i in bit i % 8 of byte i / 8 (set: negative).
class SignSgdBucket final : public sdk::CompressorBucket {
 public:
  SignSgdBucket(const sdk::Host& host, const SignSgdConfig& config, const sdk::CompressBucket& b)
      : elements_(b.elements),
        chunk_(config.chunk == 0 ? b.elements : config.chunk),
        chunks_((b.elements + chunk_ - 1) / chunk_),
        error_feedback_(config.error_feedback),
        residual_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM,
                  config.error_feedback ? b.elements : 0) {}

  [[nodiscard]] uint64_t encoded_bytes() const override {
    return 4 * chunks_ + (elements_ + 7) / 8;
  }

  void encode(std::span<const float> grads, void* out) override {
    auto* bytes = static_cast<unsigned char*>(out);
    unsigned char* signs = bytes + 4 * chunks_;
    std::fill(signs, signs + (elements_ + 7) / 8, static_cast<unsigned char>(0));
    for (uint64_t c = 0; c < chunks_; ++c) {
      const uint64_t begin = c * chunk_;
      const uint64_t end = std::min(elements_, begin + chunk_);
      double sum = 0.0;
      for (uint64_t i = begin; i < end; ++i) sum += std::fabs(static_cast<double>(input(grads, i)));
      // A non-finite chunk gets a non-finite scale, so the decoded sum shows it.
      const auto scale = static_cast<float>(sum / static_cast<double>(end - begin));
      std::memcpy(bytes + 4 * c, &scale, sizeof scale);
      for (uint64_t i = begin; i < end; ++i) {
        const float x = input(grads, i);
        const bool negative = x < 0.0F;
        if (negative) signs[i / 8] = static_cast<unsigned char>(signs[i / 8] | (1U << (i % 8)));
        if (error_feedback_) residual_[i] = x - (negative ? -scale : scale);
      }
    }
  }

  // Elements [offset, offset + out.size()) of the sum over `encodings`
  // whole encodings (one per rank, in rank order, encoded_bytes() apart).
  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    TESSERA_CHECK(encodings >= 1, TESSERA_ERR_INVALID_ARGUMENT, "signsgd: decode of ", encodings,
                  " encodings (at least 1: one per rank)");
    TESSERA_CHECK(offset <= elements_ && out.size() <= elements_ - offset,
                  TESSERA_ERR_INVALID_ARGUMENT, "signsgd: decode of [", offset, ", ",
                  offset + out.size(), ") outside a bucket of ", elements_, " elements");
    std::fill(out.begin(), out.end(), 0.0F);
    const auto* all = static_cast<const unsigned char*>(in);
    const uint64_t end = offset + out.size();
    for (int32_t r = 0; r < encodings; ++r) {
      const unsigned char* enc = all + static_cast<uint64_t>(r) * encoded_bytes();
      const unsigned char* signs = enc + 4 * chunks_;
      for (uint64_t i = offset; i < end;) {
        const uint64_t c = i / chunk_;
        const uint64_t stop = std::min(end, (c + 1) * chunk_);
        float scale = 0.0F;
        std::memcpy(&scale, enc + 4 * c, sizeof scale);
        for (; i < stop; ++i) {
          const bool negative = ((signs[i / 8] >> (i % 8)) & 1U) != 0;
          out[i - offset] += negative ? -scale : scale;
        }
      }
    }
  }

 private:
  // x = g + residual (the residual is zero without error feedback).
  [[nodiscard]] float input(std::span<const float> grads, uint64_t i) const {
    return error_feedback_ ? grads[i] + residual_[i] : grads[i];
  }

  uint64_t elements_;
  uint64_t chunk_;   // elements per scale
  uint64_t chunks_;  // scales per encoding
  bool error_feedback_;
  sdk::TrackedBuffer<float> residual_;
};

class SignSgdCompressor {
 public:
  SignSgdCompressor(const sdk::Host& host, const sdk::Options& options) : host_(host) {
    const int64_t chunk = options.get_int("chunk");
    TESSERA_CHECK(chunk >= 0 && chunk <= kMaxChunk, TESSERA_ERR_INVALID_ARGUMENT,
                  "option 'chunk' = ", chunk,
                  " must be 0 (one scale per bucket) or in [1, 2^30] (elements per scale)");
    config_.chunk = static_cast<uint64_t>(chunk);
    config_.error_feedback = options.get_bool("error_feedback");
  }

  [[nodiscard]] sdk::CompressKind kind() const noexcept { return sdk::CompressKind::kGather; }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return TESSERA_U8; }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    TESSERA_CHECK(b.elements >= 1, TESSERA_ERR_INVALID_ARGUMENT, "signsgd: bucket ", b.index,
                  " has no elements");
    return std::make_unique<SignSgdBucket>(host_, config_, b);
  }

 private:
  sdk::Host host_;
  SignSgdConfig config_;
};

}  // namespace

TESSERA_REGISTER_COMPRESSOR(
    SignSgdCompressor, "signsgd", "0.1.0",
    "examples/third_party_compressor: one sign bit per element and an f32 "
    "scale (mean |x|) per chunk, with error feedback; allgathered and summed",
    kSignSgdOptions)
