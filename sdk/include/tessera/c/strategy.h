/*
 * Tessera plugin ABI: training strategies (strategy interface 2.0).
 *
 * A strategy library's descriptor has kind TESSERA_KIND_STRATEGY and `api`
 * pointing to a static tessera_strategy_api. One strategy object exists per
 * rank. It owns that rank's parameters, gradients and optimizer state (in
 * whatever layout it likes: replicated, sharded, gathered per unit) and runs
 * one training step at a time; the host owns everything else: the data, the
 * learning-rate schedule, logging, checkpoint files and the run loop.
 *
 * The host gives the strategy three tables it implements itself: the model
 * (model.h), the optimizer's update rule (below) and, for load/save, a state
 * reader or writer (below). Calls into them that fail return a status with
 * the message in host->last_error. The world communicator is a backend
 * communicator (backend.h); the strategy may split it, and must leave no
 * operation pending when a call returns.
 *
 * Checkpoint tensor names (the host maps them onto files):
 *   parameters       "<unit>.<param>"                 full shape of the parameter
 *   optimizer state  "optim.<unit>.<param>.<slot>"    same shape as the parameter
 * where <unit>.<param> is tessera_param_info.full_name (the owner's name).
 */
#ifndef TESSERA_C_STRATEGY_H
#define TESSERA_C_STRATEGY_H

#include "tessera/c/backend.h"
#include "tessera/c/common.h"
#include "tessera/c/compressor.h"
#include "tessera/c/host.h"
#include "tessera/c/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the strategy interface (this header's tables and structs),
 * carried in the descriptor's api_major/api_minor.
 *   1.0-1.2  the first strategy table (descriptor ABI 1.1-1.2)
 *   2.0      model interface 2 in the environment; descriptor ABI 1.3
 *   2.1      tessera_step_result ends with bubble and bubble_formula
 *   2.2      tessera_step_result ends with bubble_cpu
 *   2.3      estimate at the end of the table (strategy selection)
 *   2.4      a gradient compressor in the environment; tessera_step_result
 *            ends with comm_bytes_raw, compress_ns and comm_bytes_cross_node
 *   2.5      elastic recovery: tessera_step_result ends with world_changed,
 *            lost_ranks and restored_step; `world` at the end of the table
 *   2.6      dynamic loss scaling (run.precision = "f16"): the step's
 *            grad_scale in tessera_step_args and `skipped` in
 *            tessera_step_result, where both had a reserved field
 *   2.7      joining a running world: tessera_strategy_env ends with
 *            `joining`; world_changed also reports ranks admitted
 *   2.8      tessera_estimate_args.compression (where a reserved field
 *            was): the run's compressor kind, which an estimate refuses
 *            where the strategy's create would
 *   2.9      tessera_strategy_env ends with `micro_batches`, so a schedule
 *            that cannot run the step's micro-batches refuses in create
 * A host accepts strategy 2.x of any minor (an f16 run needs 2.6, a joining
 * rank 2.7). */
#define TESSERA_STRATEGY_API_MAJOR 2
#define TESSERA_STRATEGY_API_MINOR 9

typedef struct tessera_strategy tessera_strategy;

/* ---------------------------------------------------------------------------
 * Optimizer (implemented by the host): an element-wise update rule over flat
 * f32 ranges. Because the rule is element-wise, updating a tensor whole or as
 * any set of shards gives bit-identical results.
 * ------------------------------------------------------------------------- */
typedef struct tessera_optimizer tessera_optimizer;     /* the rule + hyper-parameters */
typedef struct tessera_optim_state tessera_optim_state; /* per-element state of a range */

