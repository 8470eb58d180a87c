#include "checked_comm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::detail {
namespace {

using Clock = std::chrono::steady_clock;

// comm_split, numbered with the collectives.
constexpr int32_t kSplitOp = 64;

bool is_p2p(int32_t coll) noexcept {
  return coll == TESSERA_COLL_SEND || coll == TESSERA_COLL_RECV;
}
bool has_root(int32_t coll) noexcept {
  return coll == TESSERA_COLL_BROADCAST || coll == TESSERA_COLL_REDUCE ||
         coll == TESSERA_COLL_GATHER || coll == TESSERA_COLL_SCATTER;
}
bool has_reduction(int32_t coll) noexcept {
  return coll == TESSERA_COLL_ALLREDUCE || coll == TESSERA_COLL_REDUCE ||
         coll == TESSERA_COLL_REDUCE_SCATTER;
}

// What must agree across ranks about one operation.
struct Fingerprint {
  int32_t coll = 0;
  tessera_dtype dtype = TESSERA_F32;
  int32_t device = TESSERA_DEVICE_CPU;
  tessera_reduce_op op = TESSERA_SUM;
  uint64_t count = 0;  // elements per rank, in the convention of the op (backend.h)
  int32_t root = -1;   // rooted collectives; the peer of send/recv
  int32_t tag = 0;     // send/recv

  bool operator==(const Fingerprint&) const = default;
};

Fingerprint fingerprint_of(const tessera_coll_args& a, int32_t size) {
  Fingerprint f;
  f.coll = a.coll;
  switch (a.coll) {
    case TESSERA_COLL_BROADCAST:
    case TESSERA_COLL_REDUCE_SCATTER:
    case TESSERA_COLL_SCATTER:
    case TESSERA_COLL_RECV:
      f.count = a.recv.count;
      f.dtype = a.recv.dtype;
      f.device = a.recv.device.type;
      break;
    case TESSERA_COLL_ALLTOALL:
      f.count = size > 0 ? a.send.count / static_cast<uint64_t>(size) : a.send.count;
      f.dtype = a.send.dtype;
      f.device = a.send.device.type;
      break;
    case TESSERA_COLL_BARRIER:
      break;
    default:
      f.count = a.send.count;
      f.dtype = a.send.dtype;
      f.device = a.send.device.type;
      break;
  }
  if (has_reduction(a.coll)) f.op = a.op;
  if (has_root(a.coll)) f.root = a.root;
  if (is_p2p(a.coll)) {
    f.root = a.peer;
    f.tag = a.tag;
  }
  return f;
}

// "allreduce(f32, 4096, sum)", "broadcast(f32, 16, root 0)", "barrier()".
std::string describe(const Fingerprint& f) {
  if (f.coll == kSplitOp) return "split()";
  if (f.coll == TESSERA_COLL_BARRIER) return "barrier()";
  std::string text = fmt::format("{}({}, {}", coll_name(f.coll), dtype_name(f.dtype), f.count);
  if (has_reduction(f.coll)) text += fmt::format(", {}", reduce_op_name(f.op));
  if (has_root(f.coll)) text += fmt::format(", root {}", f.root);
  if (f.device == TESSERA_DEVICE_CUDA) text += ", cuda";
  text += ')';
  if (f.coll == TESSERA_COLL_SEND) text += fmt::format(" to rank {} tag {}", f.root, f.tag);
  if (f.coll == TESSERA_COLL_RECV) text += fmt::format(" from rank {} tag {}", f.root, f.tag);
  return text;
}

// The words one rank contributes to the comparison of a collective.
constexpr size_t kWords = 4;
using Words = std::array<int64_t, kWords>;

Words words_of(uint64_t number, const Fingerprint& f) {
  const auto packed = static_cast<int64_t>((static_cast<uint64_t>(f.coll) & 0xffU) |
                                           ((static_cast<uint64_t>(f.dtype) & 0xffU) << 8U) |
                                           ((static_cast<uint64_t>(f.op) & 0xffU) << 16U) |
                                           ((static_cast<uint64_t>(f.device) & 0xffU) << 24U));
  return {static_cast<int64_t>(number), packed, static_cast<int64_t>(f.count), f.root};
}

Fingerprint from_words(const int64_t* w) {
  const auto packed = static_cast<uint64_t>(w[1]);
  Fingerprint f;
  f.coll = static_cast<int32_t>(packed & 0xffU);
  f.dtype = static_cast<tessera_dtype>((packed >> 8U) & 0xffU);
  f.op = static_cast<tessera_reduce_op>((packed >> 16U) & 0xffU);
  f.device = static_cast<int32_t>((packed >> 24U) & 0xffU);
  f.count = static_cast<uint64_t>(w[2]);
  f.root = static_cast<int32_t>(w[3]);
  return f;
}

enum class State : uint8_t { posted, done, failed };

struct Entry {
  uint64_t number = 0;  // collective number, or send/recv number
  Fingerprint what;
  State state = State::posted;
  bool verified = false;
  Clock::time_point posted;
  Clock::duration took{};
};

// The last operations of one rank on one communicator.
class Recorder {
 public:
  Recorder(std::string label, std::string backend, int32_t rank, int32_t size, unsigned capacity)
      : label_(std::move(label)),
        backend_(std::move(backend)),
        rank_(rank),
        size_(size),
        ring_(std::max(1U, capacity)) {}

