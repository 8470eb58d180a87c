#include "cuda.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {

void cuda_check(cudaError_t err, const char* call, const std::string& where) {
  if (err == cudaSuccess) return;
  throw Error(TESSERA_ERR_INTERNAL,
              detail::concat("nccl: ", call, " failed (", where, "): ", cudaGetErrorName(err), ": ",
                             cudaGetErrorString(err)));
}

std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string text =
      detail::concat("NCCL error ", static_cast<int>(r), ": ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += detail::concat(" (", last, ")");
  return text;
}

int32_t require_cuda_devices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    throw Error(
        TESSERA_ERR_UNSUPPORTED,
        detail::concat("nccl: no CUDA device (cudaGetDeviceCount: ", cudaGetErrorName(err), ": ",
                       cudaGetErrorString(err), "); the nccl backend needs one GPU per rank"));
  }
  if (count <= 0) {
    throw Error(TESSERA_ERR_UNSUPPORTED,
                "nccl: no CUDA device (cudaGetDeviceCount: 0 devices); the nccl backend "
                "needs one GPU per rank");
  }
  return count;
}

ncclDataType_t nccl_dtype(tessera_dtype d) noexcept {
  switch (d) {
    case TESSERA_F64:
      return ncclFloat64;
    case TESSERA_F16:
      return ncclFloat16;
    case TESSERA_BF16:
      return ncclBfloat16;
    case TESSERA_I32:
      return ncclInt32;
    case TESSERA_I64:
      return ncclInt64;
    case TESSERA_U8:
      return ncclUint8;
    default:
      return ncclFloat32;
  }
}

ncclRedOp_t nccl_op(tessera_reduce_op op) noexcept {
  switch (op) {
    case TESSERA_AVG:
      return ncclAvg;
    case TESSERA_MIN:
      return ncclMin;
    case TESSERA_MAX:
      return ncclMax;
    case TESSERA_PROD:
      return ncclProd;
    default:
      return ncclSum;
  }
}

size_t dtype_bytes(tessera_dtype d) noexcept {
  switch (d) {
    case TESSERA_F64:
    case TESSERA_I64:
      return 8;
    case TESSERA_F16:
    case TESSERA_BF16:
      return 2;
    case TESSERA_U8:
      return 1;
    default:
      return 4;
  }
}

Event::Event() {
  cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate",
             "completion event");
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

void* DeviceBuffer::reserve(size_t bytes, const std::string& where) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  if (data_ != nullptr) {
    (void)cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  const cudaError_t err = cudaMalloc(&data_, bytes > 0 ? bytes : 1);
  if (err != cudaSuccess) {
    data_ = nullptr;
    throw Error(TESSERA_ERR_OUT_OF_MEMORY,
                detail::concat("nccl: cannot allocate ", bytes, " bytes of device memory (", where,
                               "): ", cudaGetErrorString(err)));
  }
  bytes_ = bytes;
  return data_;
}

}  // namespace tessera::nccl_backend