typedef struct tessera_optimizer_api {
  uint32_t struct_size;
  uint32_t reserved;
  /* Rule name ("sgd", "momentum", "adam", "adamw"). */
  const char* (*name)(const tessera_optimizer* opt);
  /* f32 state values per parameter element (sgd 0, momentum 1, adam 2). */
  int32_t (*num_slots)(const tessera_optimizer* opt);
  /* "momentum_buffer", "exp_avg", "exp_avg_sq"; NULL if out of range. */
  const char* (*slot_name)(const tessera_optimizer* opt, int32_t slot);
  /* Zeroed state for `elements` parameters; the host counts its bytes as
   * TESSERA_MEM_OPTIMIZER of the calling thread's rank. On a CUDA run it is
   * CUDA managed memory of the rank's device (host code may still read and
   * write it through state_slot). */
  tessera_status (*state_create)(const tessera_optimizer* opt, uint64_t elements,
                                 tessera_optim_state** out);
  void (*state_destroy)(tessera_optim_state* state);
  /* The `elements` values of slot `slot` (NULL if out of range), writable,
   * e.g. to load them from a checkpoint. */
  float* (*state_slot)(tessera_optim_state* state, int32_t slot);
  /* Update `count` parameters in place: params[i] from grads[i] (already
   * reduced and clipped) and state element `state_offset + i`. `step` counts
   * updates from 1; `lr` is the rate for this step. On a CUDA run where the
   * parameters, gradients and state are all CUDA memory of one device, the
   * update runs there (done when the call returns); otherwise on the CPU;
   * both round alike. */
  tessera_status (*step)(const tessera_optimizer* opt, tessera_optim_state* state,
                         uint64_t state_offset, float* params, const float* grads, uint64_t count,
                         int64_t step, float lr);
} tessera_optimizer_api;

/* ---------------------------------------------------------------------------
 * Training state transfer (implemented by the host), for initial weights,
 * checkpoints and resume. A tensor is addressed by name and full shape; a
 * call moves one slice of it, so a strategy reads or writes exactly the
 * part it owns and the host reshards between world sizes and layouts. A
 * slice is either
 *   - flat: `count` consecutive elements of the tensor's row-major
 *     flattening, starting at element `offset` (box_offset and box_extent
 *     NULL), e.g. a shard of a padded flat buffer; or
 *   - a box: in every dimension d the indices [box_offset[d],
 *     box_offset[d] + box_extent[d]), its elements in row-major order of the
 *     box (the last dimension fastest), e.g. a column shard of a weight
 *     (box_offset {0, c0}, box_extent {rows, c1 - c0}). `offset` is then 0
 *     and `count` the product of the extents.
 * Either form reads back what the other wrote: the host assembles any slice
 * from whatever slices were saved.
 * ------------------------------------------------------------------------- */
typedef struct tessera_tensor_slice {
  uint32_t struct_size; /* sizeof(tessera_tensor_slice) of the caller */
  int32_t ndim;         /* of the full tensor                        */
  const char* name;     /* checkpoint name (see the top of the file) */
  const int64_t* shape; /* full tensor shape                          */
  uint64_t offset;      /* first element of a flat slice; 0 for a box */
  uint64_t count;       /* elements in the slice (may be 0)           */
  /* ---- strategy 2.0: boxes (a caller whose struct_size ends before them
   * passes a flat slice) ---- */
  /* Both NULL for a flat slice, or both ndim entries (>= 0,
   * inside the shape; an extent may be 0) for a box. */
  const int64_t* box_offset; /* first index of the box per dimension  */
  const int64_t* box_extent; /* indices of the box per dimension      */
} tessera_tensor_slice;

typedef struct tessera_state_reader {
  uint32_t struct_size;
  uint32_t reserved;
  void* ctx;
  /* 1 if the source holds tensor `name`, else 0. Parameters are always
   * present; optimizer state is absent when training starts fresh (the
   * strategy then keeps its zeroed state). */
  int32_t (*has)(void* ctx, const char* name);
  /* Copies the slice (flat or box) into `out` (f32, slice->count values).
   * Fails with INVALID_ARGUMENT when the tensor is missing, its shape
   * differs from slice->shape or the slice is not inside it. */
  tessera_status (*read)(void* ctx, const tessera_tensor_slice* slice, float* out);
} tessera_state_reader;

/* Bits of tessera_state_writer.flags. */
enum {
  /* Every rank writes everything it holds, replicas included (the host
   * checks that replicas agree bit for bit). Without it, across all ranks
   * of the world every element of every tensor is written exactly once.
   * The host sets it only where it compares the ranks' states: the final
   * state that RunOptions::collect_final_state asks run_training() for
   * (tests and embedders checking that replicas agree). Checkpoints, full
   * and sharded, are always saved without it. */
  TESSERA_STATE_ALL_REPLICAS = 1u << 0
};

