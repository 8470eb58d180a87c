// Drives the inmemory plugin through its C table: loads the built .so with
// dlopen, creates backends with a FakeHost, wraps comms and works in RAII
// handles whose calls throw tessera::Error carrying the plugin's message,
// and runs one thread per rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fake_host.hpp"
#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The plugin library, loaded once per process and never unloaded.
struct Plugin {
  const tessera_plugin_descriptor* descriptor = nullptr;
  const tessera_backend_api* api = nullptr;
  // Loads the library or throws std::runtime_error naming the file.
  static const Plugin& get();
};

// Throws tessera::Error(status, <message the plugin set>) unless OK.
void check(tessera_status status);

struct BackendConfig {
  int32_t world_size = 2;
  int64_t timeout_ms = 20000;
  int64_t block_kb = 64;
  int64_t spin_us = 20;
  int64_t stream_kb = 32768;  // the plugin's default
};

class Work {
 public:
  explicit Work(tessera_work* work) : work_(work) {}
  Work(Work&& other) noexcept : work_(other.work_) { other.work_ = nullptr; }
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  Work& operator=(Work&&) = delete;
  ~Work();
  void wait(int64_t timeout_ms = -1);
  // True when done (throws its error).
  bool test();

 private:
  tessera_work* work_;
};

class Comm {
 public:
  explicit Comm(tessera_comm* comm) : comm_(comm) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  [[nodiscard]] int32_t rank() const;
  [[nodiscard]] int32_t size() const;
  [[nodiscard]] tessera_comm* raw() const noexcept { return comm_; }
  // Runs `args` (blocking) / posts it (non-blocking).
  void run(const tessera_coll_args& args);
  Work start(const tessera_coll_args& args);
  // nullptr for color < 0.
  std::unique_ptr<Comm> split(int32_t color, int32_t key);
  void abort(const std::string& reason);

 private:
  tessera_comm* comm_;
};

class Backend {
 public:
  Backend(FakeHost& host, const BackendConfig& config);
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ~Backend();
  [[nodiscard]] int32_t world_size() const noexcept { return world_size_; }
  std::unique_ptr<Comm> connect(int32_t rank);

 private:
  tessera_backend* backend_ = nullptr;
  int32_t world_size_;
};

// Creates a backend (throws on failure).
tessera_status try_create(FakeHost& host, const tessera_options& options,
                          const BackendConfig& config, tessera_backend** out);
tessera_options default_options(const BackendConfig& config);

// What one rank's body ended with.
struct RankOutcome {
  tessera_status status = TESSERA_OK;
  std::string message;
};

// Connects ranks 0..world-1 on their own threads and calls body(comm) on
// each; an exception ends that rank and, if `abort_on_failure`, aborts its
// world communicator so that peers do not wait for it. Returns each rank's
// outcome.
std::vector<RankOutcome> run_ranks(Backend& backend, const std::function<void(Comm&)>& body,
                                   bool abort_on_failure = true);
// run_ranks on a fresh backend, adding a test failure for any rank that
// failed.
void run_ok(const BackendConfig& config, const std::function<void(Comm&)>& body);

// Argument builders.
template <typename T>
tessera_buffer buf(std::vector<T>& v) {
  return tessera_buffer{v.data(), v.size(), dtype_of<T>::value, {TESSERA_DEVICE_CPU, 0}};
}
inline tessera_buffer raw_buf(void* data, uint64_t count, tessera_dtype dtype) {
  return tessera_buffer{data, count, dtype, {TESSERA_DEVICE_CPU, 0}};
}
tessera_coll_args args(tessera_coll_type coll, tessera_buffer send, tessera_buffer recv,
                       tessera_reduce_op op = TESSERA_SUM, int32_t root = 0);
tessera_coll_args p2p(tessera_coll_type coll, tessera_buffer buffer, int32_t peer, int32_t tag);

// Element conversions for exact expected values (small integers).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<double>(to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

// Calls fn(T{}) for every dtype.
template <typename Fn>
void for_each_dtype(Fn&& fn) {
  fn(float{});
  fn(double{});
  fn(half{});
  fn(bfloat16{});
  fn(int32_t{});
  fn(int64_t{});
  fn(uint8_t{});
}

}  // namespace tessera::test
