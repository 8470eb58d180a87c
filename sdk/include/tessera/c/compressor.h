/*
 * Tessera plugin ABI: gradient compressors (compressor interface 1.0).
 *
 * A compressor library's descriptor has kind TESSERA_KIND_COMPRESSOR and
 * `api` pointing to a static tessera_compressor_api. The host creates one
 * compressor per rank when the configuration has `[compression] name = ...`
 * (options from `[compression.options]`) and hands it to the strategy in its
 * environment (strategy interface 2.4). The strategy, not the host, calls
 * it: in its gradient reduction every bucket of gradients (a contiguous flat
 * range of f32 values, reduced with SUM over a communicator) gets a state of
 * its own, is encoded, travels in its encoded form and is decoded into the
 * sum.
 *
 * How the encoded form reduces is the compressor's declaration, fixed for an
 * instance:
 *   SUMMABLE    one encoded element per gradient element, of `wire_dtype`,
 *               and encodings add: the strategy allreduces (or
 *               reduce-scatters) the encoded buffer with SUM in wire_dtype
 *               and decodes the sum (a cast to f16 or bf16, with or without
 *               a scale).
 *   GATHER      encodings do not add (top-k indices and values, int8 with
 *               per-chunk scales): every rank's encoding (encoded_bytes,
 *               the same on every rank) is allgathered as bytes, and decode
 *               sums the decodings of all of them.
 *   COLLECTIVE  the compressor runs its own collective pattern (PowerSGD's
 *               allreduces of P and Q) through the communicator the strategy
 *               passes to `reduce`.
 * A strategy that needs a reduce-scatter (sharded gradients) can use a
 * SUMMABLE compressor directly; with the other kinds it allreduces the
 * bucket and keeps its part, or refuses with a message naming the
 * compressor.
 *
 * Every call on a bucket state comes from one thread at a time, in the same
 * order on every rank of the communicator; calls on different states may
 * come from different threads (one rank per thread in one process).
 * Functions return a status; on failure the message is set through the
 * host's set_error (host.h), as for every plugin kind.
 */
#ifndef TESSERA_C_COMPRESSOR_H
#define TESSERA_C_COMPRESSOR_H

#include "tessera/c/common.h"
#include "tessera/c/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the compressor interface (this header's tables and structs),
 * carried in the descriptor's api_major/api_minor.
 *   1.0  create, bucket states, encode/decode, collective reduce
 * A host accepts compressor 1.x of any minor. */
#define TESSERA_COMPRESSOR_API_MAJOR 1
#define TESSERA_COMPRESSOR_API_MINOR 0

typedef struct tessera_compressor tessera_compressor;         /* one per rank */
typedef struct tessera_compress_state tessera_compress_state; /* one per bucket */

/* How encodings reduce (see the top of the file). */
typedef int32_t tessera_compress_kind;
enum {
  TESSERA_COMPRESS_SUMMABLE = 0,
  TESSERA_COMPRESS_GATHER = 1,
  TESSERA_COMPRESS_COLLECTIVE = 2
};

/* One parameter tensor inside a bucket, for compressors that work per
 * matrix: its elements are [offset, offset + rows * cols) of the bucket, in
 * row-major order. rows is the product of every dimension but the last (1
 * for a vector or a scalar), cols the last dimension (1 for a scalar). A
 * bucket may cover a tensor in part (e.g. a shard); such a piece is given
 * as rows = 1, cols = its elements. */
typedef struct tessera_compress_tensor {
  uint64_t offset;
  int64_t rows;
  int64_t cols;
} tessera_compress_tensor;

/* A bucket, as the strategy describes it to bucket_create. The SDK's
 * strategies list every element in some entry of `tensors` (pieces of
 * tensors and padding as rows = 1); a compressor must still treat elements
 * outside every entry as one flat vector. */