  // Records a new operation; returns its slot id.
  uint64_t add(const Entry& e) {
    const std::lock_guard lock(mu_);
    const uint64_t id = total_++;
    ring_[id % ring_.size()] = e;
    return id;
  }
  void finish(uint64_t id, bool ok) {
    const std::lock_guard lock(mu_);
    if (total_ - id > ring_.size()) return;  // already overwritten
    Entry& e = ring_[id % ring_.size()];
    e.state = ok ? State::done : State::failed;
    e.took = Clock::now() - e.posted;
  }
  [[nodiscard]] std::string text() const {
    const std::lock_guard lock(mu_);
    const uint64_t kept = std::min<uint64_t>(total_, ring_.size());
    std::string out = fmt::format(
        "flight recorder of rank {} of {} on communicator '{}' (backend '{}'): the last {} of {} "
        "operations, oldest first",
        rank_, size_, label_, backend_, kept, total_);
    const auto now = Clock::now();
    for (uint64_t id = total_ - kept; id < total_; ++id) {
      const Entry& e = ring_[id % ring_.size()];
      const char* kind = is_p2p(e.what.coll) ? "p2p" : "collective";
      std::string state;
      switch (e.state) {
        case State::posted:
          state = fmt::format("pending for {:.3f} s",
                              std::chrono::duration<double>(now - e.posted).count());
          break;
        case State::done:
          state = fmt::format("done in {:.3f} ms",
                              std::chrono::duration<double, std::milli>(e.took).count());
          break;
        case State::failed:
          state =
              fmt::format("failed after {:.3f} s", std::chrono::duration<double>(e.took).count());
          break;
      }
      out += fmt::format("\n  {:>10} #{:<6} {:<40} {}{}", kind, e.number, describe(e.what), state,
                         e.verified ? "" : " (not compared)");
    }
    return out;
  }
  // Logs the recorder once (the first failure on this communicator).
  void dump_once() const {
    if (dumped_.exchange(true)) return;
    try {
      const auto log = get_logger("core");
      const std::string all = text();
      size_t start = 0;
      while (start <= all.size()) {
        const size_t end = std::min(all.find('\n', start), all.size());
        log->error("{}", all.substr(start, end - start));
        start = end + 1;
      }
    } catch (...) {
      // A failed log line must not change the error being reported.
    }
  }
  [[nodiscard]] const std::string& label() const noexcept { return label_; }
  [[nodiscard]] const std::string& backend() const noexcept { return backend_; }

