// Host-side handles on a backend plugin: Backend (one per process),
// Communicator (one rank's view of a group) and Work (a started non-blocking
// operation). Failures come back as tessera::Error carrying the plugin's
// message. Each object keeps the plugin library loaded while it lives.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tessera/c/backend.h"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/dtype.hpp"

namespace tessera {

// A typed view of caller memory on the CPU.
template <typename T>
tessera_buffer cpu_buffer(std::span<T> data) noexcept {
  using E = std::remove_const_t<T>;
  return tessera_buffer{const_cast<E*>(data.data()), data.size(), dtype_of<E>::value,  // NOLINT
                        tessera_device{TESSERA_DEVICE_CPU, 0}};
}
// An untyped view: `count` elements of `dtype` at `data`.
tessera_buffer cpu_buffer(void* data, uint64_t count, tessera_dtype dtype) noexcept;

// What the host layer between callers and the backend does with every
// operation (core/src/checked_comm.hpp): nothing, number and record it (the
// flight recorder, printed on a failure), or also compare each collective
// across the ranks before the backend sees it.
enum class CollectiveChecks : uint8_t { off, record, verify };

struct BackendSettings {
  int world_size = -1;                       // -1: from the environment
  std::chrono::milliseconds timeout{60000};  // default per operation
  CollectiveChecks checks = CollectiveChecks::off;
  // This process joins a world that is already running (TESSERA_JOIN=1):
  // the backend must be a process backend with comm_grow (backend 1.4);
  // connect() then returns a group of this rank alone, which the strategy
  // grows into the running world (elastic).
  bool joining = false;
};

class BackendState;

// A non-blocking operation. Move-only; must be waited on (the destructor
// waits and logs a failure it cannot throw).
class Work {
 public:
  Work() = default;
  Work(Work&& other) noexcept;
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  // Blocks until done; throws its error. timeout < 0: the operation's own.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  // True when done (throws its error); false while running.
  bool test();
  // True if there is an operation not yet waited for.
  [[nodiscard]] bool pending() const noexcept { return work_ != nullptr; }

 private:
  friend class Communicator;
  Work(std::shared_ptr<BackendState> backend, const tessera_backend_api* api, tessera_work* work,
       std::string what);
  void release() noexcept;
  std::shared_ptr<BackendState> backend_;
  const tessera_backend_api* api_ = nullptr;
  tessera_work* work_ = nullptr;
  std::string what_;
};

class Communicator {
 public:
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const std::string& backend_name() const noexcept;
  // The backend's C table and this rank's handle, for handing the
  // communicator to a plugin (tessera_strategy_env). Both stay valid while
  // this object lives; the plugin must not destroy the handle.
  [[nodiscard]] const tessera_backend_api* c_api() const noexcept;
  [[nodiscard]] tessera_comm* c_handle() const noexcept { return comm_; }

  // Runs `args` (struct_size filled in here) and waits for it.
  void run(tessera_coll_args args);
  // Starts `args`; the returned Work must be waited on.
  Work start(tessera_coll_args args);
  // True when the backend offers raw_post (ABI 1.2): the library's own call
  // for an operation, without the plugin's layers.
  [[nodiscard]] bool has_raw() const noexcept;
  // Runs `args` through raw_post (benchmarks only). Throws Error(UNSUPPORTED)
  // when the backend has none or none for this operation.
  void run_raw(tessera_coll_args args);

  // True when operations go through the checked layer (BackendSettings::checks).
  [[nodiscard]] bool checked() const noexcept { return checked_; }
  // Runs `args` without comparing it across ranks first, even when checked
  // (still numbered and recorded): for the exchanges that establish that
  // the ranks agree at all.
  void run_unverified(tessera_coll_args args);
  // The flight recorder as text (docs/training.md); empty when not checked.
  [[nodiscard]] std::string flight_recorder() const;

