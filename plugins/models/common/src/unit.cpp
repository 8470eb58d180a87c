// The convention-initialised unit base (see tessera/models/unit.hpp).
#include "tessera/models/unit.hpp"

#include "tessera/models/kernels.hpp"

namespace tessera::model {

void ConventionUnit::init(std::span<float* const> params, uint64_t seed) const {
  kernels::init_by_convention(name_, specs_, params, seed);
}

}  // namespace tessera::model
