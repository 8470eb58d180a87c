// The CUDA units' error checks: a failed CUDA runtime, cuBLAS or cuBLASLt
// call becomes an Error naming the unit and the call. Internal to
// libtessera_cuda_units.so.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::model::cuda {

inline void check(cudaError_t err, const std::string& unit, const char* call) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  throw Error(err == cudaErrorMemoryAllocation ? TESSERA_ERR_OUT_OF_MEMORY : TESSERA_ERR_INTERNAL,
              ::tessera::detail::concat("unit '", unit, "': ", call, " failed: ",
                                        cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

inline void check(cublasStatus_t status, const std::string& unit, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(TESSERA_ERR_INTERNAL,
              ::tessera::detail::concat("unit '", unit, "': ", call,
                                        " failed: ", cublasGetStatusString(status)));
}

}  // namespace tessera::model::cuda