 private:
  std::string label_;
  std::string backend_;
  int32_t rank_;
  int32_t size_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;
  uint64_t total_ = 0;
  mutable std::atomic<bool> dumped_{false};
};

struct CheckedComm {
  const tessera_backend_api* api = nullptr;
  tessera_comm* inner = nullptr;
  tessera_comm* shadow = nullptr;  // same ranks, for the comparisons
  CheckSettings settings;
  int32_t rank = 0;
  int32_t size = 0;
  uint64_t collectives = 0;  // numbered from 1; splits count
  uint64_t p2p = 0;
  uint64_t splits = 0;
  std::shared_ptr<Recorder> recorder;
};

struct CheckedWork {
  const tessera_backend_api* api = nullptr;
  tessera_work* inner = nullptr;
  std::shared_ptr<Recorder> recorder;
  uint64_t slot = 0;
  std::string where;  // "collective #57 allreduce(...)" for messages
};

CheckedComm* self(tessera_comm* c) noexcept { return reinterpret_cast<CheckedComm*>(c); }
const CheckedComm* self(const tessera_comm* c) noexcept {
  return reinterpret_cast<const CheckedComm*>(c);
}
tessera_comm* handle(CheckedComm* c) noexcept { return reinterpret_cast<tessera_comm*>(c); }
CheckedWork* self(tessera_work* w) noexcept { return reinterpret_cast<CheckedWork*>(w); }
tessera_work* handle(CheckedWork* w) noexcept { return reinterpret_cast<tessera_work*>(w); }

std::string where_of(const CheckedComm& c, const Entry& e) {
  return fmt::format("{} #{} {} on communicator '{}'", is_p2p(e.what.coll) ? "p2p" : "collective",
                     e.number, describe(e.what), c.recorder->label());
}

// Marks operation `slot` failed and re-records the backend's error of the
// failed call with where it happened.
tessera_status failed(Recorder& recorder, uint64_t slot, tessera_status status,
                      const std::string& where) {
  recorder.finish(slot, false);
  std::string message = take_thread_error();
  if (message.empty()) message = status_name(status);
  set_thread_error(status, where + ": " + message);
  recorder.dump_once();
  return status;
}

// Compares entry `e` across the group on the shadow communicator.
tessera_status verify(CheckedComm& c, const Entry& e, uint64_t slot, int64_t timeout_ms) {
  const Words mine = words_of(e.number, e.what);
  std::vector<int64_t> all(kWords * static_cast<size_t>(c.size));
  tessera_coll_args args{};
  args.struct_size = sizeof args;
  args.coll = TESSERA_COLL_ALLGATHER;
  args.send = tessera_buffer{const_cast<int64_t*>(mine.data()), kWords, TESSERA_I64,  // NOLINT
                             tessera_device{TESSERA_DEVICE_CPU, 0}};
  args.recv =
      tessera_buffer{all.data(), all.size(), TESSERA_I64, tessera_device{TESSERA_DEVICE_CPU, 0}};
  args.peer = -1;
  args.timeout_ms = timeout_ms;
  const tessera_status status = c.api->post(c.shadow, &args, nullptr);
  if (status != TESSERA_OK) {
    std::string where = where_of(c, e);
    if (status == TESSERA_ERR_TIMEOUT) {
      where += fmt::format(
          ": the other ranks did not post their collective #{} in time (a rank may have posted "
          "fewer collectives than this one, or be stuck)",
          e.number);
    } else {
      where += ": comparing it with the other ranks failed";
    }
    return failed(*c.recorder, slot, status, where);
  }
  // The first rank that differs from rank 0: every rank sees the same
  // table, so every rank reports the same pair.
  const int64_t* first = all.data();
  for (int32_t odd = 1; odd < c.size; ++odd) {
    const int64_t* other = all.data() + kWords * static_cast<size_t>(odd);
    if (std::equal(first, first + kWords, other)) continue;
    set_thread_error(
        TESSERA_ERR_MISMATCH,
        fmt::format("collective mismatch on communicator '{}' (backend '{}'): rank {} posted {} as "
                    "its collective #{} while rank 0 posted {}{}",
                    c.recorder->label(), c.recorder->backend(), odd, describe(from_words(other)),
                    other[0], describe(from_words(first)),
                    other[0] != first[0] ? fmt::format(" as its #{}", first[0]) : std::string()));
    c.recorder->finish(slot, false);
    c.recorder->dump_once();
    return TESSERA_ERR_MISMATCH;
  }
  return TESSERA_OK;
}

// Numbers operation `what` and records it in `e` and `slot`; compares it
// across the group first when `verify_it` (send/recv never are).
tessera_status begin(CheckedComm& c, const Fingerprint& what, bool verify_it, int64_t timeout_ms,
                     Entry& e, uint64_t& slot) {
  e.what = what;
  e.number = is_p2p(what.coll) ? ++c.p2p : ++c.collectives;
  e.verified = verify_it && !is_p2p(what.coll);
  e.posted = Clock::now();
  slot = c.recorder->add(e);
  return e.verified ? verify(c, e, slot, timeout_ms) : TESSERA_OK;
}

// Numbers and records `args`; compares it first when `verify_it`.
tessera_status post_checked(CheckedComm& c, const tessera_coll_args& args, tessera_work** work,
                            bool verify_it) {
  Entry e;
  uint64_t slot = 0;
  if (const tessera_status status =
          begin(c, fingerprint_of(args, c.size), verify_it, args.timeout_ms, e, slot);
      status != TESSERA_OK) {
    return status;
  }
  tessera_work* inner = nullptr;
  const tessera_status status = c.api->post(c.inner, &args, work != nullptr ? &inner : nullptr);
  if (status != TESSERA_OK) return failed(*c.recorder, slot, status, where_of(c, e));
  if (work == nullptr || inner == nullptr) {
    c.recorder->finish(slot, true);
    if (work != nullptr) *work = nullptr;
    return TESSERA_OK;
  }
  try {
    auto* w = new CheckedWork{c.api, inner, c.recorder, slot, where_of(c, e)};
    *work = handle(w);
  } catch (...) {
    // Keep the backend's work reachable: wait for it here instead.
    const tessera_status s = c.api->work_wait(inner, -1);
    c.api->work_free(inner);
    *work = nullptr;
    if (s != TESSERA_OK) return failed(*c.recorder, slot, s, where_of(c, e));
    c.recorder->finish(slot, true);
  }
  return TESSERA_OK;
}

template <typename Body>
tessera_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    set_thread_error(TESSERA_ERR_OUT_OF_MEMORY, "checked communicator: out of memory");
    return TESSERA_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_thread_error(TESSERA_ERR_INTERNAL, std::string("checked communicator: ") + e.what());
    return TESSERA_ERR_INTERNAL;
  }
}

