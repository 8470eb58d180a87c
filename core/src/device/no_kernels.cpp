// The element-wise work of tessera/core/device.hpp where this host has no
// kernels for it (built without the CUDA Toolkit or nvcc, or a sanitizer
// build): nothing applies, and every caller works on the CPU.
#include <cstddef>

#include "tessera/core/device.hpp"

namespace tessera::device {

bool fill_on_cuda(float* /*x*/, std::size_t /*count*/, float /*value*/) { return false; }

bool scale_on_cuda(float* /*x*/, std::size_t /*count*/, float /*factor*/) { return false; }

bool sum_squares_on_cuda(const float* /*x*/, std::size_t /*count*/, double& /*out*/) {
  return false;
}

bool optimizer_step_on_cuda(const optim::ElementwiseStep& /*step*/, float* /*params*/,
                            const float* /*grads*/, float* /*s0*/, float* /*s1*/,
                            std::size_t /*count*/) {
  return false;
}

}  // namespace tessera::device
