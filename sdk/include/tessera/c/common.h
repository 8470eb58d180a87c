/*
 * Tessera plugin ABI: basic vocabulary shared by every plugin kind.
 *
 * Rules for everything under tessera/c/ (see docs/sdk.md):
 *  - Plain C only: fixed-width integers, enums stored as int32_t, pointers to
 *    plain structs, opaque handles. No C++ types, no exceptions.
 *  - A struct that can grow starts with `uint32_t struct_size`; fields are only
 *    appended, each tagged with the ABI minor that added it.  A reader checks
 *    struct_size before touching a field that a smaller struct lacks.
 *  - Two kinds of version (see docs/sdk.md, "Versioning"):
 *      TESSERA_ABI_MAJOR.MINOR (below) covers what every plugin shares: this
 *      header, the descriptor (plugin.h) and the host table (host.h);
 *      each kind's interface table has its own major.minor in its header
 *      (TESSERA_BACKEND_API_*, TESSERA_STRATEGY_API_*, TESSERA_MODEL_API_*),
 *      carried in the descriptor and checked by the host for that kind only.
 *    A breaking change bumps the major of what it breaks; the host refuses a
 *    plugin of a major it does not support and names both versions.
 */
#ifndef TESSERA_C_COMMON_H
#define TESSERA_C_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the shared ABI: this header, the descriptor and the host table.
 * Major: incompatible change. Minor: appended fields or functions; a host
 * accepts any minor of its own major.
 *   1.0  descriptor, host table
 *   1.1  host last_error
 *   1.2  (no shared change; was the version of the whole ABI)
 *   1.3  descriptor api_major/api_minor: per-kind interface versions;
 *        host option_int_list, batch_examples, batch_tensor
 *   1.4  host intra_op_threads
 *   1.5  host compute_device, mem_alloc, mem_free, pointer_device,
 *        compute_precision
 *   1.6  host find_strategy
 *   1.7  host vec_fill, vec_scale, vec_sum_squares
 *   1.8  host store_* (the rendezvous store, tessera_store_config)
 *   1.9  host compute_tf32 */
#define TESSERA_ABI_MAJOR 1
#define TESSERA_ABI_MINOR 9

/* Marks the single symbol a plugin exports; everything else is hidden. */
#if defined(_WIN32)
#define TESSERA_EXPORT __declspec(dllexport)
#else
#define TESSERA_EXPORT __attribute__((visibility("default")))
#endif

/* Result of every call that can fail. Details travel separately, through the
 * host's error callback (tessera_host_api.set_error). */
typedef int32_t tessera_status;
enum {
  TESSERA_OK = 0,
  TESSERA_ERR_INVALID_ARGUMENT = 1, /* bad count, dtype, root, peer, option */
  TESSERA_ERR_UNSUPPORTED = 2,      /* valid request this plugin cannot do  */
  TESSERA_ERR_TIMEOUT = 3,          /* a peer did not arrive in time        */
  TESSERA_ERR_PEER_LOST = 4,        /* a peer failed or the group aborted   */
  TESSERA_ERR_OUT_OF_MEMORY = 5,
  TESSERA_ERR_MISMATCH = 6,   /* ranks disagree on a collective call  */
  TESSERA_ERR_INTERNAL = 7,   /* a bug or unexpected failure          */
  TESSERA_ERR_IN_PROGRESS = 8 /* non-blocking work not finished yet   */
};

/* Element types of buffers. Values are stable; new ones are appended. */
typedef int32_t tessera_dtype;
enum {
  TESSERA_F32 = 0,
  TESSERA_F64 = 1,
  TESSERA_F16 = 2,  /* IEEE 754 binary16; reductions accumulate in f32 */
  TESSERA_BF16 = 3, /* bfloat16; reductions accumulate in f32          */
  TESSERA_I32 = 4,
  TESSERA_I64 = 5,
  TESSERA_U8 = 6,
  TESSERA_DTYPE_COUNT = 7
};

/* Reduction operators. AVG is SUM divided by the group size (integer types
 * divide with truncation toward zero; for floating types a backend may
 * instead sum inputs scaled by 1/size, as NCCL does, which can differ from
 * SUM / size in the last bits). */
typedef int32_t tessera_reduce_op;
enum {
  TESSERA_SUM = 0,
  TESSERA_AVG = 1,
  TESSERA_MIN = 2,
  TESSERA_MAX = 3,
  TESSERA_PROD = 4,
  TESSERA_REDUCE_OP_COUNT = 5
};

/* Where a buffer lives. */
typedef int32_t tessera_device_type;
enum { TESSERA_DEVICE_CPU = 0, TESSERA_DEVICE_CUDA = 1 };

typedef struct tessera_device {
  tessera_device_type type; /* TESSERA_DEVICE_CPU or _CUDA               */
  int32_t index;            /* device ordinal; 0 for CPU                 */
} tessera_device;

/* A typed view of memory owned by the caller. `count` is in elements. */
typedef struct tessera_buffer {
  void* data;          /* may be NULL only when count == 0            */
  uint64_t count;      /* number of elements of `dtype`               */
  tessera_dtype dtype; /* element type                                */
  tessera_device device;
} tessera_buffer;

/* ABI 1.3: a read-only view of a host-owned tensor, e.g. a micro-batch's
 * tokens (see tessera_host_api.batch_tensor). */
#define TESSERA_VIEW_MAX_DIMS 4
typedef struct tessera_tensor_view {
  uint32_t struct_size; /* sizeof(tessera_tensor_view) of the caller */
  tessera_dtype dtype;
  const void* data;                     /* NULL when the tensor has no elements        */
  int32_t ndim;                         /* 0 .. TESSERA_VIEW_MAX_DIMS                  */
  int32_t reserved;                     /* zero                                        */
  int64_t shape[TESSERA_VIEW_MAX_DIMS]; /* first ndim entries, row-major */
} tessera_tensor_view;

/* ABI 1.3: one micro-batch of training data, owned by the host and read
 * through tessera_host_api.batch_examples / batch_tensor. */
typedef struct tessera_batch tessera_batch;

/* Plugin kinds. The kind decides which interface table the descriptor's
 * `api` field points to. */
typedef int32_t tessera_plugin_kind;
enum {
  TESSERA_KIND_BACKEND = 0,
  TESSERA_KIND_STRATEGY = 1,
  TESSERA_KIND_COMPRESSOR = 2,
  TESSERA_KIND_SELECTOR = 3,
  TESSERA_KIND_MODEL = 4,
  TESSERA_KIND_COUNT = 5
};

/* Log levels, ordered by severity (match spdlog's). */
typedef int32_t tessera_log_level;
enum {
  TESSERA_LOG_TRACE = 0,
  TESSERA_LOG_DEBUG = 1,
  TESSERA_LOG_INFO = 2,
  TESSERA_LOG_WARN = 3,
  TESSERA_LOG_ERROR = 4,
  TESSERA_LOG_CRITICAL = 5
};

/* Bytes in one element of `dtype`, 0 for an unknown dtype. */
static inline size_t tessera_dtype_size(tessera_dtype dtype) {
  switch (dtype) {
    case TESSERA_U8:
      return 1;
    case TESSERA_F16:
    case TESSERA_BF16:
      return 2;
    case TESSERA_F32:
    case TESSERA_I32:
      return 4;
    case TESSERA_F64:
    case TESSERA_I64:
      return 8;
    default:
      return 0;
  }
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_COMMON_H */
