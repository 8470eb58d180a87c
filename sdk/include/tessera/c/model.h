/*
 * Tessera plugin ABI: models as sequences of units (model interface 2.0).
 *
 * A model is an ordered list of units (embedding, blocks, head). Each unit
 * declares its parameter tensors and runs forward and backward on parameter
 * and gradient buffers that the CALLER owns, so a strategy decides where
 * every parameter lives: replicated, sharded, gathered just in time and
 * freed again, or split across a tensor-parallel group. Activations a unit
 * keeps for its backward pass live in a per-micro-batch context the caller
 * creates; several may be alive at once (pipeline schedules).
 *
 * The table is implemented by a model (the host's built-in mlp and gpt, or a
 * model plugin of kind TESSERA_KIND_MODEL whose descriptor's `api` points to
 * it) and handed to strategies inside tessera_strategy_env (strategy.h).
 * The micro-batch is host-owned; a model reads it through the host's batch
 * accessors (tessera_host_api.batch_tensor, host.h). Every function is
 * thread-safe for distinct contexts. A failing function returns a status and
 * leaves its message with the host (set_error).
 */
#ifndef TESSERA_C_MODEL_H
#define TESSERA_C_MODEL_H

#include "tessera/c/backend.h"
#include "tessera/c/common.h"
#include "tessera/c/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the model interface (this header's table and structs), carried
 * in a model plugin's descriptor and in tessera_strategy_env.
 *   1.x  the host's built-in models only (descriptor ABI 1.1-1.2)
 *   2.0  create/destroy from options, data spec, init, per-unit flags and
 *        cost, split declarations with blocks, tensor-parallel groups,
 *        backward split into input and weight halves, host batch accessors
 *   2.1  sequence parallelism: tessera_tp_group.flags (TESSERA_TP_SEQUENCE)
 *        and the unit flag TESSERA_UNIT_SEQUENCE_PARALLEL (the field was a
 *        zero `reserved` before, so 2.0 callers never ask for it);
 *        check_tensor_parallel at the end of the table
 *   2.2  tessera_unit_cost ends with output_bytes, split_activation_bytes
 *        and sequence_activation_bytes (for strategy selection)
 * A host accepts model 2.x of any minor. */
#define TESSERA_MODEL_API_MAJOR 2
#define TESSERA_MODEL_API_MINOR 2

typedef struct tessera_model tessera_model;       /* a built model            */
typedef struct tessera_unit_ctx tessera_unit_ctx; /* one unit, one micro-batch */

/* How a parameter is split for tensor parallelism, in terms of its
 * row-major storage: COLUMN splits the last dimension, ROW the first,
 * REPLICATED keeps it whole on every rank of the group. A 1-D parameter
 * marked COLUMN (a bias) follows the column split of its layer's weight. */
typedef int32_t tessera_split_kind;
enum { TESSERA_SPLIT_REPLICATED = 0, TESSERA_SPLIT_COLUMN = 1, TESSERA_SPLIT_ROW = 2 };

/* One declared parameter slot of a unit. A tied slot (owner differs from
 * the slot itself) has no storage of its own: the caller passes the owner's
 * parameter and gradient buffers in that slot, and gradients from both uses
 * add up in the owner's gradient. */
typedef struct tessera_param_info {
  uint32_t struct_size;     /* sizeof(tessera_param_info) of the caller       */
  tessera_split_kind split; /* TESSERA_SPLIT_*                                 */
  const char* name;         /* parameter name within the unit ("w", "bias")   */
  const char* full_name;    /* "<unit>.<param>" of the OWNER (checkpoint key) */
  const int64_t* shape;     /* ndim sizes, row-major, of the whole tensor     */
  int32_t ndim;             /* 0 for a scalar                                  */
  int32_t owner_unit;       /* unit that owns the storage (== unit if untied) */
  int32_t owner_param;      /* its slot there                                  */
  /* The split dimension is this many equal blocks laid side by side (a fused
   * q|k|v weight: 3), each split separately so a rank holds its part of
   * every block. 1 for an ordinary tensor. */
  int32_t split_blocks;
  int64_t numel; /* product of shape */
} tessera_param_info;

/* A row-major f32 matrix [rows, cols] owned by whoever produced it. */
typedef struct tessera_matrix {
  const float* data; /* NULL: empty */
  int64_t rows;
  int64_t cols;
} tessera_matrix;

/* What the model reads from a micro-batch, so the host can build the data
 * pipeline: token sequences, or feature vectors with class targets. */
typedef int32_t tessera_data_kind;
enum {
  TESSERA_DATA_SEQUENCES = 0, /* tensors "tokens", "targets": i32 [examples, seq_len] */
  TESSERA_DATA_FEATURES = 1   /* "features" f32 [examples, features], "targets" i32 [examples] */
};