typedef struct tessera_state_writer {
  uint32_t struct_size;
  uint32_t flags; /* TESSERA_STATE_* */
  void* ctx;
  /* Hands over a slice (f32); the host copies it before returning. */
  tessera_status (*write)(void* ctx, const tessera_tensor_slice* slice, const float* data);
  /* ---- strategy 2.0: read only when struct_size covers it (a host that
   * predates it passes a smaller struct) ---- */
  /* The step whose result is being saved: the update number
   * (tessera_step_args.step) of the last completed step, the checkpoint's
   * step; after a resume with no step run yet, the resumed step; 0 before
   * the first step of a fresh run. */
  int64_t step;
} tessera_state_writer;

/* ---------------------------------------------------------------------------
 * The strategy.
 * ------------------------------------------------------------------------- */

/* What a rank's strategy works with. Host-owned; outlives the strategy. */
typedef struct tessera_strategy_env {
  uint32_t struct_size;
  int32_t rank;       /* in the world                     */
  int32_t world_size; /* ranks in the world               */
  /* Version of the model interface `model_api` implements
   * (TESSERA_MODEL_API_MAJOR.MINOR of the model plugin). */
  uint16_t model_api_major;
  uint16_t model_api_minor;
  const tessera_backend_api* backend; /* the world's backend table          */
  tessera_comm* world;                /* this rank's world communicator     */
  const tessera_model_api* model_api;
  const tessera_model* model;
  const tessera_optimizer_api* optim_api;
  const tessera_optimizer* optimizer;
  /* ---- strategy 2.4: read only when struct_size covers them ---- */
  /* The gradient compressor of [compression] for this rank (NULL: none).
   * A strategy that is given one must use it in its gradient reduction or
   * fail `create` with a message naming it; the host refuses compression
   * for a strategy older than 2.4. */
  const tessera_compressor_api* compressor_api;
  tessera_compressor* compressor;
  const char* compressor_name; /* the compressor plugin's name; NULL with none */
  /* ---- strategy 2.7 ---- */
  /* 1: this process joins a world that is already running (TESSERA_JOIN=1);
   * `world` is a group of this rank alone. The strategy must grow it into
   * the running world through the backend's comm_grow at its first step
   * and report world_changed with the running world's step; a strategy that
   * cannot must fail `create` (the SDK does, unless the strategy asks
   * StrategyEnv::joining()). */
  int32_t joining;
  /* ---- strategy 2.9 ---- */
  int32_t reserved; /* zero */
  /* Micro-batches the host passes every step (data.micro_batches, >= 1);
   * 0 from an older host. A strategy whose schedule cannot run that many
   * should fail `create` naming data.micro_batches, before the host loads
   * any state; it must still check the count each step is given. */
  int64_t micro_batches;
} tessera_strategy_env;

/* How the host must feed data to this rank, set by `create`: ranks with the
 * same data_rank train on the same examples (e.g. the stages of one
 * pipeline); the global batch is split over data_size slices. */
typedef struct tessera_strategy_layout {
  uint32_t struct_size;
  int32_t data_rank; /* 0 .. data_size-1                     */
  int32_t data_size; /* data-parallel degree, >= 1            */
} tessera_strategy_layout;

/* One step. loss_scales[i] is the loss_scale passed to the last unit's
 * forward for micro-batch i: the model returns its SUMMED per-example (or
 * per-token) loss times it, so with 1/global_examples (1/global_tokens for
 * sequence models) the gradients summed over micro-batches and ranks are
 * those of the global mean loss, and no rescaling follows.
 *
 * So each rank's gradient is its SHARE of the global mean's gradient, not
 * the gradient of its own mean loss: it is about 1/data_size of the
 * latter. A strategy that sums gradients over the data-parallel ranks
 * (allreduce, reduce-scatter) uses them as they are; one that updates
 * from a rank's gradient alone (local SGD, asynchronous updates) must
 * rescale it: by data_size, so that the mean over ranks of the rescaled
 * gradients is exactly the global mean's gradient (also when the batch
 * does not split evenly), or by global_examples / local_examples (tokens
 * for sequence models) for the exact mean over this rank's examples. */