  // Buffer conventions are those of tessera/c/backend.h.
  void allreduce(const tessera_buffer& send, const tessera_buffer& recv, tessera_reduce_op op);
  void broadcast(const tessera_buffer& buf, int root);
  void reduce(const tessera_buffer& send, const tessera_buffer& recv, tessera_reduce_op op,
              int root);
  void allgather(const tessera_buffer& send, const tessera_buffer& recv);
  void reduce_scatter(const tessera_buffer& send, const tessera_buffer& recv, tessera_reduce_op op);
  void gather(const tessera_buffer& send, const tessera_buffer& recv, int root);
  void scatter(const tessera_buffer& send, const tessera_buffer& recv, int root);
  void alltoall(const tessera_buffer& send, const tessera_buffer& recv);
  void barrier();
  void send(const tessera_buffer& buf, int peer, int tag = 0);
  void recv(const tessera_buffer& buf, int peer, int tag = 0);

  Work iallreduce(const tessera_buffer& send, const tessera_buffer& recv, tessera_reduce_op op);
  Work ibroadcast(const tessera_buffer& buf, int root);
  Work iallgather(const tessera_buffer& send, const tessera_buffer& recv);
  Work ireduce_scatter(const tessera_buffer& send, const tessera_buffer& recv,
                       tessera_reduce_op op);
  Work isend(const tessera_buffer& buf, int peer, int tag = 0);
  Work irecv(const tessera_buffer& buf, int peer, int tag = 0);

  // In-place allreduce of a typed span.
  template <typename T>
  void allreduce(std::span<T> data, tessera_reduce_op op = TESSERA_SUM) {
    allreduce(cpu_buffer(data), cpu_buffer(data), op);
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    broadcast(cpu_buffer(data), root);
  }

  // Collective: groups ranks by `color` ordered by `key`; nullptr for
  // color < 0.
  std::unique_ptr<Communicator> split(int color, int key);
  // The same split of the backend's own communicator, with its operations
  // going through the checked layer as `checks` says (not off) whatever
  // this communicator does; named `label` in messages.
  std::unique_ptr<Communicator> split_checked(int color, int key, CollectiveChecks checks,
                                              const std::string& label);
  // Fails every pending and future operation of the group, on every rank.
  void abort(const std::string& reason) noexcept;
  // A communicator over `comm`, a handle of this one's table (c_api) that
  // someone else owns and destroys, e.g. the world a strategy re-formed
  // after losing ranks (tessera_strategy_world): the result never destroys
  // it, so it must not outlive its owner's handle.
  [[nodiscard]] std::unique_ptr<Communicator> borrow(tessera_comm* comm) const;

 private:
  friend class Backend;
  Communicator(std::shared_ptr<BackendState> backend, tessera_comm* comm, bool checked);
  tessera_coll_args make(tessera_coll_type coll) const noexcept;
  // The backend's own communicator (under the checked one, if any).
  [[nodiscard]] tessera_comm* backend_comm() const noexcept;
  std::shared_ptr<BackendState> backend_;
  const tessera_backend_api* api_;  // the checked table or the backend's own
  tessera_comm* comm_;              // a handle for api_
  bool checked_;
  bool owned_ = true;  // destroys comm_
  int rank_;
  int size_;
};

// A created backend. Thread-safe: with a thread-rank backend every rank
// thread calls connect() with its own rank.
class Backend {
 public:
  // Creates the backend from a loaded plugin of kind backend; `options` are
  // its validated [backend.options].
  Backend(std::shared_ptr<LoadedPlugin> plugin, const OptionValues& options,
          const BackendSettings& settings);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] uint32_t capabilities() const noexcept;
  // True when all ranks are threads of this process.
  [[nodiscard]] bool thread_ranks() const noexcept {
    return (capabilities() & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0;
  }
  // Joins the world as `rank` (-1 for process backends).
  std::unique_ptr<Communicator> connect(int rank = -1);

 private:
  std::shared_ptr<BackendState> state_;
};

// Finds backend `name` in `registry` (error lists the available ones),
// checks `options` (may be null) against the options it declares — `where`
// names their origin in messages, e.g. "run.toml: [backend.options]" — and
// creates it.
std::unique_ptr<Backend> open_backend(const PluginRegistry& registry, const std::string& name,
                                      const toml::table* options, const std::string& where,
                                      const BackendSettings& settings);

}  // namespace tessera