tessera_status make_checked(const tessera_backend_api& api, tessera_comm* comm,
                            const CheckSettings& settings, std::string label, tessera_comm** out) {
  tessera_comm* shadow = nullptr;
  CheckSettings effective = settings;
  const tessera_status status = api.comm_split(comm, 0, 0, &shadow);
  if (status == TESSERA_ERR_UNSUPPORTED) {
    // Every rank of the group gets the same answer: compare nothing, record.
    const std::string why = take_thread_error();
    if (effective.verify) {
      get_logger("core")->warn(
          "backend '{}' cannot split communicator '{}' ({}): its collectives are recorded but not "
          "compared across ranks",
          settings.backend, label, why);
    }
    effective.verify = false;
  } else if (status != TESSERA_OK) {
    api.comm_destroy(comm);
    return status;
  }
  try {
    auto c = std::make_unique<CheckedComm>();
    c->api = &api;
    c->inner = comm;
    c->shadow = shadow;
    c->settings = effective;
    c->rank = api.comm_rank(comm);
    c->size = api.comm_size(comm);
    c->recorder = std::make_shared<Recorder>(std::move(label), effective.backend, c->rank, c->size,
                                             effective.recorder_size);
    *out = handle(c.release());
    return TESSERA_OK;
  } catch (...) {
    if (shadow != nullptr) api.comm_destroy(shadow);
    api.comm_destroy(comm);
    set_thread_error(TESSERA_ERR_OUT_OF_MEMORY, "checked communicator: out of memory");
    return TESSERA_ERR_OUT_OF_MEMORY;
  }
}

