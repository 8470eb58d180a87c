/*
 * Tessera plugin ABI: communication backends.
 *
 * A backend library's descriptor has kind TESSERA_KIND_BACKEND and `api`
 * pointing to a static tessera_backend_api. Object model:
 *
 *   tessera_backend  one per process: the plugin's engine and settings.
 *   tessera_comm     one rank's handle on a group of ranks. The world
 *                    communicator comes from `connect`; sub-groups from
 *                    `comm_split`. Calls on one comm are made by one thread
 *                    at a time, and every rank of the group issues the same
 *                    collectives in the same order.
 *   tessera_work     a started non-blocking operation; it must be waited on
 *                    (or tested until done) and then freed.
 *
 * Every function that returns tessera_status reports the reason of a failure
 * through host->set_error before returning it.
 */
#ifndef TESSERA_C_BACKEND_H
#define TESSERA_C_BACKEND_H

#include "tessera/c/common.h"
#include "tessera/c/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the backend interface (tessera_backend_api and the structs it
 * takes), carried in the descriptor's api_major/api_minor.
 *   1.0  the table up to work_free
 *   1.1  no backend change (the whole ABI was versioned as one then)
 *   1.2  raw_post
 *   1.3  comm_shrink
 *   1.4  comm_grow; tessera_backend_config ends with `joining`
 * A host accepts backend 1.x of any minor. */
#define TESSERA_BACKEND_API_MAJOR 1
#define TESSERA_BACKEND_API_MINOR 4

typedef struct tessera_backend tessera_backend;
typedef struct tessera_comm tessera_comm;
typedef struct tessera_work tessera_work;

/* Collectives and point-to-point operations. Buffer conventions, with n the
 * per-rank element count and P the group size:
 *   ALLREDUCE       send n, recv n on every rank (send.data == recv.data: in place)
 *   BROADCAST       root's send n is copied into every rank's recv n (root may pass
 *                   send.data == recv.data)
 *   REDUCE          send n everywhere; the reduction lands in root's recv n
 *                   (recv ignored elsewhere)
 *   ALLGATHER       send n, recv n*P: block r of recv is rank r's send
 *   REDUCE_SCATTER  send n*P, recv n: rank r gets the reduction of block r
 *   GATHER          send n; root's recv n*P holds block r from rank r
 *   SCATTER         root's send n*P; block r lands in rank r's recv n
 *   ALLTOALL        send n*P, recv n*P: block j of send goes to rank j, block i
 *                   of recv came from rank i
 *   BARRIER         no buffers
 *   SEND / RECV     send n to / recv n from `peer`, matched by `tag` in order
 * send and recv always have the same dtype and device type. */
typedef int32_t tessera_coll_type;
enum {
  TESSERA_COLL_ALLREDUCE = 0,
  TESSERA_COLL_BROADCAST = 1,
  TESSERA_COLL_REDUCE = 2,
  TESSERA_COLL_ALLGATHER = 3,
  TESSERA_COLL_REDUCE_SCATTER = 4,
  TESSERA_COLL_GATHER = 5,
  TESSERA_COLL_SCATTER = 6,
  TESSERA_COLL_ALLTOALL = 7,
  TESSERA_COLL_BARRIER = 8,
  TESSERA_COLL_SEND = 9,
  TESSERA_COLL_RECV = 10,
  TESSERA_COLL_TYPE_COUNT = 11
};

/* Arguments of one operation. Grows at the end only. */
typedef struct tessera_coll_args {
  uint32_t struct_size;   /* sizeof(tessera_coll_args) of the caller        */
  tessera_coll_type coll; /* which operation                               */
  tessera_buffer send;    /* see the table above                           */
  tessera_buffer recv;    /* see the table above                           */
  tessera_reduce_op op;   /* ALLREDUCE, REDUCE, REDUCE_SCATTER             */
  int32_t root;           /* BROADCAST, REDUCE, GATHER, SCATTER            */
  int32_t peer;           /* SEND, RECV: rank in this communicator         */
  int32_t tag;            /* SEND, RECV: >= 0                              */
  int64_t timeout_ms;     /* 0: the communicator's timeout; < 0: none      */
} tessera_coll_args;

/* Process-wide settings for `create`. Grows at the end only. */
typedef struct tessera_backend_config {
  uint32_t struct_size; /* sizeof(tessera_backend_config) of the host        */
  int32_t world_size;   /* ranks wanted; -1: take it from the environment   */
  int64_t timeout_ms;   /* default for every collective; > 0                */
  /* Backend 1.4: 1 when this process joins a world that is already running
   * (`tessera train` under TESSERA_JOIN=1): `connect` then returns a group
   * of this rank alone, without waiting for anyone, and comm_grow on it
   * waits to be admitted into the running world. A host sets it only for a
   * backend that has comm_grow. */
  int32_t joining;
} tessera_backend_config;

/* Bits of tessera_backend_api.capabilities. */
enum {
  /* All ranks are threads of this process: the host starts world_size
   * threads and each calls `connect` with its rank. Without this bit the
   * process is one rank and calls `connect` once with rank -1. */
  TESSERA_BACKEND_CAP_THREAD_RANKS = 1u << 0,
  TESSERA_BACKEND_CAP_CPU_BUFFERS = 1u << 1, /* accepts TESSERA_DEVICE_CPU  */
  TESSERA_BACKEND_CAP_CUDA_BUFFERS = 1u << 2 /* accepts TESSERA_DEVICE_CUDA */
};