typedef struct tessera_data_spec {
  uint32_t struct_size;   /* sizeof(tessera_data_spec) of the caller */
  tessera_data_kind kind; /* TESSERA_DATA_*                          */
  int64_t seq_len;        /* SEQUENCES: tokens per example           */
  int64_t vocab;          /* SEQUENCES: token ids are in [0, vocab)  */
  int64_t features;       /* FEATURES: values per example            */
  int64_t classes;        /* FEATURES: targets are in [0, classes)   */
} tessera_data_spec;

/* Estimated cost of one unit per example, for pipeline stage balancing and
 * strategy selection. Estimates, not measurements: a GEMM of m×k by k×n
 * counts 2·m·k·n FLOPs. */
typedef struct tessera_unit_cost {
  uint32_t struct_size;    /* sizeof(tessera_unit_cost) of the caller          */
  uint32_t reserved;       /* zero                                              */
  double forward_flops;    /* per example                                   */
  double backward_flops;   /* per example, input and weight halves together */
  double activation_bytes; /* kept in the context for backward, per example */
  int64_t params;          /* elements of the unit's own (untied) parameters */
  /* ---- 2.2: filled only when the caller's struct_size covers them (a
   * 2.0/2.1 model leaves the caller's zeros) ---- */
  /* Bytes per example of the forward output, the activation the next unit
   * reads (what a pipeline sends between stages); 0 for the last unit. */
  double output_bytes;
  /* Of activation_bytes, the bytes per example that a tensor-parallel group
   * of p ranks divides among its ranks in both modes (each rank holds 1/p:
   * the column/row pairs' inner activations, per-head attention). */
  double split_activation_bytes;
  /* Of activation_bytes, the bytes per example divided among the group only
   * in sequence mode (TESSERA_TP_SEQUENCE: the token rows outside the
   * pairs) and whole on every rank in tensor mode. The rest of
   * activation_bytes is whole on every rank of the group in both modes. */
  double sequence_activation_bytes;
} tessera_unit_cost;

/* Bits of unit_flags: what a unit can do beyond forward and backward. */
enum {
  /* backward_input and backward_weight work (zero-bubble schedules). */
  TESSERA_UNIT_SPLIT_BACKWARD = 1u << 0,
  /* forward/backward accept a tensor-parallel group of size > 1. */
  TESSERA_UNIT_TENSOR_PARALLEL = 1u << 1,
  /* ... and a group with TESSERA_TP_SEQUENCE (model interface 2.1). */
  TESSERA_UNIT_SEQUENCE_PARALLEL = 1u << 2
};

/* Bits of tessera_tp_group.flags. */
enum {
  /* Sequence parallelism (Korthikanti et al. 2022): outside its column/row
   * pairs a unit works on this rank's slice of the token rows only, and the
   * activations passed between units are such slices. For token sequences
   * ([B, T] batches, activations [B*T, w]) rank r holds positions
   * [r*T/p, (r+1)*T/p) of every example, ordered by example then position
   * (a [B*T/p, w] matrix); for feature batches ([B, F], one row per
   * example) it holds examples [r*B/p, (r+1)*B/p). What a pair's allreduce
   * did becomes an allgather of the slices before the column-parallel
   * product and a reduce-scatter of the row-parallel partial sums after it.
   * A REPLICATED parameter's gradient is then this rank's part (from its
   * slice); the CALLER sums those over the group. The first unit reads the
   * whole batch and the last returns the whole loss on every rank, as
   * without the flag. */
  TESSERA_TP_SEQUENCE = 1u << 0
};

/* A tensor-parallel group as a unit sees it: the unit computes on its
 * shards of the parameters (split as param_info declares) and calls the
 * communicator itself, from inside forward/backward, through `backend`. */
typedef struct tessera_tp_group {
  uint32_t struct_size; /* sizeof(tessera_tp_group) of the caller */
  int32_t rank;         /* in the group, 0 .. size-1              */
  int32_t size;         /* ranks in the group, >= 1               */
  uint32_t flags;       /* TESSERA_TP_* bits (2.1; zero in 2.0)   */
  const tessera_backend_api* backend;
  tessera_comm* comm;
} tessera_tp_group;