// ---- the table ----

tessera_status no_create(const tessera_host_api* /*host*/, const tessera_options* /*opts*/,
                         const tessera_backend_config* /*config*/, tessera_backend** out) {
  *out = nullptr;
  set_thread_error(TESSERA_ERR_UNSUPPORTED, "checked communicators are made by the host");
  return TESSERA_ERR_UNSUPPORTED;
}
void no_destroy(tessera_backend* /*backend*/) {}
tessera_status no_connect(tessera_backend* /*backend*/, int32_t /*rank*/, tessera_comm** out) {
  *out = nullptr;
  set_thread_error(TESSERA_ERR_UNSUPPORTED, "checked communicators are made by the host");
  return TESSERA_ERR_UNSUPPORTED;
}

int32_t checked_rank(const tessera_comm* comm) { return self(comm)->rank; }
int32_t checked_size(const tessera_comm* comm) { return self(comm)->size; }

tessera_status checked_split(tessera_comm* comm, int32_t color, int32_t key, tessera_comm** out) {
  return guarded([&]() -> tessera_status {
    CheckedComm& c = *self(comm);
    *out = nullptr;
    Fingerprint split;
    split.coll = kSplitOp;
    Entry e;
    uint64_t slot = 0;
    tessera_status status = begin(c, split, c.settings.verify, 0, e, slot);
    if (status != TESSERA_OK) return status;
    tessera_comm* inner = nullptr;
    status = c.api->comm_split(c.inner, color, key, &inner);
    if (status != TESSERA_OK) return failed(*c.recorder, slot, status, where_of(c, e));
    const uint64_t number = ++c.splits;
    if (inner != nullptr) {
      status =
          make_checked(*c.api, inner, c.settings,
                       fmt::format("{}/split{}:color{}", c.recorder->label(), number, color), out);
    }
    if (status != TESSERA_OK) return failed(*c.recorder, slot, status, where_of(c, e));
    c.recorder->finish(slot, true);
    return TESSERA_OK;
  });
}

void checked_abort(tessera_comm* comm, const char* reason) {
  CheckedComm& c = *self(comm);
  c.api->comm_abort(c.inner, reason);
  if (c.shadow != nullptr) c.api->comm_abort(c.shadow, reason);
}

void checked_destroy(tessera_comm* comm) {
  std::unique_ptr<CheckedComm> c(self(comm));
  if (c->shadow != nullptr) c->api->comm_destroy(c->shadow);
  c->api->comm_destroy(c->inner);
}

tessera_status checked_post(tessera_comm* comm, const tessera_coll_args* args,
                            tessera_work** work) {
  return guarded([&]() -> tessera_status {
    CheckedComm& c = *self(comm);
    return post_checked(c, *args, work, c.settings.verify);
  });
}

tessera_status work_done(CheckedWork& w, tessera_status status) {
  if (status != TESSERA_OK) return failed(*w.recorder, w.slot, status, w.where);
  w.recorder->finish(w.slot, true);
  return TESSERA_OK;
}

tessera_status checked_wait(tessera_work* work, int64_t timeout_ms) {
  CheckedWork& w = *self(work);
  const tessera_status status = w.api->work_wait(w.inner, timeout_ms);
  if (status == TESSERA_ERR_TIMEOUT && timeout_ms >= 0) return status;  // still running
  return guarded([&]() -> tessera_status { return work_done(w, status); });
}

tessera_status checked_test(tessera_work* work, int32_t* done) {
  CheckedWork& w = *self(work);
  const tessera_status status = w.api->work_test(w.inner, done);
  if (*done == 0 && status == TESSERA_OK) return status;
  return guarded([&]() -> tessera_status { return work_done(w, status); });
}

void checked_work_free(tessera_work* work) {
  std::unique_ptr<CheckedWork> w(self(work));
  w->api->work_free(w->inner);
}

