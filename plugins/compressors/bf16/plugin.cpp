// The `bf16` compressor plugin: gradients cast to bfloat16 on the wire
// (SUMMABLE: the backend sums the bf16 values). bf16 has f32's range, so no
// division by the world size is needed; `scale` is there for symmetry with
// fp16 (1 by default).
#include "tessera/c/plugin.h"
#include "cast_plugin.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::compressors {
namespace {

constexpr tessera_option_decl kBf16Options[] = {
    {"scale", TESSERA_OPT_FLOAT, "1.0",
     "multiplies the gradients before the cast and divides the sum after it (positive, finite)"},
};

class Bf16Compressor {
 public:
  Bf16Compressor(const sdk::Host& host, const sdk::Options& options)
      : cast_(host, TESSERA_BF16, options.get_float("scale"), "scale", false) {}
  [[nodiscard]] sdk::CompressKind kind() const noexcept { return cast_.kind(); }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return cast_.wire_dtype(); }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    return cast_.bucket(b);
  }

 private:
  CastPlugin cast_;
};

}  // namespace
}  // namespace tessera::compressors

TESSERA_REGISTER_COMPRESSOR(tessera::compressors::Bf16Compressor, "bf16", "0.1.0",
                            "gradients as bfloat16 on the wire (half the bytes of f32, f32's "
                            "range), summed by the backend",
                            tessera::compressors::kBf16Options)