/* Everything a unit call reads besides its context and activations. */
typedef struct tessera_unit_call {
  uint32_t struct_size; /* sizeof(tessera_unit_call) of the caller */
  /* Last unit's forward: it returns its SUMMED per-example (or per-token)
   * loss times loss_scale. */
  float loss_scale;
  /* The micro-batch (read by the first unit's forward and the last unit). */
  const tessera_batch* batch;
  /* num_params pointers in declaration order (tied slots point at the
   * owner's buffer): whole tensors, or this rank's shards under `tp`. */
  const float* const* params;
  /* Same slots, for backward and backward_weight (NULL for forward and
   * backward_input); gradients are ADDED into them. */
  float* const* grads;
  /* NULL, or a group of size 1: whole parameters. Size > 1 needs
   * TESSERA_UNIT_TENSOR_PARALLEL. */
  const tessera_tp_group* tp;
} tessera_unit_call;

typedef struct tessera_model_api {
  uint32_t struct_size; /* sizeof(tessera_model_api) of the implementer */
  uint32_t flags;       /* zero                                          */

  /* Builds the model from its validated options (the [model] table). The
   * host keeps `host` alive for the model's lifetime. Throw nothing; fail
   * with INVALID_ARGUMENT naming the key for a bad value. */
  tessera_status (*create)(const tessera_host_api* host, const tessera_options* opts,
                           tessera_model** out);
  void (*destroy)(tessera_model* model);
  /* What the model reads from a micro-batch. */
  tessera_status (*data_spec)(const tessera_model* model, tessera_data_spec* out);

  int32_t (*num_units)(const tessera_model* model);
  /* Unique within the model ("embed", "block0", "head"); NULL if out of range. */
  const char* (*unit_name)(const tessera_model* model, int32_t unit);
  /* TESSERA_UNIT_* bits of `unit` (0 if out of range). */
  uint32_t (*unit_flags)(const tessera_model* model, int32_t unit);
  /* Number of parameter slots of `unit` (tied slots included); -1 if out of range. */
  int32_t (*num_params)(const tessera_model* model, int32_t unit);
  /* Fills *out (whose struct_size the caller set); pointers stay valid for
   * the model's lifetime. */
  tessera_status (*param_info)(const tessera_model* model, int32_t unit, int32_t param,
                               tessera_param_info* out);
  /* Fills *out (whose struct_size the caller set). */
  tessera_status (*unit_cost)(const tessera_model* model, int32_t unit, tessera_unit_cost* out);
  /* Writes initial values into the unit's untied parameters (whole
   * tensors; tied slots are skipped): a pure function of `seed`, the unit's
   * name and each parameter's name. */
  tessera_status (*init_params)(const tessera_model* model, int32_t unit, float* const* params,
                                uint64_t seed);

  /* A fresh context for `unit`; destroy it with context_destroy. */
  tessera_status (*context_create)(const tessera_model* model, int32_t unit,
                                   tessera_unit_ctx** out);
  void (*context_destroy)(tessera_unit_ctx* ctx);
  /* Bytes the context currently holds (saved activations, outputs). */
  uint64_t (*context_bytes)(const tessera_unit_ctx* ctx);

  /* Forward pass of `unit` on `ctx`. The first unit reads the batch (x
   * empty); the others read x, the previous unit's output. The last unit
   * returns a 1x1 matrix holding the sum of its examples' losses times
   * call->loss_scale. *out points into ctx and stays valid until the next
   * call on ctx. */
  tessera_status (*forward)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                            const tessera_unit_call* call, tessera_matrix x, tessera_matrix* out);

  /* Backward pass for the last forward on `ctx`: ADDS the parameter
   * gradients into call->grads and sets *grad_input to the gradient of x
   * (empty for the first unit). grad_output has the forward output's shape;
   * for the last unit it may be empty (gradient 1) or 1x1. */
  tessera_status (*backward)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                             const tessera_unit_call* call, tessera_matrix grad_output,
                             tessera_matrix* grad_input);

  /* The two halves of backward, for units with TESSERA_UNIT_SPLIT_BACKWARD
   * (others fail with UNSUPPORTED naming the unit): backward_input sets
   * *grad_input and keeps what the weight half needs in ctx;
   * backward_weight then ADDS the parameter gradients. Together they give
   * the same gradients as backward. */
  tessera_status (*backward_input)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                                   const tessera_unit_call* call, tessera_matrix grad_output,
                                   tessera_matrix* grad_input);
  tessera_status (*backward_weight)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                                    const tessera_unit_call* call);

  /* 2.1 (absent from a 2.0 table, see struct_size; may be NULL): whether
   * the model can run in tensor-parallel groups of `size` ranks with
   * `flags` (TESSERA_TP_*), asked before training. Fails with
   * INVALID_ARGUMENT naming the model option (key and value) the group
   * cannot split, e.g. heads that `size` does not divide. Needs no
   * communicator. */
  tessera_status (*check_tensor_parallel)(const tessera_model* model, int32_t size, uint32_t flags);
} tessera_model_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_MODEL_H */