typedef struct tessera_backend_api {
  uint32_t struct_size;  /* sizeof(tessera_backend_api) of the plugin */
  uint32_t capabilities; /* TESSERA_BACKEND_CAP_* bits               */

  /* Creates the process-wide backend. `opts` holds the validated
   * [backend.options]; `host` outlives the backend. */
  tessera_status (*create)(const tessera_host_api* host, const tessera_options* opts,
                           const tessera_backend_config* config, tessera_backend** out);
  /* Destroys a backend whose communicators are all destroyed. */
  void (*destroy)(tessera_backend* backend);

  /* Joins the world group as `rank` (or -1: the rank the environment says)
   * and returns this rank's world communicator. Blocks until every rank has
   * joined or the timeout expires. */
  tessera_status (*connect)(tessera_backend* backend, int32_t rank, tessera_comm** out);

  /* Rank of the caller in `comm` and size of its group. */
  int32_t (*comm_rank)(const tessera_comm* comm);
  int32_t (*comm_size)(const tessera_comm* comm);

  /* Collective over `comm`: ranks with the same `color` (>= 0) form a new
   * group, ordered by `key` then by rank in `comm`. A rank passing color < 0
   * takes part but gets *out = NULL. */
  tessera_status (*comm_split)(tessera_comm* comm, int32_t color, int32_t key, tessera_comm** out);

  /* Makes every pending and future operation of the group fail with
   * TESSERA_ERR_PEER_LOST on every rank that shares it, carrying `reason`.
   * Safe to call from any thread. */
  void (*comm_abort)(tessera_comm* comm, const char* reason);

  /* Releases this rank's handle. Not collective; pending work must be done. */
  void (*comm_destroy)(tessera_comm* comm);

  /* Runs one operation. With `work` NULL it returns when the operation is
   * complete. Otherwise it may return at once with *work set; buffers must
   * stay untouched until the work completes. It may also complete the
   * operation before returning and leave *work NULL: callers treat that as
   * done. Operations on one comm take effect in the order they were posted,
   * blocking or not. */
  tessera_status (*post)(tessera_comm* comm, const tessera_coll_args* args, tessera_work** work);

  /* Waits for `work` to finish: TESSERA_OK, its error, or TESSERA_ERR_TIMEOUT
   * after `timeout_ms` (< 0: the operation's own timeout). */
  tessera_status (*work_wait)(tessera_work* work, int64_t timeout_ms);
  /* Sets *done to 1 if `work` finished (its status is returned), else 0 and
   * returns TESSERA_OK. Never blocks. */
  tessera_status (*work_test)(tessera_work* work, int32_t* done);
  /* Frees finished work. */
  void (*work_free)(tessera_work* work);

  /* Backend 1.2; may be NULL. Runs `args` to completion with the underlying
   * library's own call for that operation (e.g. MPI_Allreduce, a Gloo
   * algorithm object) and none of the plugin's own layers: no argument
   * checks, no timeout, no progress tracking. For benchmarks that time the
   * plugin against the library side by side; every rank of the group must
   * call it with the same operation, like `post`. Returns
   * TESSERA_ERR_UNSUPPORTED for an operation the library has no direct call
   * for. */
  tessera_status (*raw_post)(tessera_comm* comm, const tessera_coll_args* args);

  /* Backend 1.3; may be NULL: the backend cannot re-form a group (an
   * elastic strategy then refuses it). Called by every member of comm's
   * group that is still alive after the group failed (a peer lost, a
   * timeout, an abort; the caller should have called comm_abort first so
   * that no member stays blocked): the callers agree, through the backend's
   * own rendezvous (its store; for thread ranks, the process), on who is
   * still there and form a new group of exactly them, ranked in the order
   * of their ranks in comm. A caller waits until every member of comm has
   * called, or until `grace_ms` (> 0) has passed since its own call; a member
   * whose call comes after the membership was decided is left out: its call
   * fails with TESSERA_ERR_PEER_LOST saying so. Returns the new group's
   * communicator in *out; comm itself stays as it was (destroy it as
   * usual). Fails with TESSERA_ERR_TIMEOUT / PEER_LOST, naming the group,
   * when the new group cannot be connected. Call it at most once per comm. */
  tessera_status (*comm_shrink)(tessera_comm* comm, int64_t grace_ms, tessera_comm** out);

  /* Backend 1.4; may be NULL: the backend cannot admit ranks into a running
   * group (a joining process is then refused before it connects). Two kinds
   * of caller:
   * - Every member of a running group, collectively: admits the processes
   *   waiting to join the run (created with `joining`, meeting in the same
   *   store), if any. *out is then a new group of the members, in their
   *   order, followed by the newcomers in the order they arrived; *out is
   *   NULL when none was waiting (nothing changes). Cheap when nobody waits:
   *   one member looks in the store and tells the others. `wait_ms` is not
   *   used.
   * - A joining process, with the group of itself alone that `connect`
   *   returned: announces itself and waits until the members admit it, or
   *   `wait_ms` (< 0: forever) passes (TESSERA_ERR_TIMEOUT naming the
   *   store); *out is the grown group, in which it ranks after the members.
   * comm itself stays as it was (destroy it as usual). A new group whose
   * members do not all connect fails with TIMEOUT / PEER_LOST naming it. */
  tessera_status (*comm_grow)(tessera_comm* comm, int64_t wait_ms, tessera_comm** out);
} tessera_backend_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_C_BACKEND_H */
