/*
 * Tessera plugin ABI: models as sequences of units (model interface 2.0).
 *
 * A model is an ordered list of units (embedding, blocks, head). Each unit
 * declares its parameter tensors and runs forward and backward on parameter
 * and gradient buffers that the CALLER owns, so a strategy decides where
 * every parameter lives: replicated, sharded, gathered just in time and
 * freed again. Activations a unit keeps for its backward pass live in a
 * per-micro-batch context the caller creates; several may be alive at once
 * (pipeline schedules).
 *
 * The host implements this table for its built-in models (mlp, gpt) and
 * hands it to strategies inside tessera_strategy_env (strategy.h). Every
 * function is thread-safe for distinct contexts. A failing function returns
 * a status and leaves its message in host->last_error.
 */
#ifndef TESSERA_C_MODEL_H
#define TESSERA_C_MODEL_H

#include "tessera/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the model interface (this header's table and structs), carried
 * in a model plugin's descriptor and in tessera_strategy_env.
 *   1.x  the host's built-in models only (descriptor ABI 1.1-1.2)
 *   2.0  models as plugins
 * A host accepts model 2.x of any minor. */
#define TESSERA_MODEL_API_MAJOR 2
#define TESSERA_MODEL_API_MINOR 0

typedef struct tessera_model tessera_model;       /* a built model            */
typedef struct tessera_unit_ctx tessera_unit_ctx; /* one unit, one micro-batch */
typedef struct tessera_batch tessera_batch;       /* one micro-batch of data   */

/* How a parameter may be split for tensor parallelism, in terms of its
 * row-major storage: COLUMN splits the last dimension, ROW the first. */
typedef int32_t tessera_split_hint;
enum { TESSERA_SPLIT_NONE = 0, TESSERA_SPLIT_COLUMN = 1, TESSERA_SPLIT_ROW = 2 };

/* One declared parameter slot of a unit. A tied slot (owner differs from
 * the slot itself) has no storage of its own: the caller passes the owner's
 * parameter and gradient buffers in that slot, and gradients from both uses
 * add up in the owner's gradient. */
typedef struct tessera_param_info {
  uint32_t struct_size;     /* sizeof(tessera_param_info) of the caller       */
  tessera_split_hint split; /* TESSERA_SPLIT_*                                 */
  const char* name;         /* parameter name within the unit ("w", "bias")   */
  const char* full_name;    /* "<unit>.<param>" of the OWNER (checkpoint key) */
  const int64_t* shape;     /* ndim sizes, row-major                           */
  int32_t ndim;             /* 0 for a scalar                                  */
  int32_t owner_unit;       /* unit that owns the storage (== unit if untied) */
  int32_t owner_param;      /* its slot there                                  */
  int32_t reserved;         /* zero                                            */
  int64_t numel;            /* product of shape                                */
} tessera_param_info;

/* A row-major f32 matrix [rows, cols] owned by whoever produced it. */
typedef struct tessera_matrix {
  const float* data; /* NULL: empty */
  int64_t rows;
  int64_t cols;
} tessera_matrix;

typedef struct tessera_model_api {
  uint32_t struct_size; /* sizeof(tessera_model_api) of the implementer */
  uint32_t reserved;    /* zero                                          */

  int32_t (*num_units)(const tessera_model* model);
  /* Unique within the model ("embed", "block0", "head"); NULL if out of range. */
  const char* (*unit_name)(const tessera_model* model, int32_t unit);
  /* Number of parameter slots of `unit` (tied slots included); -1 if out of range. */
  int32_t (*num_params)(const tessera_model* model, int32_t unit);
  /* Fills *out (whose struct_size the caller set); pointers stay valid for
   * the model's lifetime. */
  tessera_status (*param_info)(const tessera_model* model, int32_t unit, int32_t param,
                               tessera_param_info* out);

  /* A fresh context for `unit`; destroy it with context_destroy. */
  tessera_status (*context_create)(const tessera_model* model, int32_t unit,
                                   tessera_unit_ctx** out);
  void (*context_destroy)(tessera_unit_ctx* ctx);
  /* Bytes the context currently holds (saved activations, outputs). */
  uint64_t (*context_bytes)(const tessera_unit_ctx* ctx);

  /* Forward pass of `unit` on `ctx`. `params` has num_params pointers
   * (declaration order, tied slots pointing at the owner's buffer). The
   * first unit reads the batch (x empty); the others read x, the previous
   * unit's output. The last unit returns a 1x1 matrix holding the sum of
   * its examples' losses times `loss_scale`. *out points into ctx and stays
   * valid until the next call on ctx. */
  tessera_status (*forward)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                            const float* const* params, const tessera_batch* batch,
                            tessera_matrix x, float loss_scale, tessera_matrix* out);

  /* Backward pass for the last forward on `ctx`: ADDS the parameter
   * gradients into `grads` (same slots as params) and sets *grad_input to
   * the gradient of x (empty for the first unit). grad_output has the
   * forward output's shape; for the last unit it may be empty (gradient 1). */
  tessera_status (*backward)(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                             const float* const* params, float* const* grads,
                             tessera_matrix grad_output, tessera_matrix* grad_input);

  /* Examples in a micro-batch and tokens per example (1 for non-sequence data). */
  int64_t (*batch_examples)(const tessera_batch* batch);
  int64_t (*batch_tokens_per_example)(const tessera_batch* batch);
} tessera_model_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_MODEL_H */
