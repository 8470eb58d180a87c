/*
 * Tessera plugin ABI: strategy selectors (selector interface 1.0).
 *
 * A selector library's descriptor has kind TESSERA_KIND_SELECTOR and `api`
 * pointing to a static tessera_selector_api. The host runs a selector when
 * the configuration says `[strategy] name = "auto"` (the selector `auto`,
 * or the one `strategy.options.selector` names) and for `tessera select`.
 * The selector sees the model as a description (strategy.h), the world,
 * the memory budget per rank, the backend, and the installed strategies
 * with their declared options. It proposes candidates (a strategy and the
 * options of its [strategy.options] table), has the host estimate each
 * (the strategy's own `estimate`), may run a probe or short trials through
 * the host, reports every candidate as a row of its ranking, and marks one
 * as its choice.
 *
 * The host runs the selector once, in one process (rank 0's with process
 * ranks), and hands the choice to every rank, so all ranks train the same
 * strategy whatever the probes measured.
 */
#ifndef TESSERA_C_SELECTOR_H
#define TESSERA_C_SELECTOR_H

#include "tessera/c/common.h"
#include "tessera/c/host.h"
#include "tessera/c/plugin.h"
#include "tessera/c/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the selector interface (this header's tables and structs),
 * carried in the descriptor's api_major/api_minor.
 *   1.0  select, with estimate, backend probe, compute rate, trial and
 *        report through the host
 * A host accepts selector 1.x of any minor. */
#define TESSERA_SELECTOR_API_MAJOR 1
#define TESSERA_SELECTOR_API_MINOR 0

/* One installed strategy as a selector sees it. */
typedef struct tessera_strategy_info {
  const char* name;                   /* plugin name ("zero2")                       */
  const char* summary;                /* its descriptor's summary                    */
  const tessera_option_decl* options; /* declared options (may be NULL)              */
  uint32_t num_options;
  int32_t can_estimate; /* 1 if its table has `estimate` (strategy 2.3) */
} tessera_strategy_info;

/* What the backend offers, from its properties and an optional probe. */
typedef struct tessera_backend_props {
  uint32_t struct_size;       /* sizeof(tessera_backend_props) of the caller     */
  tessera_device_type device; /* where the backend's buffers live              */
  const char* name;           /* the backend plugin's name                       */
  int32_t thread_ranks;       /* 1 when its ranks are threads of one process     */
  int32_t probed;             /* 1 when the values below were measured           */
  /* Bus bandwidth of an allreduce over the world, bytes per second (the
   * algorithm's bytes per rank over the time), and the time of a small
   * allreduce, seconds. Assumed values when probed is 0. */
  double bandwidth;
  double latency;
  const char* source; /* how the values were obtained, one line for the log */
} tessera_backend_props;

/* Bits of tessera_selection_row.flags. */
enum {
  TESSERA_ROW_FITS = 1u << 0,      /* its memory per rank is within the budget     */
  TESSERA_ROW_CHOSEN = 1u << 1,    /* the selector's choice (exactly one row)      */
  TESSERA_ROW_ESTIMATED = 1u << 2, /* `estimate` holds the strategy's estimate     */
  TESSERA_ROW_MEASURED = 1u << 3   /* measured_seconds holds a trial's step time   */
};

/* One candidate of the ranking, as the selector reports it. */
typedef struct tessera_selection_row {
  uint32_t struct_size;      /* sizeof(tessera_selection_row) of the selector */
  uint32_t flags;            /* TESSERA_ROW_*                                  */
  const char* strategy;      /* plugin name                                    */
  const char* options;       /* its [strategy.options] as TOML key = value pairs
                                separated by ", " ("stages = 2, schedule = \"1f1b\""),
                                "" for the defaults */
  tessera_estimate estimate; /* valid with TESSERA_ROW_ESTIMATED */
  double step_seconds;       /* predicted step time; < 0 unknown   */
  double compute_seconds;    /* its parts: compute, communication, bubble */
  double comm_seconds;
  double bubble_seconds;
  double measured_seconds; /* valid with TESSERA_ROW_MEASURED */
  /* Why it was chosen, rejected or ranked lower, one line for the log
   * ("28.3 MiB per rank > budget 20.0 MiB"). */
  const char* reason;
} tessera_selection_row;

/* What a selector works with; host-owned, valid during `select`. */
typedef struct tessera_select_env {
  uint32_t struct_size;
  int32_t world_size;     /* ranks the run will have                         */
  int32_t ranks_per_node; /* ranks sharing a node's memory and links         */
  int32_t num_strategies;
  int64_t memory_budget;     /* bytes per rank                              */
  const char* budget_source; /* how it was obtained, e.g. "run.memory_per_rank" */
  const tessera_model_desc* model;
  const tessera_strategy_info* strategies; /* installed, by name          */
  void* ctx;                               /* first argument of the calls below */

  /* Estimates a candidate: checks `options` (the row's syntax) against the
   * strategy's declared options and its world size, then calls its
   * `estimate`. INVALID_ARGUMENT, with the reason in host->last_error, when
   * the strategy refuses; UNSUPPORTED when it has no `estimate`. */
  tessera_status (*estimate)(void* ctx, const char* strategy, const char* options,
                             tessera_estimate* out);
  /* The backend's properties; the first call may run a short probe of the
   * backend (allreduces over the world), later calls return the cached
   * values. */
  tessera_status (*backend)(void* ctx, tessera_backend_props* out);
  /* Runs `steps` training steps of the run under the candidate, without
   * checkpoints or output, and writes the mean step time of its steps after
   * the first and the peak tracked bytes of the largest rank. UNSUPPORTED
   * (with the reason) where the host cannot run trials, e.g. when ranks are
   * processes. */
  tessera_status (*trial)(void* ctx, const char* strategy, const char* options, int64_t steps,
                          double* seconds_per_step, int64_t* peak_bytes);
  /* Records one row of the ranking, best first; the host copies it. */
  void (*report)(void* ctx, const tessera_selection_row* row);
  /* The FLOP rate of one rank running the model's own units: the host
   * times a forward and backward of one micro-batch (the size a
   * data-parallel rank trains) on one thread and divides the units' FLOPs
   * by it; and the seconds per parameter element of the run's optimizer
   * update (and the gradient zeroing before a step), timed over the
   * model's parameters. Measured at the first call, cached. *source
   * (host-owned) says how. UNSUPPORTED (reason in last_error) where the
   * host cannot run the model, e.g. a description without one, or one too
   * large for this process. */
  tessera_status (*compute_rate)(void* ctx, double* flops_per_second,
                                 double* update_seconds_per_element, const char** source);
} tessera_select_env;

typedef struct tessera_selector_api {
  uint32_t struct_size;
  uint32_t flags; /* zero */
  /* Ranks candidates for env and reports each with env->report, exactly
   * one marked TESSERA_ROW_CHOSEN, then returns OK. Fails with
   * INVALID_ARGUMENT (message listing each candidate's need) when no
   * candidate fits the budget, or naming the option that is wrong. */
  tessera_status (*select)(const tessera_host_api* host, const tessera_options* opts,
                           const tessera_select_env* env);
} tessera_selector_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_SELECTOR_H */
