// The `fp16` compressor plugin: gradients cast to IEEE half on the wire
// (SUMMABLE: the backend sums the f16 values), with a scale and, by default,
// a division by the world size before the cast so the sum of the ranks'
// values stays within f16's range.
#include "tessera/c/plugin.h"
#include "cast_plugin.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::compressors {
namespace {

constexpr tessera_option_decl kFp16Options[] = {
    {"scale", TESSERA_OPT_FLOAT, "1.0",
     "multiplies the gradients before the cast and divides the sum after it (positive, finite)"},
    {"divide_by_world", TESSERA_OPT_BOOL, "false",
     "also divide by the ranks of the bucket before the cast, so the sum stays within one "
     "rank's range (f16 overflows above 65504; small gradients lose more to underflow)"},
};

class Fp16Compressor {
 public:
  Fp16Compressor(const sdk::Host& host, const sdk::Options& options)
      : cast_(host, TESSERA_F16, options.get_float("scale"), "scale",
              options.get_bool("divide_by_world")) {}
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

TESSERA_REGISTER_COMPRESSOR(tessera::compressors::Fp16Compressor, "fp16", "0.1.0",
                            "gradients as IEEE f16 on the wire (half the bytes of f32), summed "
                            "by the backend; optional scale, divided by the ranks by default",
                            tessera::compressors::kFp16Options)
