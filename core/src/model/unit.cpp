#include "tessera/core/model/unit.hpp"

#include "tessera/core/model/kernels.hpp"

namespace tessera::model {

void Unit::init(std::span<float* const> params, uint64_t seed) const {
  kernels::init_by_convention(name_, specs_, params, seed);
}

}  // namespace tessera::model
