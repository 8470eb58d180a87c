// Header-only C++ SDK for backend plugins.
//
// A backend author derives from tessera::sdk::Backend, Comm and Work, then
// writes one TESSERA_REGISTER_BACKEND(...) line. The macro produces the C
// interface table whose noexcept forwarders catch every exception and return
// a status plus message, and the exported entry point.
//
//   class MyBackend : public tessera::sdk::Backend {
//    public:
//     MyBackend(const tessera::sdk::Host& host, const tessera::sdk::Options& opts,
//               const tessera_backend_config& config);
//     std::unique_ptr<tessera::sdk::Comm> connect(int32_t rank) override;
//   };
//   TESSERA_REGISTER_BACKEND(MyBackend, "mine", "0.1.0", "My transport",
//                            TESSERA_BACKEND_CAP_CPU_BUFFERS, kMyOptions)
//
// Optional entries of the table are filled in only when the backend says it
// has them, so a host can tell before it needs one. comm_shrink (re-forming
// a group of the survivors after a failure, backend 1.3) is non-NULL only
// when the backend class declares
//
//     static constexpr bool kCanShrink = true;
//
// and its Comm overrides shrink(); without the member (or with it false) the
// entry is NULL. Likewise comm_grow (admitting processes that join a running
// world, backend 1.4) with `static constexpr bool kCanGrow = true;` and
// Comm::grow(); such a backend reads tessera_backend_config::joining.
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk {

// A started non-blocking operation.
class Work {
 public:
  Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  virtual ~Work() = default;
  // Blocks until done; throws the operation's error, or Error(TIMEOUT) when
  // `timeout_ms` (>= 0) passes first. timeout_ms < 0: the operation's own.
  virtual void wait(int64_t timeout_ms) = 0;
  // True when done; throws the operation's error if it failed. Never blocks.
  virtual bool test() = 0;
};

// One rank's handle on a group. See tessera/c/backend.h for the contract.
class Comm {
 public:
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  virtual ~Comm() = default;
  [[nodiscard]] virtual int32_t rank() const = 0;
  [[nodiscard]] virtual int32_t size() const = 0;
  // Collective; returns nullptr for color < 0.
  virtual std::unique_ptr<Comm> split(int32_t color, int32_t key) = 0;
  virtual void abort(const char* reason) noexcept = 0;
  // Runs `args`. With `nonblocking` false, returns nullptr after completion;
  // otherwise may return a Work (or nullptr if already complete).
  virtual std::unique_ptr<Work> post(const tessera_coll_args& args, bool nonblocking) = 0;
  // Runs `args` to completion through the underlying library's own call,
  // bypassing this plugin's layers (see raw_post in tessera/c/backend.h).
  // The default says the backend has no such call.
  virtual void raw(const tessera_coll_args& /*args*/) {
    throw Error(TESSERA_ERR_UNSUPPORTED, "this backend has no raw library call to compare with");
  }
  // Called by each member still alive after the group failed: forms a new
  // group of the members that call within the grace (see comm_shrink in
  // tessera/c/backend.h; `grace_ms` > 0). Reached through the C table only
  // when the backend class declares kCanShrink (see the top of this file).
  // The default says the backend cannot.
  virtual std::unique_ptr<Comm> shrink(int64_t /*grace_ms*/) {
    throw Error(TESSERA_ERR_UNSUPPORTED, "this backend cannot re-form a group after a failure");
  }
  // Members of a running group, collectively: the group grown by the
  // processes waiting to join, or nullptr when none waits. A joining
  // process (its group of itself alone): waits up to `wait_ms` (< 0:
  // forever) to be admitted and returns the grown group. See comm_grow in
  // tessera/c/backend.h. Reached through the C table only when the backend
  // class declares kCanGrow. The default says the backend cannot.
  virtual std::unique_ptr<Comm> grow(int64_t /*wait_ms*/) {
    throw Error(TESSERA_ERR_UNSUPPORTED, "this backend cannot admit ranks into a running group");
  }
};

// The process-wide engine.
class Backend {
 public:
  explicit Backend(const Host& host) : host_(host) {}
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend() = default;
  virtual std::unique_ptr<Comm> connect(int32_t rank) = 0;
  [[nodiscard]] const Host& host() const noexcept { return host_; }

 private:
  Host host_;
};

namespace detail {

// True when backend class `B` declares `static constexpr bool kCanShrink =
// true`: its table then has comm_shrink.
template <typename B>
concept DeclaresShrink = requires {
  requires B::kCanShrink;
};

// Likewise `static constexpr bool kCanGrow = true`: its table has comm_grow.
template <typename B>
concept DeclaresGrow = requires {
  requires B::kCanGrow;
};

// Handles given to the host: each owns the C++ object and remembers the host
// API so forwarders can report errors.
struct BackendHandle {
  const tessera_host_api* host;
  std::unique_ptr<Backend> impl;
};
struct CommHandle {
  const tessera_host_api* host;
  std::unique_ptr<Comm> impl;
};
struct WorkHandle {
  const tessera_host_api* host;
  std::unique_ptr<Work> impl;
};

inline BackendHandle* as_handle(tessera_backend* b) { return reinterpret_cast<BackendHandle*>(b); }
inline CommHandle* as_handle(tessera_comm* c) { return reinterpret_cast<CommHandle*>(c); }
inline const CommHandle* as_handle(const tessera_comm* c) {
  return reinterpret_cast<const CommHandle*>(c);
}
inline WorkHandle* as_handle(tessera_work* w) { return reinterpret_cast<WorkHandle*>(w); }

inline tessera_comm* wrap_comm(const tessera_host_api* host, std::unique_ptr<Comm> comm) {
  if (!comm) return nullptr;
  return reinterpret_cast<tessera_comm*>(
      std::make_unique<CommHandle>(CommHandle{host, std::move(comm)}).release());
}

// The C table for backend class `B`.
template <typename B>
struct BackendAdapter {
  static tessera_status create(const tessera_host_api* host, const tessera_options* opts,
                               const tessera_backend_config* config,
                               tessera_backend** out) noexcept {
    return guard(host, [&] {
      TESSERA_CHECK(out != nullptr && config != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                    "create: null argument");
      const tessera_backend_config cfg = copy_versioned(config);
      const Host h(host);
      const Options o(host, opts);
      auto handle =
          std::make_unique<BackendHandle>(BackendHandle{host, std::make_unique<B>(h, o, cfg)});
      *out = reinterpret_cast<tessera_backend*>(handle.release());
    });
  }
  static void destroy(tessera_backend* backend) noexcept { delete as_handle(backend); }

  static tessera_status connect(tessera_backend* backend, int32_t rank,
                                tessera_comm** out) noexcept {
    auto* b = as_handle(backend);
    return guard(b->host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "connect: null output");
      *out = wrap_comm(b->host, b->impl->connect(rank));
      TESSERA_CHECK(*out != nullptr, TESSERA_ERR_INTERNAL, "connect returned no communicator");
    });
  }
  static int32_t comm_rank(const tessera_comm* comm) noexcept {
    return as_handle(comm)->impl->rank();
  }
  static int32_t comm_size(const tessera_comm* comm) noexcept {
    return as_handle(comm)->impl->size();
  }

  static tessera_status comm_split(tessera_comm* comm, int32_t color, int32_t key,
                                   tessera_comm** out) noexcept {
    auto* c = as_handle(comm);
    return guard(c->host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "split: null output");
      *out = wrap_comm(c->host, c->impl->split(color, key));
    });
  }
  static void comm_abort(tessera_comm* comm, const char* reason) noexcept {
    as_handle(comm)->impl->abort(reason != nullptr ? reason : "aborted");
  }
  static void comm_destroy(tessera_comm* comm) noexcept { delete as_handle(comm); }

  static tessera_status post(tessera_comm* comm, const tessera_coll_args* args,
                             tessera_work** work) noexcept {
    auto* c = as_handle(comm);
    return guard(c->host, [&] {
      TESSERA_CHECK(args != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "post: null arguments");
      // An older host passes a shorter struct: missing fields read as zero.
      const tessera_coll_args a = copy_versioned(args);
      if (work != nullptr) *work = nullptr;
      auto w = c->impl->post(a, work != nullptr);
      if (w && work != nullptr) {
        *work = reinterpret_cast<tessera_work*>(
            std::make_unique<WorkHandle>(WorkHandle{c->host, std::move(w)}).release());
      } else if (w) {
        w->wait(-1);
      }
    });
  }
  static tessera_status work_wait(tessera_work* work, int64_t timeout_ms) noexcept {
    auto* w = as_handle(work);
    return guard(w->host, [&] { w->impl->wait(timeout_ms); });
  }
  static tessera_status work_test(tessera_work* work, int32_t* done) noexcept {
    auto* w = as_handle(work);
    return guard(w->host, [&] {
      TESSERA_CHECK(done != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "test: null output");
      *done = 0;
      *done = w->impl->test() ? 1 : 0;
    });
  }
  static void work_free(tessera_work* work) noexcept { delete as_handle(work); }
  static tessera_status raw_post(tessera_comm* comm, const tessera_coll_args* args) noexcept {
    auto* c = as_handle(comm);
    return guard(c->host, [&] {
      TESSERA_CHECK(args != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "raw_post: null arguments");
      c->impl->raw(copy_versioned(args));
    });
  }
  static tessera_status comm_shrink(tessera_comm* comm, int64_t grace_ms,
                                    tessera_comm** out) noexcept {
    auto* c = as_handle(comm);
    return guard(c->host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "shrink: null output");
      *out = nullptr;
      TESSERA_CHECK(grace_ms > 0, TESSERA_ERR_INVALID_ARGUMENT, "shrink: grace_ms = ", grace_ms,
                    " must be > 0");
      *out = wrap_comm(c->host, c->impl->shrink(grace_ms));
      TESSERA_CHECK(*out != nullptr, TESSERA_ERR_INTERNAL, "shrink returned no communicator");
    });
  }
  static tessera_status comm_grow(tessera_comm* comm, int64_t wait_ms,
                                  tessera_comm** out) noexcept {
    auto* c = as_handle(comm);
    return guard(c->host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "grow: null output");
      *out = nullptr;
      std::unique_ptr<Comm> grown = c->impl->grow(wait_ms);
      if (grown) *out = wrap_comm(c->host, std::move(grown));
    });
  }

  static constexpr tessera_backend_api table(uint32_t caps) noexcept {
    return tessera_backend_api{sizeof(tessera_backend_api),
                               caps,
                               &create,
                               &destroy,
                               &connect,
                               &comm_rank,
                               &comm_size,
                               &comm_split,
                               &comm_abort,
                               &comm_destroy,
                               &post,
                               &work_wait,
                               &work_test,
                               &work_free,
                               &raw_post,
                               DeclaresShrink<B> ? &comm_shrink : nullptr,
                               DeclaresGrow<B> ? &comm_grow : nullptr};
  }
};

}  // namespace detail
}  // namespace tessera::sdk

// Registers backend class `cls` as the plugin `name_str`. `caps` is a mask of
// TESSERA_BACKEND_CAP_*; `options` a static array of tessera_option_decl or
// TESSERA_NO_OPTIONS. Use once per library, at namespace scope.
#define TESSERA_REGISTER_BACKEND(cls, name_str, version_str, summary_str, caps, options)    \
  namespace {                                                                               \
  constexpr tessera_backend_api tessera_detail_backend_api =                                \
      ::tessera::sdk::detail::BackendAdapter<cls>::table(caps);                             \
  const tessera_plugin_descriptor tessera_detail_descriptor = TESSERA_DETAIL_DESCRIPTOR(    \
      TESSERA_KIND_BACKEND, TESSERA_BACKEND_API_MAJOR, TESSERA_BACKEND_API_MINOR, name_str, \
      version_str, summary_str, options, &tessera_detail_backend_api);                      \
  }                                                                                         \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)
