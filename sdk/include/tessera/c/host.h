/*
 * Tessera plugin ABI: what the host hands to every plugin.
 *
 * The host owns logging, error messages, memory accounting and option values.
 * A plugin receives one `tessera_host_api` per loaded library when it is
 * created and keeps the pointer for its whole life; every function takes the
 * table's `ctx` as its first argument.  All functions are thread-safe.
 */
#ifndef TESSERA_C_HOST_H
#define TESSERA_C_HOST_H

#include "tessera/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rank argument meaning "the rank of the calling thread as the host knows
 * it" (or none, outside a rank). */
#define TESSERA_RANK_UNKNOWN (-1)

/* Categories for memory accounting; strategies report what they allocate so
 * the host can print current and peak bytes per rank and category. */
typedef int32_t tessera_mem_category;
enum {
  TESSERA_MEM_PARAMS = 0,
  TESSERA_MEM_GRADS = 1,
  TESSERA_MEM_OPTIMIZER = 2,
  TESSERA_MEM_COMM = 3, /* staging and scratch buffers of collectives */
  TESSERA_MEM_ACTIVATIONS = 4,
  TESSERA_MEM_OTHER = 5,
  TESSERA_MEM_CATEGORY_COUNT = 6
};

/* Types of declared plugin options (see tessera_option_decl in plugin.h). */
typedef int32_t tessera_option_type;
enum {
  TESSERA_OPT_BOOL = 0,
  TESSERA_OPT_INT = 1,     /* int64_t  */
  TESSERA_OPT_FLOAT = 2,   /* double   */
  TESSERA_OPT_STRING = 3,  /* UTF-8, NUL-terminated, owned by the host */
  TESSERA_OPT_INT_LIST = 4 /* ABI 1.3: array of int64_t, e.g. "[64, 64]" */
};

/* Opaque, host-owned set of option values for one plugin instance. The host
 * has already checked every key against the plugin's declared options and
 * filled in defaults, so a declared key is always present. */
typedef struct tessera_options tessera_options;

/* A strategy plugin's table (strategy.h), for find_strategy below. */
struct tessera_strategy_api;

/* ---- ABI 1.8: the rendezvous store ----
 * A key-value store the host keeps for the plugins whose ranks are
 * processes (gloo, nccl, third-party backends): where they meet, exchange
 * bootstrap ids and agree on membership. One implementation in the host,
 * three kinds: */
typedef int32_t tessera_store_kind;
enum {
  TESSERA_STORE_TCP = 0,  /* a TCP store served by rank 0 or a launcher on host:port */
  TESSERA_STORE_FILE = 1, /* a directory every rank can reach                          */
  TESSERA_STORE_REDIS = 2 /* a Redis server on host:port                               */
};

typedef struct tessera_store_config {
  uint32_t struct_size; /* sizeof(tessera_store_config) as the caller built it */
  tessera_store_kind kind;
  const char* host;   /* TCP, REDIS */
  int32_t port;       /* TCP, REDIS: 1..65535 */
  const char* dir;    /* FILE */
  const char* ns;     /* every key lives under "<ns>/"; NULL or "": none */
  int64_t timeout_ms; /* how long opening tries to reach the store, and the
                         bound of replies to calls without a timeout of
                         their own (< 0: none) */
  const char* source; /* where the address came from, for messages (e.g.
                         "MASTER_ADDR:MASTER_PORT"); may be NULL */
  int32_t serve;      /* TCP only: this process serves the store on
                         host:port while the handle is open (rank 0 does).
                         Closing the handle then waits up to timeout_ms
                         (60 s when it is < 0) for the other clients to
                         disconnect, removes the keys
                         under ns and stops the server. */
  int32_t hold_run;   /* this handle stands for one process of the run
                         while it is open: opening adds 1 to the run's
                         count of processes (key ".live" under ns),
                         closing subtracts 1, and the close that brings it
                         to 0 removes every key under ns. For the stores
                         no rank serves (file, Redis, a launcher's TCP
                         store), so a finished run leaves no keys behind.
                         Needs a namespace; not with `serve` (the server
                         removes them). */
} tessera_store_config;

/* An open store; owned by the plugin that opened it until store_close. */
typedef struct tessera_store tessera_store;

/* Receives a value the host read: `size` bytes at `data`, valid only
 * during the call. */
typedef void (*tessera_bytes_sink)(void* user, const void* data, uint64_t size);