typedef struct tessera_compress_bucket {
  uint32_t struct_size;                   /* sizeof(tessera_compress_bucket) of the strategy */
  int32_t index;                          /* the bucket's number in the strategy's plan, from 0 */
  uint64_t elements;                      /* f32 gradient values in the bucket, >= 1         */
  int32_t num_tensors;                    /* entries in `tensors`; 0: one flat vector         */
  int32_t world_size;                     /* ranks the bucket is reduced over                 */
  int32_t rank;                           /* this rank among them                             */
  int32_t reserved;                       /* zero                                             */
  const tessera_compress_tensor* tensors; /* in offset order, non-overlapping */
} tessera_compress_bucket;

/* The communicator a COLLECTIVE compressor reduces through, provided by the
 * strategy for the duration of one `reduce` call. Both operations are
 * collective over the bucket's ranks, blocking and in place where they
 * can be; they return a status with the message set on failure. */
typedef struct tessera_compress_comm {
  uint32_t struct_size; /* sizeof(tessera_compress_comm) of the strategy */
  int32_t rank;
  int32_t size;
  int32_t reserved;
  void* ctx; /* first argument of the calls below */
  /* Sums `count` elements of `dtype` at `data` over the ranks, in place. */
  tessera_status (*allreduce)(void* ctx, void* data, uint64_t count, tessera_dtype dtype);
  /* Every rank's `bytes` bytes at `send` into `recv` (size * bytes bytes,
   * in rank order). */
  tessera_status (*allgather)(void* ctx, const void* send, void* recv, uint64_t bytes);
} tessera_compress_comm;

typedef struct tessera_compressor_api {
  uint32_t struct_size;
  uint32_t reserved;
  /* A compressor for the calling rank with the options of
   * [compression.options] (checked against the declared options). */
  tessera_status (*create)(const tessera_host_api* host, const tessera_options* options,
                           tessera_compressor** out);
  void (*destroy)(tessera_compressor* c);
  /* TESSERA_COMPRESS_*; the same for every call on an instance. */
  tessera_compress_kind (*kind)(const tessera_compressor* c);
  /* SUMMABLE: the dtype of the encoded elements (the reduction sums in it).
   * GATHER and COLLECTIVE: TESSERA_U8. */
  tessera_dtype (*wire_dtype)(const tessera_compressor* c);

  /* A state for one bucket: error-feedback residuals, warm-start factors,
   * scratch. Its bytes are the compressor's to report (host->mem_track as
   * TESSERA_MEM_COMM). */
  tessera_status (*bucket_create)(tessera_compressor* c, const tessera_compress_bucket* bucket,
                                  tessera_compress_state** out);
  void (*bucket_destroy)(tessera_compress_state* s);
  /* SUMMABLE: elements * dtype size; GATHER: bytes of one rank's encoding;
   * COLLECTIVE: 0. Fixed for a state. */
  uint64_t (*encoded_bytes)(const tessera_compress_state* s);
  /* SUMMABLE and GATHER: encodes the bucket's `elements` gradients (this
   * rank's contribution) into `out` (encoded_bytes bytes). It may update
   * the state (error feedback keeps what the encoding lost). */
  tessera_status (*encode)(tessera_compress_state* s, const float* grads, void* out);
  /* Writes elements [offset, offset + count) of the decoded sum to `out`
   * (f32, overwritten). SUMMABLE: `in` holds the summed encoded elements of
   * that range only (num_encodings 1; after a reduce-scatter, this rank's
   * block). GATHER: `in` holds num_encodings (the world size) whole
   * encodings back to back, in rank order. */
  tessera_status (*decode)(tessera_compress_state* s, const void* in, int32_t num_encodings,
                           uint64_t offset, uint64_t count, float* out);
  /* COLLECTIVE: replaces `grads` (the bucket's `elements` values of this
   * rank) with the (approximate) sum over the ranks of `comm`. */
  tessera_status (*reduce)(tessera_compress_state* s, float* grads,
                           const tessera_compress_comm* comm);
} tessera_compressor_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_COMPRESSOR_H */
