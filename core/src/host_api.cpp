#include "tessera/core/host_api.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "host_store.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/device.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/options.hpp"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"
#include "train/host_call.hpp"

namespace tessera {
namespace {

// The error a plugin recorded on this thread with set_error, until the host
// takes it.
struct ThreadError {
  tessera_status status = TESSERA_OK;
  std::string message;
};
thread_local ThreadError t_error;

// Why the last failed call into a host-implemented table failed, for
// tessera_host_api.last_error.
thread_local std::string t_host_call_error;

HostContext* self(void* ctx) noexcept { return static_cast<HostContext*>(ctx); }

spdlog::level::level_enum to_spdlog(tessera_log_level level) noexcept {
  if (level <= TESSERA_LOG_TRACE) return spdlog::level::trace;
  if (level >= TESSERA_LOG_CRITICAL) return spdlog::level::critical;
  return static_cast<spdlog::level::level_enum>(level);
}

// ---- the functions behind tessera_host_api; none lets an exception out ----

void host_log(void* ctx, tessera_log_level level, int32_t rank, const char* message) noexcept {
  try {
    const auto& logger = self(ctx)->logger();
    const auto spd_level = to_spdlog(level);
    if (!logger->should_log(spd_level)) return;
    const std::string_view text = message != nullptr ? message : "";
    if (rank >= 0) {
      // The rank flag of the pattern reads the thread's rank while the line
      // is formatted (synchronously, in this thread).
      const ThreadRankGuard guard(rank);
      logger->log(spd_level, "{}", text);
    } else {
      logger->log(spd_level, "{}", text);
    }
  } catch (...) {
    // A failed log line must not fail the plugin's call.
  }
}

tessera_log_level host_log_level(void* ctx) noexcept {
  // spdlog's levels and the ABI's share values; "off" (6) is above every
  // level a plugin can use, so nothing is enabled.
  return static_cast<tessera_log_level>(self(ctx)->logger()->level());
}

void host_set_error(void* /*ctx*/, tessera_status status, const char* message) noexcept {
  try {
    t_error.status = status;
    t_error.message = message != nullptr ? message : "";
  } catch (...) {
    t_error.message.clear();  // out of memory: keep the status only
  }
  // A plugin calling another plugin directly (a strategy calling its
  // backend) reads this through last_error.
  set_host_call_error(t_error.message);
}

void host_mem_track(void* /*ctx*/, int32_t rank, tessera_mem_category category,
                    int64_t delta_bytes) noexcept {
  // TESSERA_RANK_UNKNOWN: the rank of the calling thread, if it has one.
  MemoryTracker::instance().add(rank >= 0 ? rank : thread_rank(), category, delta_bytes);
}

// The value of `key`, or nullptr when the set or the key is missing.
const tessera_options::Value* find_option(const tessera_options* opts, const char* key) noexcept {
  if (opts == nullptr || key == nullptr) return nullptr;
  const auto it = opts->values.find(std::string_view(key));
  return it != opts->values.end() ? &it->second : nullptr;
}

tessera_status host_option_bool(void* /*ctx*/, const tessera_options* opts, const char* key,
                                int32_t* out) noexcept {
  const auto* value = find_option(opts, key);
  const bool* v = value != nullptr ? std::get_if<bool>(value) : nullptr;
  if (v == nullptr || out == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  *out = *v ? 1 : 0;
  return TESSERA_OK;
}

tessera_status host_option_int(void* /*ctx*/, const tessera_options* opts, const char* key,
                               int64_t* out) noexcept {
  const auto* value = find_option(opts, key);
  const int64_t* v = value != nullptr ? std::get_if<int64_t>(value) : nullptr;
  if (v == nullptr || out == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  *out = *v;
  return TESSERA_OK;
}

tessera_status host_option_float(void* /*ctx*/, const tessera_options* opts, const char* key,
                                 double* out) noexcept {
  const auto* value = find_option(opts, key);
  if (value == nullptr || out == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  if (const auto* d = std::get_if<double>(value)) {
    *out = *d;
    return TESSERA_OK;
  }
  if (const auto* i = std::get_if<int64_t>(value)) {  // an int option read as float
    *out = static_cast<double>(*i);
    return TESSERA_OK;
  }
  return TESSERA_ERR_INVALID_ARGUMENT;
}

tessera_status host_option_string(void* /*ctx*/, const tessera_options* opts, const char* key,
                                  const char** out) noexcept {
  const auto* value = find_option(opts, key);
  const std::string* v = value != nullptr ? std::get_if<std::string>(value) : nullptr;
  if (v == nullptr || out == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  *out = v->c_str();  // owned by the options set
  return TESSERA_OK;
}

tessera_status host_option_int_list(void* /*ctx*/, const tessera_options* opts, const char* key,
                                    const int64_t** values, uint64_t* count) noexcept {
  const auto* value = find_option(opts, key);
  const auto* v = value != nullptr ? std::get_if<std::vector<int64_t>>(value) : nullptr;
  if (v == nullptr || values == nullptr || count == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  *values = v->empty() ? nullptr : v->data();  // owned by the options set
  *count = v->size();
  return TESSERA_OK;
}

int64_t host_batch_examples(void* /*ctx*/, const tessera_batch* batch) noexcept {
  return batch != nullptr ? reinterpret_cast<const Batch*>(batch)->size : 0;
}

tessera_status host_batch_tensor(void* ctx, const tessera_batch* batch, const char* name,
                                 tessera_tensor_view* out) noexcept {
  const auto fail = [ctx](const std::string& message) {
    host_set_error(ctx, TESSERA_ERR_INVALID_ARGUMENT, message.c_str());
    return TESSERA_ERR_INVALID_ARGUMENT;
  };
  if (batch == nullptr || name == nullptr || out == nullptr ||
      out->struct_size < sizeof(tessera_tensor_view)) {
    return fail("batch_tensor: NULL argument or output struct too small");
  }
  const auto& b = *reinterpret_cast<const Batch*>(batch);
  tessera_tensor_view view{};
  view.struct_size = sizeof view;
  const std::string_view n = name;
  if (b.is_sequence() && (n == "tokens" || n == "targets")) {
    const auto& v = n == "tokens" ? b.tokens : b.targets;
    view.dtype = TESSERA_I32;
    view.data = v.empty() ? nullptr : v.data();
    view.ndim = 2;
    view.shape[0] = b.size;
    view.shape[1] = b.seq_len;
  } else if (!b.is_sequence() && n == "features") {
    view.dtype = TESSERA_F32;
    view.data = b.inputs.empty() ? nullptr : b.inputs.data();
    view.ndim = 2;
    view.shape[0] = b.size;
    view.shape[1] = b.features;
  } else if (!b.is_sequence() && n == "targets") {
    view.dtype = TESSERA_I32;
    view.data = b.targets.empty() ? nullptr : b.targets.data();
    view.ndim = 1;
    view.shape[0] = b.size;
  } else {
    return fail("batch has no tensor '" + std::string(n) + "' (it has " +
                (b.is_sequence() ? "tokens, targets" : "features, targets") + ")");
  }
  *out = view;
  return TESSERA_OK;
}

int32_t host_thread_rank(void* /*ctx*/) noexcept {
  const int rank = thread_rank();
  return rank >= 0 ? rank : TESSERA_RANK_UNKNOWN;
}

const char* host_last_error(void* /*ctx*/) noexcept { return host_call_error(); }

std::atomic<int> g_intra_op_threads{1};

int32_t host_intra_op_threads(void* /*ctx*/) noexcept { return intra_op_threads(); }

void host_compute_device(void* /*ctx*/, tessera_device* out) noexcept {
  if (out == nullptr) return;
  const bool cuda = run_device() == ComputeDevice::cuda;
  *out = tessera_device{cuda ? TESSERA_DEVICE_CUDA : TESSERA_DEVICE_CPU,
                        cuda ? rank_device_ordinal() : 0};
}

tessera_dtype host_compute_precision(void* /*ctx*/) noexcept {
  switch (run_precision()) {
    case ComputePrecision::bf16:
      return TESSERA_BF16;
    case ComputePrecision::f16:
      return TESSERA_F16;
    case ComputePrecision::f32:
    case ComputePrecision::tf32:  // f32 data; compute_tf32 says how it is multiplied
      break;
  }
  return TESSERA_F32;
}

int32_t host_compute_tf32(void* /*ctx*/) noexcept {
  return run_precision() == ComputePrecision::tf32 ? 1 : 0;
}

constexpr std::size_t kHostAlignment = 64;

void* host_mem_alloc(void* ctx, uint64_t bytes) noexcept {
  const std::size_t size = std::max<std::size_t>(static_cast<std::size_t>(bytes), 1);
  if (run_device() != ComputeDevice::cuda) {
    void* ptr = ::operator new (size, std::align_val_t{kHostAlignment}, std::nothrow);
    if (ptr == nullptr) {
      host_set_error(ctx, TESSERA_ERR_OUT_OF_MEMORY,
                     ("mem_alloc: cannot allocate " + std::to_string(bytes) + " B").c_str());
      return nullptr;
    }
    std::memset(ptr, 0, size);
    return ptr;
  }
  std::string error;
  void* ptr = device::managed_alloc(rank_device_ordinal(), size, error);
  if (ptr == nullptr)
    host_set_error(ctx, TESSERA_ERR_OUT_OF_MEMORY, ("mem_alloc: " + error).c_str());
  return ptr;
}

// Frees by what the pointer is, so memory of a CUDA run may outlive it.
void host_mem_free(void* /*ctx*/, void* ptr, uint64_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  int32_t ordinal = 0;
  if (device::cuda_pointer(ptr, ordinal)) {
    device::managed_free(ptr);
  } else {
    ::operator delete (ptr, std::align_val_t{kHostAlignment});
  }
}

void host_pointer_device(void* /*ctx*/, const void* ptr, tessera_device* out) noexcept {
  if (out == nullptr) return;
  *out = tessera_device{TESSERA_DEVICE_CPU, 0};
  int32_t ordinal = 0;
  if (run_device() == ComputeDevice::cuda && device::cuda_pointer(ptr, ordinal)) {
    *out = tessera_device{TESSERA_DEVICE_CUDA, ordinal};
  }
}

std::mutex g_finder_mu;
const void* g_finder_owner = nullptr;  // guarded by g_finder_mu
StrategyFinder& strategy_finder() {
  static StrategyFinder finder;
  return finder;
}

tessera_status host_find_strategy(void* /*ctx*/, const char* name, const char* options,
                                  const tessera_strategy_api** api,
                                  const tessera_host_api** plugin_host,
                                  const tessera_options** resolved, uint32_t* version) noexcept {
  try {
    if (name == nullptr || api == nullptr || plugin_host == nullptr || resolved == nullptr ||
        version == nullptr) {
      host_set_error(nullptr, TESSERA_ERR_INVALID_ARGUMENT, "find_strategy: null argument");
      return TESSERA_ERR_INVALID_ARGUMENT;
    }
    StrategyFinder finder;
    {
      const std::lock_guard lock(g_finder_mu);
      finder = strategy_finder();
    }
    if (!finder) {
      host_set_error(
          nullptr, TESSERA_ERR_UNSUPPORTED,
          (std::string("no plugin registry to find strategy '") + name + "' in").c_str());
      return TESSERA_ERR_UNSUPPORTED;
    }
    const FoundStrategy found = finder(name, options != nullptr ? options : "");
    *api = found.api;
    *plugin_host = found.host;
    *resolved = found.options;
    *version = found.version;
    return TESSERA_OK;
  } catch (const Error& e) {
    host_set_error(nullptr, e.status(), e.what());
    return e.status();
  } catch (const std::exception& e) {
    host_set_error(nullptr, TESSERA_ERR_INTERNAL, e.what());
    return TESSERA_ERR_INTERNAL;
  }
}

// ---- ABI 1.7: element-wise passes where the buffer is ----

// Runs `fn` for a vec_* call over `count` elements of `x`, refusing a NULL
// buffer; failures become a status and the host-call error.
template <typename Fn>
tessera_status vector_call(const char* what, const void* x, uint64_t count, Fn&& fn) noexcept {
  return train::detail::guard_host_call(
      [&] { return std::string(what) + " of " + std::to_string(count) + " elements"; },
      [&] {
        TESSERA_CHECK(x != nullptr || count == 0, TESSERA_ERR_INVALID_ARGUMENT,
                      "the buffer is NULL");
        std::forward<Fn>(fn)(static_cast<std::size_t>(count));
      });
}

tessera_status host_vec_fill(void* /*ctx*/, float* x, uint64_t count, float value) noexcept {
  return vector_call("vec_fill", x, count, [&](std::size_t n) {
    if (!device::fill_on_cuda(x, n, value)) std::fill_n(x, n, value);
  });
}

tessera_status host_vec_scale(void* /*ctx*/, float* x, uint64_t count, float factor) noexcept {
  return vector_call("vec_scale", x, count, [&](std::size_t n) {
    if (factor == 1.0F) return;
    if (!device::scale_on_cuda(x, n, factor)) sdk::scale_in_place(std::span<float>(x, n), factor);
  });
}

tessera_status host_vec_sum_squares(void* /*ctx*/, const float* x, uint64_t count,
                                    double* out) noexcept {
  return vector_call("vec_sum_squares", x, count, [&](std::size_t n) {
    TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "the output is NULL");
    double total = 0.0;
    if (!device::sum_squares_on_cuda(x, n, total)) {
      total = sdk::sum_squares(std::span<const float>(x, n));
    }
    *out = total;
  });
}

}  // namespace

void set_strategy_finder(const void* owner, StrategyFinder finder) {
  const std::lock_guard lock(g_finder_mu);
  strategy_finder() = std::move(finder);
  g_finder_owner = owner;
}

void clear_strategy_finder(const void* owner) noexcept {
  const std::lock_guard lock(g_finder_mu);
  if (g_finder_owner != owner) return;
  strategy_finder() = nullptr;
  g_finder_owner = nullptr;
}

int intra_op_threads() noexcept { return g_intra_op_threads.load(std::memory_order_relaxed); }

void set_intra_op_threads(int threads) noexcept {
  g_intra_op_threads.store(std::max(threads, 1), std::memory_order_relaxed);
}

HostContext::HostContext(const std::string& logger_name) : logger_(get_logger(logger_name)) {
  api_.struct_size = sizeof(tessera_host_api);
  api_.abi_major = TESSERA_ABI_MAJOR;
  api_.abi_minor = TESSERA_ABI_MINOR;
  api_.ctx = this;
  api_.log = &host_log;
  api_.log_level = &host_log_level;
  api_.set_error = &host_set_error;
  api_.mem_track = &host_mem_track;
  api_.option_bool = &host_option_bool;
  api_.option_int = &host_option_int;
  api_.option_float = &host_option_float;
  api_.option_string = &host_option_string;
  api_.thread_rank = &host_thread_rank;
  api_.last_error = &host_last_error;
  api_.option_int_list = &host_option_int_list;
  api_.batch_examples = &host_batch_examples;
  api_.batch_tensor = &host_batch_tensor;
  api_.intra_op_threads = &host_intra_op_threads;
  api_.compute_device = &host_compute_device;
  api_.mem_alloc = &host_mem_alloc;
  api_.mem_free = &host_mem_free;
  api_.pointer_device = &host_pointer_device;
  api_.compute_precision = &host_compute_precision;
  api_.find_strategy = &host_find_strategy;
  api_.vec_fill = &host_vec_fill;
  api_.vec_scale = &host_vec_scale;
  api_.vec_sum_squares = &host_vec_sum_squares;
  install_store_calls(api_);
  api_.compute_tf32 = &host_compute_tf32;
}

std::string take_thread_error() {
  std::string message = std::move(t_error.message);
  t_error = ThreadError{};
  return message;
}

void set_thread_error(tessera_status status, const std::string& message) noexcept {
  host_set_error(nullptr, status, message.c_str());
}

void set_host_call_error(const std::string& message) noexcept {
  try {
    t_host_call_error = message;
  } catch (...) {
    t_host_call_error.clear();  // out of memory: the caller falls back to the status name
  }
}

const char* host_call_error() noexcept { return t_host_call_error.c_str(); }

void clear_host_call_error() noexcept { t_host_call_error.clear(); }

void throw_if_failed(tessera_status status, const std::string& what) {
  std::string message = take_thread_error();  // also drops a stale message after success
  if (status == TESSERA_OK) return;
  if (message.empty()) message = status_name(status);
  throw Error(status, what + ": " + message);
}

void throw_if_failed(tessera_status status, const std::string& what,
                     const std::filesystem::path& plugin) {
  throw_if_failed(status,
                  status == TESSERA_ERR_INTERNAL ? what + " (" + plugin.string() + ")" : what);
}

}  // namespace tessera
