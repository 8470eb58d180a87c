// A minimal tessera_host_api for loading a plugin without the core library:
// logs go to stderr (warnings and above) and into a list tests can read,
// set_error keeps the message per thread, options come from a small map and
// memory accounting is summed per rank and category.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "tessera/c/host.h"

// The opaque options handle handed to the plugin.
struct tessera_options {
  std::map<std::string, std::variant<bool, int64_t, double, std::string>, std::less<>> values;
};

namespace tessera::test {

class FakeHost {
 public:
  FakeHost();
  FakeHost(const FakeHost&) = delete;
  FakeHost& operator=(const FakeHost&) = delete;

  [[nodiscard]] const tessera_host_api* api() const noexcept { return &api_; }

  // Message of the last set_error on the calling thread, and its status.
  static std::string last_error();
  static tessera_status last_status();

  // Bytes currently tracked for `rank` in `category`.
  [[nodiscard]] int64_t tracked(int32_t rank, tessera_mem_category category) const;
  // Every log line so far, as "[level] [rank r] message".
  [[nodiscard]] std::vector<std::string> logs() const;

 private:
  static void log(void* ctx, tessera_log_level level, int32_t rank, const char* message);
  static tessera_log_level log_level(void* ctx);
  static void set_error(void* ctx, tessera_status status, const char* message);
  static void mem_track(void* ctx, int32_t rank, tessera_mem_category category, int64_t delta);
  template <typename T>
  static tessera_status get(const tessera_options* opts, const char* key, T* out);
  static tessera_status option_bool(void* ctx, const tessera_options* o, const char* k, int32_t* v);
  static tessera_status option_int(void* ctx, const tessera_options* o, const char* k, int64_t* v);
  static tessera_status option_float(void* ctx, const tessera_options* o, const char* k, double* v);
  static tessera_status option_string(void* ctx, const tessera_options* o, const char* k,
                                      const char** v);
  static int32_t thread_rank(void* ctx);

  tessera_host_api api_{};
  mutable std::mutex mu_;
  std::vector<std::string> logs_;
  std::map<std::pair<int32_t, int32_t>, int64_t> memory_;
};

}  // namespace tessera::test
