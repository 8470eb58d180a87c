// The tessera_host_api the core hands to each loaded plugin: logs go to the
// logger "<kind>.<name>", errors are kept per thread, memory goes to the
// MemoryTracker, options are read from tessera_options.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "tessera/c/host.h"

namespace tessera {

class HostContext {
 public:
  // `logger_name` is e.g. "backend.inmemory".
  explicit HostContext(const std::string& logger_name);
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;
  ~HostContext() = default;

  // The table to pass to the plugin; valid while this object lives.
  [[nodiscard]] const tessera_host_api* api() const noexcept { return &api_; }
  [[nodiscard]] const std::shared_ptr<spdlog::logger>& logger() const noexcept { return logger_; }

 private:
  tessera_host_api api_{};
  std::shared_ptr<spdlog::logger> logger_;
};

// Message set by the last set_error call on this thread (any plugin), and
// clears it. Empty if none.
std::string take_thread_error();

// Records `message` as this thread's error, as a plugin's set_error does
// (host layers between a plugin and its caller use it). Never throws.
void set_thread_error(tessera_status status, const std::string& message) noexcept;

// Throws tessera::Error(status, "<what>: <message from set_error or the
// status name>") when status != TESSERA_OK.
void throw_if_failed(tessera_status status, const std::string& what);

// The same for a call into the plugin library `plugin`: a failure of the
// plugin itself (TESSERA_ERR_INTERNAL: a bug, or an exception it did not
// expect) also names the library, "<what> (<plugin>): <message>". A
// refusal, a timeout or a lost peer reads as above.
void throw_if_failed(tessera_status status, const std::string& what,
                     const std::filesystem::path& plugin);

// Records why a call into a host-implemented table (model, optimizer, state
// reader/writer of tessera/c/strategy.h) failed on this thread; a plugin
// reads it through tessera_host_api.last_error right after the call
// returned its status. Kept apart from the plugin's own set_error message.
// Never throws (out of memory leaves the message empty).
void set_host_call_error(const std::string& message) noexcept;

// The message of the last failed host-table call on this thread, "" if
// none; the pointer is valid until the next set_host_call_error or
// clear_host_call_error on this thread.
const char* host_call_error() noexcept;

// Forgets this thread's host-table error message.
void clear_host_call_error() noexcept;

// What the host table's find_strategy (ABI 1.6) answers: another strategy
// plugin's table, its host table, its resolved options and its interface
// version (major << 16 | minor).
struct FoundStrategy {
  const tessera_strategy_api* api = nullptr;
  const tessera_host_api* host = nullptr;
  const tessera_options* options = nullptr;
  uint32_t version = 0;
};
// Resolves a strategy plugin's name and "key = value; ..." options; throws
// tessera::Error(INVALID_ARGUMENT) naming what is wrong.
using StrategyFinder =
    std::function<FoundStrategy(const std::string& name, const std::string& options)>;
// The finder behind find_strategy, process-wide: a PluginRegistry installs
// one for itself when it is made (`owner` = the registry) and removes it
// when it goes, if it is still the one installed. Without one,
// find_strategy fails saying there is no registry.
void set_strategy_finder(const void* owner, StrategyFinder finder);
void clear_strategy_finder(const void* owner) noexcept;

// Threads one operation of a rank may use (run.threads_per_rank), what the
// host table's intra_op_threads returns to every plugin of this process;
// 1 until a run sets it. Values below 1 count as 1.
int intra_op_threads() noexcept;
void set_intra_op_threads(int threads) noexcept;

// Sets intra_op_threads for one scope (a run) and restores the previous
// value at its end.
class IntraOpThreadsGuard {
 public:
  explicit IntraOpThreadsGuard(int threads) noexcept : previous_(intra_op_threads()) {
    set_intra_op_threads(threads);
  }
  IntraOpThreadsGuard(const IntraOpThreadsGuard&) = delete;
  IntraOpThreadsGuard& operator=(const IntraOpThreadsGuard&) = delete;
  ~IntraOpThreadsGuard() { set_intra_op_threads(previous_); }

 private:
  int previous_;
};

}  // namespace tessera