tessera_status checked_raw_post(tessera_comm* comm, const tessera_coll_args* args) {
  CheckedComm& c = *self(comm);
  const tessera_backend_api& api = *c.api;
  if (api.struct_size < offsetof(tessera_backend_api, raw_post) + sizeof api.raw_post ||
      api.raw_post == nullptr) {
    set_thread_error(TESSERA_ERR_UNSUPPORTED, "the backend offers no raw library call");
    return TESSERA_ERR_UNSUPPORTED;
  }
  return api.raw_post(c.inner, args);
}

bool has_shrink(const tessera_backend_api& api) {
  return api.struct_size >= offsetof(tessera_backend_api, comm_shrink) + sizeof api.comm_shrink &&
         api.comm_shrink != nullptr;
}

// The survivors' new group, checked like the old one: the shadow used to
// compare operations failed with the group, so the new one gets its own.
tessera_status checked_shrink(tessera_comm* comm, int64_t grace_ms, tessera_comm** out) {
  return guarded([&]() -> tessera_status {
    CheckedComm& c = *self(comm);
    *out = nullptr;
    tessera_comm* inner = nullptr;
    const tessera_status status = c.api->comm_shrink(c.inner, grace_ms, &inner);
    if (status != TESSERA_OK) return status;
    const uint64_t number = ++c.splits;
    return make_checked(*c.api, inner, c.settings,
                        fmt::format("{}/shrink{}", c.recorder->label(), number), out);
  });
}

// The grown group, checked like the old one (with a shadow of its own);
// NULL when nobody joined.
tessera_status checked_grow(tessera_comm* comm, int64_t wait_ms, tessera_comm** out) {
  return guarded([&]() -> tessera_status {
    CheckedComm& c = *self(comm);
    *out = nullptr;
    tessera_comm* inner = nullptr;
    const tessera_status status = c.api->comm_grow(c.inner, wait_ms, &inner);
    if (status != TESSERA_OK || inner == nullptr) return status;
    const uint64_t number = ++c.splits;
    return make_checked(*c.api, inner, c.settings,
                        fmt::format("{}/grow{}", c.recorder->label(), number), out);
  });
}

}  // namespace

bool has_grow(const tessera_backend_api& api) noexcept {
  return api.struct_size >= offsetof(tessera_backend_api, comm_grow) + sizeof api.comm_grow &&
         api.comm_grow != nullptr;
}

tessera_backend_api checked_api(const tessera_backend_api& inner) {
  tessera_backend_api api{};
  api.struct_size = sizeof api;
  api.capabilities = inner.capabilities;
  api.create = &no_create;
  api.destroy = &no_destroy;
  api.connect = &no_connect;
  api.comm_rank = &checked_rank;
  api.comm_size = &checked_size;
  api.comm_split = &checked_split;
  api.comm_abort = &checked_abort;
  api.comm_destroy = &checked_destroy;
  api.post = &checked_post;
  api.work_wait = &checked_wait;
  api.work_test = &checked_test;
  api.work_free = &checked_work_free;
  api.raw_post = &checked_raw_post;
  api.comm_shrink = has_shrink(inner) ? &checked_shrink : nullptr;
  api.comm_grow = has_grow(inner) ? &checked_grow : nullptr;
  return api;
}

tessera_status wrap(const tessera_backend_api& inner, tessera_comm* comm,
                    const CheckSettings& settings, const std::string& label, tessera_comm** out) {
  return guarded(
      [&]() -> tessera_status { return make_checked(inner, comm, settings, label, out); });
}

tessera_comm* inner_comm(tessera_comm* checked) noexcept { return self(checked)->inner; }

tessera_status post_unverified(tessera_comm* checked, const tessera_coll_args* args) {
  return guarded(
      [&]() -> tessera_status { return post_checked(*self(checked), *args, nullptr, false); });
}

std::string flight_recorder(tessera_comm* checked) { return self(checked)->recorder->text(); }

}  // namespace tessera::detail