typedef struct tessera_step_args {
  uint32_t struct_size;
  int32_t num_micro;                         /* micro-batches this step, >= 1   */
  int64_t step;                              /* update number, from 1           */
  const tessera_batch* const* micro_batches; /* this rank's, in order           */
  const float* loss_scales;                  /* per micro-batch: the model's loss_scale */
  float lr;                                  /* learning rate of this step      */
  /* Strategy 2.6: the loss scale S of this step under dynamic loss scaling
   * (run.precision = "f16"). loss_scales already include it, so the
   * gradients come out S times the true ones: the strategy takes their
   * global sum of squares, and when it is not finite (16-bit overflow)
   * skips the update and reports `skipped`; otherwise it divides them by S
   * (with the clip factor) before the update and reports the true norm.
   * 0 or 1: no scaling (a host before 2.6 passes 0). */
  float grad_scale;
  double max_grad_norm; /* clip the global norm; <= 0: off */
  /* ---- strategy 2.0: read only when struct_size covers them (a host
   * that predates them passes a smaller struct; the SDK's copy then reads
   * them as 0) ---- */
  /* Examples in this rank's micro-batches this step (their sum). */
  int64_t local_examples;
  /* Examples in this step's global batch: every data-parallel slice once
   * (ranks sharing a data rank share their examples). */
  int64_t global_examples;
  /* Sequence models: the tokens of those examples (examples x seq_len),
   * the count the loss is a mean over. 0 for models that are not
   * sequence models. */
  int64_t local_tokens;
  int64_t global_tokens;
} tessera_step_args;

typedef struct tessera_step_result {
  uint32_t struct_size;
  /* Strategy 2.6: 1 when the step's scaled gradients were not finite and
   * no parameter was updated (see grad_scale); 0 otherwise. The loss is
   * still this rank's share of the step's loss (scaled by grad_scale, which
   * the host divides out); grad_norm is then 0. */
  uint32_t skipped;
  /* This rank's share of the global mean loss: the host sums it over all
   * ranks of the world (ranks that compute a copy of a loss another rank
   * reports, e.g. tensor-parallel peers, report 0). */
  double loss;
  /* The global gradient norm before clipping. The host takes the MAX over
   * the ranks of the world (no sum, no mean): ranks that agree report the
   * same value, and a strategy whose ranks clip their own gradients (local
   * updates) reports each rank's own norm and the log shows the largest. */
  double grad_norm;
  int64_t comm_wait_ns; /* time this rank was blocked on communication     */
  int64_t comm_bytes;   /* bytes this rank sent, by the algorithms' volume  */
  /* Strategy 2.1, pipelines only (both 0 otherwise, and from an older
   * plugin, whose result ends before them). bubble: this rank's measured
   * idle share of the pipeline schedule by the wall clock, 1 - busy /
   * span in [0, 1], where busy is the compute of its forward and backward
   * units and span the longest time any stage of its pipeline took from
   * the schedule's start to its end; the host logs the mean over the
   * ranks. bubble_formula: the schedule's ideal bubble fraction (e.g.
   * (p-1)/(m+p-1)); the host logs the largest. */
  double bubble;
  double bubble_formula;
  /* Strategy 2.2, pipelines only: the same share on the schedule's own
   * clock, as if every stage had a processor to itself: each unit's
   * compute counts its thread's CPU time, and work that needs a
   * neighbour's message starts no earlier than the neighbour's clock when
   * it sent it (transfers take no time). The host logs the mean. */
  double bubble_cpu;
  /* Strategy 2.4: comm_bytes_raw is what this rank's communication would
   * have sent without gradient compression (equal to comm_bytes without
   * it), by the same algorithms' volume; compress_ns the time spent in the
   * compressor's encode, decode and reduce. */
  int64_t comm_bytes_raw;
  int64_t compress_ns;
  /* Strategy 2.4: of comm_bytes, the bytes this rank sent across nodes on
   * the inter-node communicator of a hierarchical reduction (ddp and zero1
   * with hierarchy = "node"); 0 otherwise. The host logs the largest. */
  int64_t comm_bytes_cross_node;
  /* Strategy 2.5, elastic recovery (all 0 otherwise). world_changed = 1:
   * ranks were lost during this call, the strategy re-formed its world of
   * the survivors and restored the training state after update number
   * restored_step: before the step asked for (it did not happen), or that
   * step itself (it happened, but the strategy's work after it failed; its
   * result is lost). The other fields of the result are then meaningless. The host asks
   * `world` for the new world, feeds the data of the new layout and goes
   * on with step restored_step + 1. lost_ranks: how many left.
   * Strategy 2.7: also when, before the step asked for, the strategy
   * admitted ranks that joined (lost_ranks 0, restored_step the step
   * before; the world is larger), and on a joining rank at its first step
   * (restored_step: the running world's last step, whatever the step asked
   * for). */
  int32_t world_changed;
  int32_t lost_ranks;
  int64_t restored_step;
} tessera_step_result;

