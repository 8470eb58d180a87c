#include "fake_host.hpp"

#include <cstdio>

namespace tessera::test {

namespace {

thread_local std::string t_error;                   // NOLINT: per-thread error slot
thread_local tessera_status t_status = TESSERA_OK;  // NOLINT

const char* level_name(tessera_log_level level) {
  static constexpr std::array<const char*, 6> kNames = {"trace", "debug", "info",
                                                        "warn",  "error", "critical"};
  return level >= 0 && level < 6 ? kNames[static_cast<size_t>(level)] : "?";
}

}  // namespace

FakeHost::FakeHost() {
  api_.struct_size = sizeof(tessera_host_api);
  api_.abi_major = TESSERA_ABI_MAJOR;
  api_.abi_minor = TESSERA_ABI_MINOR;
  api_.ctx = this;
  api_.log = &FakeHost::log;
  api_.log_level = &FakeHost::log_level;
  api_.set_error = &FakeHost::set_error;
  api_.mem_track = &FakeHost::mem_track;
  api_.option_bool = &FakeHost::option_bool;
  api_.option_int = &FakeHost::option_int;
  api_.option_float = &FakeHost::option_float;
  api_.option_string = &FakeHost::option_string;
  api_.thread_rank = &FakeHost::thread_rank;
}

std::string FakeHost::last_error() { return t_error; }
tessera_status FakeHost::last_status() { return t_status; }

int64_t FakeHost::tracked(int32_t rank, tessera_mem_category category) const {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = memory_.find({rank, category});
  return it == memory_.end() ? 0 : it->second;
}

std::vector<std::string> FakeHost::logs() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return logs_;
}

void FakeHost::log(void* ctx, tessera_log_level level, int32_t rank, const char* message) {
  auto* self = static_cast<FakeHost*>(ctx);
  std::string line =
      std::string("[") + level_name(level) + "] [rank " + std::to_string(rank) + "] " + message;
  if (level >= TESSERA_LOG_WARN) std::fprintf(stderr, "%s\n", line.c_str());
  const std::lock_guard<std::mutex> lock(self->mu_);
  self->logs_.push_back(std::move(line));
}

tessera_log_level FakeHost::log_level(void* /*ctx*/) { return TESSERA_LOG_DEBUG; }

void FakeHost::set_error(void* /*ctx*/, tessera_status status, const char* message) {
  t_status = status;
  t_error = message != nullptr ? message : "";
}

void FakeHost::mem_track(void* ctx, int32_t rank, tessera_mem_category category, int64_t delta) {
  auto* self = static_cast<FakeHost*>(ctx);
  const std::lock_guard<std::mutex> lock(self->mu_);
  self->memory_[{rank, category}] += delta;
}

template <typename T>
tessera_status FakeHost::get(const tessera_options* opts, const char* key, T* out) {
  if (opts == nullptr || key == nullptr || out == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  const auto it = opts->values.find(key);
  if (it == opts->values.end() || !std::holds_alternative<T>(it->second)) {
    return TESSERA_ERR_INVALID_ARGUMENT;
  }
  *out = std::get<T>(it->second);
  return TESSERA_OK;
}

tessera_status FakeHost::option_bool(void* /*ctx*/, const tessera_options* o, const char* k,
                                     int32_t* v) {
  bool b = false;
  const tessera_status s = get(o, k, &b);
  if (s == TESSERA_OK) *v = b ? 1 : 0;
  return s;
}
tessera_status FakeHost::option_int(void* /*ctx*/, const tessera_options* o, const char* k,
                                    int64_t* v) {
  return get(o, k, v);
}
tessera_status FakeHost::option_float(void* /*ctx*/, const tessera_options* o, const char* k,
                                      double* v) {
  return get(o, k, v);
}
tessera_status FakeHost::option_string(void* /*ctx*/, const tessera_options* o, const char* k,
                                       const char** v) {
  if (o == nullptr || k == nullptr || v == nullptr) return TESSERA_ERR_INVALID_ARGUMENT;
  const auto it = o->values.find(k);
  if (it == o->values.end() || !std::holds_alternative<std::string>(it->second)) {
    return TESSERA_ERR_INVALID_ARGUMENT;
  }
  *v = std::get<std::string>(it->second).c_str();
  return TESSERA_OK;
}

int32_t FakeHost::thread_rank(void* /*ctx*/) { return TESSERA_RANK_UNKNOWN; }

}  // namespace tessera::test
