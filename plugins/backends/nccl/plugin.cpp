// Registration of the nccl backend plugin.
#include "backend.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

TESSERA_REGISTER_BACKEND(tessera::nccl_backend::NcclBackend, "nccl", "0.1.0",
                         "one process per GPU over NCCL; the unique id goes through a TCP, file or "
                         "Redis store",
                         TESSERA_BACKEND_CAP_CUDA_BUFFERS | TESSERA_BACKEND_CAP_CPU_BUFFERS,
                         tessera::nccl_backend::kOptions)