/* ---------------------------------------------------------------------------
 * Estimates (strategy 2.3), for strategy selection: what a strategy would
 * need and send per rank for a model it is given only as a description, so
 * a selector can compare strategies without building any of them.
 * ------------------------------------------------------------------------- */

/* One unit of a model description: tessera_unit_cost, the unit's flags and
 * how its parameters split. Per-example values are for one example (a
 * whole sequence for sequence models). */
typedef struct tessera_unit_desc {
  uint32_t struct_size;             /* sizeof(tessera_unit_desc) of the host */
  uint32_t flags;                   /* TESSERA_UNIT_* of the unit             */
  const char* name;                 /* the unit's name ("block0")             */
  int64_t params;                   /* elements of the unit's own (untied) parameters          */
  int64_t split_params;             /* of those, in tensors split COLUMN or ROW (the rest whole) */
  int64_t tied_params;              /* elements of tied slots: another unit's parameters it uses  */
  int32_t num_tensors;              /* the unit's own (untied) parameter tensors                  */
  int32_t tied_unit;                /* the unit owning its tied slots' storage; -1: none         */
  double forward_flops;             /* per example (tessera_unit_cost)               */
  double backward_flops;            /* per example                                    */
  double activation_bytes;          /* per example, kept for backward                 */
  double output_bytes;              /* per example, the forward output; 0 if unknown  */
  double split_activation_bytes;    /* per example (model 2.2; 0 from older models)   */
  double sequence_activation_bytes; /* per example (model 2.2; 0 from older models)   */
} tessera_unit_desc;

/* A model and the batch it trains on, as strategies estimate it. */
typedef struct tessera_model_desc {
  uint32_t struct_size; /* sizeof(tessera_model_desc) of the host */
  int32_t num_units;
  const tessera_unit_desc* units; /* num_units, in model order */
  const char* name;               /* the model plugin's name, or a label */
  int64_t seq_len;                /* tokens per example; 0 for feature models */
  int64_t global_batch;           /* examples per step, all data-parallel ranks */
  int64_t micro_batches;          /* per data-parallel rank and step, >= 1      */
  int32_t optimizer_slots;        /* f32 state values per parameter (adam 2)    */
  int32_t reserved;               /* zero                                       */
  /* The built model, when there is one (NULL for a description alone):
   * a strategy may ask it what a description cannot say, e.g.
   * check_tensor_parallel. */
  const tessera_model_api* model_api;
  const tessera_model* model;
} tessera_model_desc;

typedef struct tessera_estimate_args {
  uint32_t struct_size;
  int32_t world_size;     /* ranks in the world                        */
  int32_t ranks_per_node; /* ranks sharing a node (1 .. world_size)    */
  /* Strategy 2.8 (a reserved zero before): 0 when the run has no
   * [compression]; else 1 + the compressor's tessera_compress_kind, for
   * the estimate to refuse a compressor its create would refuse. */
  int32_t compression;
  const tessera_model_desc* model;
} tessera_estimate_args;

/* Traffic of one communication axis (a group kind of the strategy: "data",
 * "pipeline", "tensor"), per rank and step. */
#define TESSERA_ESTIMATE_MAX_AXES 4
typedef struct tessera_axis_traffic {
  const char* name;   /* static string; NULL for an unused entry            */
  int32_t group_size; /* ranks in one group of this axis                    */
  int32_t reserved;   /* zero                                               */
  int64_t bytes;      /* bytes one rank sends per step, by algorithm volume */
  int64_t messages;   /* collective calls (or sends) per step, for latency  */
} tessera_axis_traffic;

