// Pieces of the safetensors format shared by the writer, the reader and the
// sharded index: dtype spellings and element counts.
#include <array>
#include <utility>

#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

// Spelling of each TESSERA_* dtype, indexed by its value.
constexpr std::array<std::string_view, TESSERA_DTYPE_COUNT> kDtypeNames = {
    "F32", "F64", "F16", "BF16", "I32", "I64", "U8"};
static_assert(TESSERA_F32 == 0 && TESSERA_F64 == 1 && TESSERA_F16 == 2 && TESSERA_BF16 == 3 &&
                  TESSERA_I32 == 4 && TESSERA_I64 == 5 && TESSERA_U8 == 6,
              "kDtypeNames follows the ABI dtype values");

}  // namespace

std::string_view safetensors_dtype_name(tessera_dtype dtype) {
  if (dtype < 0 || dtype >= TESSERA_DTYPE_COUNT) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors: dtype value ", dtype, " has no safetensors name"));
  }
  return kDtypeNames[static_cast<size_t>(dtype)];
}

std::optional<tessera_dtype> parse_safetensors_dtype(std::string_view name) {
  for (size_t i = 0; i < kDtypeNames.size(); ++i) {
    if (kDtypeNames[i] == name) return static_cast<tessera_dtype>(i);
  }
  return std::nullopt;
}

uint64_t shape_numel(std::span<const uint64_t> shape) {
  uint64_t numel = 1;
  for (const uint64_t dim : shape) {
    if (dim == 0) return 0;  // empty, whatever the other dimensions are
  }
  for (const uint64_t dim : shape) {
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  "safetensors: tensor shape has more elements than fit in 64 bits");
    }
  }
  return numel;
}

}  // namespace tessera
