// Plugin-side view of the host API: logging, errors, memory accounting and
// option values, as small C++ helpers over tessera_host_api.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// The host services handed to a plugin. Cheap to copy; valid for the life of
// the object the host created.
class Host {
 public:
  explicit Host(const tessera_host_api* api) : api_(api) {}

  [[nodiscard]] const tessera_host_api* raw() const noexcept { return api_; }

  [[nodiscard]] bool enabled(tessera_log_level level) const noexcept {
    return api_ != nullptr && level >= api_->log_level(api_->ctx);
  }

  // Logs the concatenation of `args` at `level` for `rank`
  // (TESSERA_RANK_UNKNOWN: the calling thread's rank).
  template <typename... Args>
  void log(tessera_log_level level, int32_t rank, Args&&... args) const {
    if (!enabled(level)) return;
    const std::string line = detail::concat(std::forward<Args>(args)...);
    api_->log(api_->ctx, level, rank, line.c_str());
  }
  template <typename... Args>
  void debug(Args&&... args) const {
    log(TESSERA_LOG_DEBUG, TESSERA_RANK_UNKNOWN, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(Args&&... args) const {
    log(TESSERA_LOG_INFO, TESSERA_RANK_UNKNOWN, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warn(Args&&... args) const {
    log(TESSERA_LOG_WARN, TESSERA_RANK_UNKNOWN, std::forward<Args>(args)...);
  }

  // Reports allocations (positive) and frees (negative) for accounting.
  void track_memory(int32_t rank, tessera_mem_category category, int64_t delta_bytes) const {
    if (api_ != nullptr) api_->mem_track(api_->ctx, rank, category, delta_bytes);
  }

  void set_error(tessera_status status, const char* message) const noexcept {
    if (api_ != nullptr) api_->set_error(api_->ctx, status, message);
  }

  [[nodiscard]] int32_t thread_rank() const noexcept {
    return api_ != nullptr ? api_->thread_rank(api_->ctx) : TESSERA_RANK_UNKNOWN;
  }

  // Whether the host has the device calls of ABI 1.5 (a table that is big
  // enough but leaves them null, as a test's stand-in may, has none).
  [[nodiscard]] bool has_devices() const noexcept {
    return api_ != nullptr &&
           api_->struct_size >= offsetof(tessera_host_api, compute_precision) + sizeof(void*) &&
           api_->compute_device != nullptr && api_->mem_alloc != nullptr &&
           api_->mem_free != nullptr && api_->pointer_device != nullptr &&
           api_->compute_precision != nullptr;
  }
  // The device the calling rank computes on (CPU before host ABI 1.5).
  [[nodiscard]] tessera_device compute_device() const noexcept {
    tessera_device d{TESSERA_DEVICE_CPU, 0};
    if (has_devices()) api_->compute_device(api_->ctx, &d);
    return d;
  }
  // The dtype of the models' matrix products (F32 before host ABI 1.5).
  [[nodiscard]] tessera_dtype compute_precision() const noexcept {
    return has_devices() ? api_->compute_precision(api_->ctx) : TESSERA_F32;
  }
  // Whether f32 matrix products may run in TF32 (run.precision = "tf32";
  // false before host ABI 1.9).
  [[nodiscard]] bool compute_tf32() const noexcept {
    return api_ != nullptr &&
           api_->struct_size >= offsetof(tessera_host_api, compute_tf32) + sizeof(void*) &&
           api_->compute_tf32 != nullptr && api_->compute_tf32(api_->ctx) != 0;
  }
  // The device whose kernels read `ptr` in place (CPU before host ABI 1.5).
  [[nodiscard]] tessera_device pointer_device(const void* ptr) const noexcept {
    tessera_device d{TESSERA_DEVICE_CPU, 0};
    if (has_devices()) api_->pointer_device(api_->ctx, ptr, &d);
    return d;
  }

  // Whether the host has the element-wise passes of ABI 1.7.
  [[nodiscard]] bool has_vector_passes() const noexcept {
    return api_ != nullptr &&
           api_->struct_size >= offsetof(tessera_host_api, vec_sum_squares) + sizeof(void*) &&
           api_->vec_fill != nullptr && api_->vec_scale != nullptr &&
           api_->vec_sum_squares != nullptr;
  }
  // Element-wise passes over a strategy's buffers, done where the buffer
  // is (host ABI 1.7: on its CUDA device on a CUDA run); on the CPU, here,
  // on a CPU run or with an older host. A failed host call throws
  // tessera::Error with the host's message.
  // x[i] = value.
  void fill(std::span<float> x, float value) const;
  // x[i] *= factor (nothing when factor is 1).
  void scale(std::span<float> x, float factor) const;
  // The sum of x[i]^2 in double (tessera/sdk/clip.hpp's order on the CPU).
  [[nodiscard]] double sum_squares(std::span<const float> x) const;

 private:
  // Whether the passes go to the host: it has them and the run computes
  // on a device (on a CPU run the SDK's loops are the same work without
  // the call).
  [[nodiscard]] bool passes_on_host() const noexcept {
    return has_vector_passes() && compute_device().type != TESSERA_DEVICE_CPU;
  }

  const tessera_host_api* api_;
};

// Read access to a plugin's validated options. Every declared key is present
// (defaults filled in by the host); asking for an undeclared key or with the
// wrong type throws.
class Options {
 public:
  Options(const tessera_host_api* api, const tessera_options* opts) : api_(api), opts_(opts) {}

  [[nodiscard]] bool get_bool(const char* key) const {
    int32_t v = 0;
    check(api_->option_bool(api_->ctx, opts_, key, &v), key, "bool");
    return v != 0;
  }
  [[nodiscard]] int64_t get_int(const char* key) const {
    int64_t v = 0;
    check(api_->option_int(api_->ctx, opts_, key, &v), key, "int");
    return v;
  }
  [[nodiscard]] double get_float(const char* key) const {
    double v = 0;
    check(api_->option_float(api_->ctx, opts_, key, &v), key, "float");
    return v;
  }
  [[nodiscard]] std::string get_string(const char* key) const {
    const char* v = nullptr;
    check(api_->option_string(api_->ctx, opts_, key, &v), key, "string");
    return v != nullptr ? std::string(v) : std::string();
  }
  // An option of type TESSERA_OPT_INT_LIST (host ABI 1.3).
  [[nodiscard]] std::vector<int64_t> get_int_list(const char* key) const {
    TESSERA_CHECK(api_->struct_size >= offsetof(tessera_host_api, option_int_list) + sizeof(void*),
                  TESSERA_ERR_UNSUPPORTED, "option '", key,
                  "': the host is too old for integer-list options (needs ABI 1.3)");
    const int64_t* values = nullptr;
    uint64_t count = 0;
    check(api_->option_int_list(api_->ctx, opts_, key, &values, &count), key, "int list");
    return count == 0 ? std::vector<int64_t>() : std::vector<int64_t>(values, values + count);
  }

 private:
  static void check(tessera_status s, const char* key, const char* type) {
    TESSERA_CHECK(s == TESSERA_OK, TESSERA_ERR_INVALID_ARGUMENT, "option '", key,
                  "' is not declared as ", type);
  }
  const tessera_host_api* api_;
  const tessera_options* opts_;
};

namespace detail {
// Throws the host's message for a failed call into a host-implemented table.
inline void check_host_call(const Host& host, tessera_status status, const char* what) {
  if (status == TESSERA_OK) return;
  const tessera_host_api* api = host.raw();
  const char* msg = nullptr;
  if (api != nullptr &&
      api->struct_size >= offsetof(tessera_host_api, last_error) + sizeof(void*) &&
      api->last_error != nullptr) {
    msg = api->last_error(api->ctx);
  }
  const std::string_view text = (msg != nullptr && *msg != '\0') ? msg : status_name(status);
  // The host's message may name the call already ("state read: ...").
  const std::string prefix = ::tessera::detail::concat(what, ": ");
  throw Error(status, text.starts_with(prefix) ? std::string(text)
                                               : ::tessera::detail::concat(prefix, text));
}
}  // namespace detail

inline void Host::fill(std::span<float> x, float value) const {
  if (x.empty()) return;
  if (!passes_on_host()) {
    for (float& v : x) v = value;
    return;
  }
  detail::check_host_call(*this, api_->vec_fill(api_->ctx, x.data(), x.size(), value),
                          "host vec_fill");
}

inline void Host::scale(std::span<float> x, float factor) const {
  if (x.empty() || factor == 1.0F) return;
  if (!passes_on_host()) {
    scale_in_place(x, factor);
    return;
  }
  detail::check_host_call(*this, api_->vec_scale(api_->ctx, x.data(), x.size(), factor),
                          "host vec_scale");
}

inline double Host::sum_squares(std::span<const float> x) const {
  if (x.empty()) return 0.0;
  if (!passes_on_host()) return ::tessera::sdk::sum_squares(x);
  double total = 0.0;
  detail::check_host_call(*this, api_->vec_sum_squares(api_->ctx, x.data(), x.size(), &total),
                          "host vec_sum_squares");
  return total;
}

}  // namespace tessera::sdk