typedef struct tessera_host_api {
  uint32_t struct_size; /* sizeof(tessera_host_api) as the host built it  */
  uint16_t abi_major;   /* TESSERA_ABI_MAJOR of the host                  */
  uint16_t abi_minor;   /* TESSERA_ABI_MINOR of the host                  */
  void* ctx;            /* opaque; first argument of every call below     */

  /* Writes one log line through the host's sinks, tagged with the plugin's
   * name and `rank` (TESSERA_RANK_UNKNOWN: the calling thread's rank). */
  void (*log)(void* ctx, tessera_log_level level, int32_t rank, const char* message);

  /* Lowest level the host currently writes; lets a plugin skip formatting. */
  tessera_log_level (*log_level)(void* ctx);

  /* Records the message that explains the status a plugin call is about to
   * return. Stored per calling thread; the host reads it when the call
   * returns a status other than TESSERA_OK. */
  void (*set_error)(void* ctx, tessera_status status, const char* message);

  /* Adds `delta_bytes` (negative when freed) to the tracked memory of `rank`
   * in `category`. */
  void (*mem_track)(void* ctx, int32_t rank, tessera_mem_category category, int64_t delta_bytes);

  /* Option accessors. Return TESSERA_OK and write *out, or
   * TESSERA_ERR_INVALID_ARGUMENT if `key` is not declared with that type. */
  tessera_status (*option_bool)(void* ctx, const tessera_options* opts, const char* key,
                                int32_t* out);
  tessera_status (*option_int)(void* ctx, const tessera_options* opts, const char* key,
                               int64_t* out);
  tessera_status (*option_float)(void* ctx, const tessera_options* opts, const char* key,
                                 double* out);
  tessera_status (*option_string)(void* ctx, const tessera_options* opts, const char* key,
                                  const char** out);

  /* Rank of the calling thread as the host knows it, or TESSERA_RANK_UNKNOWN. */
  int32_t (*thread_rank)(void* ctx);

  /* ---- ABI 1.1 (check struct_size before use) ---- */

  /* Message of the last failure recorded on this thread: a failed call
   * into a host-implemented table (model, optimizer, state reader/writer of
   * strategy.h), or a plugin's set_error — e.g. the backend a strategy
   * calls directly reports why a collective failed. "" if none; valid until
   * the next failure on this thread. */
  const char* (*last_error)(void* ctx);

  /* ---- ABI 1.3 (check struct_size before use) ---- */

  /* Option of type TESSERA_OPT_INT_LIST: *values points at *count values
   * owned by `opts` (NULL when count is 0). */
  tessera_status (*option_int_list)(void* ctx, const tessera_options* opts, const char* key,
                                    const int64_t** values, uint64_t* count);

  /* Micro-batch accessors (model.h). Examples in `batch` (0 for NULL). */
  int64_t (*batch_examples)(void* ctx, const tessera_batch* batch);
  /* Fills *out (whose struct_size the caller set) with the batch's tensor
   * `name`: "tokens" (i32 [examples, seq_len]) and "targets" (i32, same
   * shape) for sequence data; "features" (f32 [examples, features]) and
   * "targets" (i32 [examples]) for feature data. INVALID_ARGUMENT, naming
   * the tensors the batch has, for any other name. Valid as long as the
   * batch. */
  tessera_status (*batch_tensor)(void* ctx, const tessera_batch* batch, const char* name,
                                 tessera_tensor_view* out);

  /* ---- ABI 1.4 (check struct_size before use) ---- */

  /* Threads one operation of the calling rank may use (run.threads_per_rank,
   * >= 1): a model splits a GEMM or an element-wise pass over this many
   * threads (tessera/sdk/intra_op.hpp). */
  int32_t (*intra_op_threads)(void* ctx);

  /* ---- ABI 1.5 (check struct_size before use) ---- */

  /* The device the calling rank computes on (run.device): CPU, or the CUDA
   * device of this rank (its LOCAL_RANK, or its index among the ranks of
   * this process, modulo the devices present). */
  void (*compute_device)(void* ctx, tessera_device* out);

  /* `bytes` of zeroed memory that both the host and the compute device can
   * read and write: on a CUDA run, CUDA managed memory of the rank's device
   * (so kernels use it in place and host code still may touch it); on CPU,
   * ordinary memory aligned to 64 bytes. NULL if it cannot be had (a
   * message is left with set_error). Free it with mem_free, giving the same
   * size. Not accounted: report it with mem_track. */
  void* (*mem_alloc)(void* ctx, uint64_t bytes);
  void (*mem_free)(void* ctx, void* ptr, uint64_t bytes);

  /* The device whose kernels may read `ptr` in place: CUDA (with its
   * ordinal) for CUDA device or managed memory, CPU for everything else,
   * including NULL and every pointer on a CPU run. */
  void (*pointer_device)(void* ctx, const void* ptr, tessera_device* out);

  /* The dtype of the models' matrix products on this run (run.precision):
   * TESSERA_F32, or TESSERA_BF16 (each product's inputs rounded to
   * bfloat16 and accumulated in f32). Parameters, gradients and optimizer
   * state stay f32 either way (the master copy). */
  tessera_dtype (*compute_precision)(void* ctx);

  /* ---- ABI 1.6 (check struct_size before use) ---- */

  /* Another strategy plugin of this run's registry, for a strategy that
   * wraps one (elastic wraps a data-parallel strategy): its table
   * (strategy.h), the host table to pass to its calls, its strategy
   * interface version (major << 16 | minor), and its options resolved from
   * `options`, "key = value" assignments separated by ';' (values as TOML
   * literals or bare strings, as the CLI's --option takes them; NULL or ""
   * for the defaults). Everything returned is owned by the host and lives
   * as long as the host. INVALID_ARGUMENT naming the plugin, the plugins
   * there are or the option, when `name` is not a strategy plugin of the
   * run or an option is unknown or of the wrong type. */
  tessera_status (*find_strategy)(void* ctx, const char* name, const char* options,
                                  const struct tessera_strategy_api** api,
                                  const struct tessera_host_api** plugin_host,
                                  const tessera_options** resolved, uint32_t* version);

  /* ---- ABI 1.7 (check struct_size before use) ---- */

  /* Element-wise f32 passes over `count` elements of a buffer, done where
   * the buffer is: on its CUDA device when `x` is CUDA memory on a CUDA run
   * (done when the call returns), on the CPU otherwise. Strategies run
   * their per-step passes over gradients and parameters through these
   * (zeroing, clipping), so a CUDA run's buffers stay on the device.
   *   vec_fill:        x[i] = value
   *   vec_scale:       x[i] *= factor
   *   vec_sum_squares: *out = the sum of x[i]^2, accumulated in double; on
   *                    the CPU exactly as tessera/sdk/clip.hpp sums, on a
   *                    device in an order of its own that depends on
   *                    `count` alone
   * INVALID_ARGUMENT for a NULL buffer with count > 0 (or NULL `out`);
   * INTERNAL with the CUDA runtime's error when a kernel fails. */
  tessera_status (*vec_fill)(void* ctx, float* x, uint64_t count, float value);
  tessera_status (*vec_scale)(void* ctx, float* x, uint64_t count, float factor);
  tessera_status (*vec_sum_squares)(void* ctx, const float* x, uint64_t count, double* out);

  /* ---- ABI 1.8 (check struct_size before use) ---- */

  /* The rendezvous store (tessera_store_config above). Every call is
   * thread-safe on one handle and fails with a status and a message
   * (last_error) naming the store: TIMEOUT naming the keys waited for,
   * PEER_LOST when the store cannot be reached (any more),
   * INVALID_ARGUMENT for a bad config or a refused request, INTERNAL for
   * an I/O error. */
  /* Opens (and with `serve`, first serves) the store `config` names. */
  tessera_status (*store_open)(void* ctx, const tessera_store_config* config, tessera_store** out);
  /* Closes the handle (NULL: nothing); see `serve` for a served store. */
  void (*store_close)(void* ctx, tessera_store* store);
  /* "TCP store at HOST:PORT (MASTER_ADDR:MASTER_PORT)", "file store at
   * 'DIR'", "Redis store at HOST:PORT"; valid while the handle is open. */
  const char* (*store_description)(void* ctx, const tessera_store* store);
  /* Writes `size` bytes under `key`, replacing a value there. */
  tessera_status (*store_set)(void* ctx, tessera_store* store, const char* key, const void* value,
                              uint64_t size);
  /* Waits until `key` exists (timeout_ms < 0: forever) and hands its value
   * to `sink`. */
  tessera_status (*store_get)(void* ctx, tessera_store* store, const char* key, int64_t timeout_ms,
                              tessera_bytes_sink sink, void* user);
  /* Adds `delta` to the integer under `key` (absent: 0) atomically; *out
   * gets the new value. The value is kept as decimal text. */
  tessera_status (*store_add)(void* ctx, tessera_store* store, const char* key, int64_t delta,
                              int64_t* out);
  /* Atomically: when the key's value equals `expected` (`expected` NULL:
   * the key is absent), it becomes `desired`. *swapped says whether it
   * did; the value now goes to `sink` when the key exists (sink may be
   * NULL). Of several callers creating a key, exactly one swaps. */
  tessera_status (*store_compare_set)(void* ctx, tessera_store* store, const char* key,
                                      const void* expected, uint64_t expected_size,
                                      const void* desired, uint64_t desired_size, int32_t* swapped,
                                      tessera_bytes_sink sink, void* user);
  /* Waits until each of the `count` keys exists (timeout_ms < 0: forever). */
  tessera_status (*store_wait)(void* ctx, tessera_store* store, const char* const* keys,
                               uint64_t count, int64_t timeout_ms);
  /* *present = 1 when each of the `count` keys exists; never waits. */
  tessera_status (*store_check)(void* ctx, tessera_store* store, const char* const* keys,
                                uint64_t count, int32_t* present);
  /* Removes every key that starts with `prefix` ("": all of the
   * namespace); *removed (may be NULL) gets how many. */
  tessera_status (*store_delete_prefix)(void* ctx, tessera_store* store, const char* prefix,
                                        int64_t* removed);

  /* ---- ABI 1.9 (check struct_size before use) ---- */

  /* 1 when the run's f32 matrix products may round their inputs to TF32
   * (10-bit mantissa) on the tensor cores and accumulate in f32
   * (run.precision = "tf32"; compute_precision then says TESSERA_F32),
   * else 0: f32 products in full f32. */
  int32_t (*compute_tf32)(void* ctx);
} tessera_host_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_HOST_H */