typedef struct tessera_estimate {
  uint32_t struct_size; /* sizeof(tessera_estimate) of the caller */
  int32_t data_size;    /* data-parallel degree the strategy would report */
  /* Peak bytes per rank by TESSERA_MEM_* category (the largest rank's), as
   * the host's memory tracking would count them. */
  int64_t memory[TESSERA_MEM_CATEGORY_COUNT];
  /* Peak of the sum over categories on the largest rank (<= the sum of the
   * peaks, since e.g. activations and communication staging need not peak
   * together). */
  int64_t memory_total;
  int32_t num_axes; /* entries used in `axes` */
  int32_t reserved;
  tessera_axis_traffic axes[TESSERA_ESTIMATE_MAX_AXES];
  /* Forward and backward FLOPs per step of the busiest rank. */
  double compute_flops;
  /* Idle share of the step by the schedule's formula (pipelines), else 0:
   * the step takes compute / (1 - bubble). */
  double bubble;
} tessera_estimate;

/* A strategy's world after it changed (strategy 2.5, `world`). */
typedef struct tessera_strategy_world {
  uint32_t struct_size; /* sizeof(tessera_strategy_world) of the caller */
  int32_t rank;         /* this rank in the new world                   */
  int32_t world_size;   /* ranks in the new world                       */
  int32_t reserved;     /* zero                                         */
  /* The new world communicator, of the env's backend table. Owned by the
   * strategy; valid until the next change or until it is destroyed. The
   * host runs its own collectives (log reductions, checkpoints) on it. */
  tessera_comm* comm;
  tessera_strategy_layout layout; /* how to feed data from now on */
  /* What happened, for the log: "rank 2 lost (recv ...: connection
   * closed); world 4 -> 3, state of step 6 from the survivors' memory".
   * Owned by the strategy, valid as `comm`. */
  const char* reason;
} tessera_strategy_world;

typedef struct tessera_strategy_api {
  uint32_t struct_size;
  uint32_t flags; /* zero */

  /* Called once in the launching process before any rank starts: fails
   * with INVALID_ARGUMENT (and a message saying what would work) when the
   * strategy cannot run on `world_size` ranks with these options. The
   * host reports it as "strategy '<name>' refused its options or world
   * size (<N> ranks): <message>"; the message is for the user, so it names
   * the option or the world size, not a source location (the C++ SDK
   * drops TESSERA_CHECK's file:line from check()'s errors unless the
   * status is INTERNAL). */
  tessera_status (*check)(const tessera_host_api* host, const tessera_options* opts,
                          int32_t world_size);

  /* Collective over env->world. Allocates this rank's state (memory
   * reported through host->mem_track) and fills *layout. Parameters are
   * not initialised until `load`. */
  tessera_status (*create)(const tessera_host_api* host, const tessera_options* opts,
                           const tessera_strategy_env* env, tessera_strategy** out,
                           tessera_strategy_layout* layout);
  void (*destroy)(tessera_strategy* strategy);

  /* Collective. Reads the parameters (and optimizer state, when the reader
   * has it) of the part this rank owns. */
  tessera_status (*load)(tessera_strategy* strategy, const tessera_state_reader* reader);

  /* Collective. One training step: forward and backward over the
   * micro-batches, gradient reduction, clipping, optimizer update. */
  tessera_status (*step)(tessera_strategy* strategy, const tessera_step_args* args,
                         tessera_step_result* result);

  /* Collective. Writes the parameters and optimizer state this rank owns
   * (all it holds when writer->flags has TESSERA_STATE_ALL_REPLICAS);
   * writer->step says after which step. */
  tessera_status (*save)(tessera_strategy* strategy, const tessera_state_writer* writer);

  /* ---- strategy 2.3: absent from older tables (see struct_size); may be
   * NULL, and a strategy without it takes no part in selection ---- */
  /* Fills *out (whose struct_size the caller set) with what this strategy
   * would hold and send per rank, with these options, on args->world_size
   * ranks, for the model description. Needs no communicator and allocates
   * nothing that the host tracks. Fails with INVALID_ARGUMENT (message for
   * the user, as `check`'s) when the strategy cannot run that model on that
   * world with these options, e.g. stages more than units. */
  tessera_status (*estimate)(const tessera_host_api* host, const tessera_options* opts,
                             const tessera_estimate_args* args, tessera_estimate* out);

  /* ---- strategy 2.5: absent from older tables (see struct_size); may be
   * NULL for a strategy whose world never changes ---- */
  /* After a step that reported world_changed: fills *out (whose
   * struct_size the caller set) with the new world. Not collective. */
  tessera_status (*world)(tessera_strategy* strategy, tessera_strategy_world* out);
} tessera_strategy_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_STRATEGY_H */
