#include "host_store.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/host_api.hpp"
#include "tessera/core/store.hpp"
#include "tessera/core/tcp_store.hpp"
#include "tessera/sdk/error.hpp"

// The handle a plugin holds: a connection to the store and, for the rank
// that serves a TCP store, the server.
struct tessera_store {
  std::unique_ptr<tessera::store::TcpStoreServer> server;
  std::unique_ptr<tessera::store::Store> client;
  std::string description;
  std::string host;
  std::string ns;
  int64_t timeout_ms = 0;
  bool holds_run = false;                 // counted in the run's ".live" key while open
  tessera::HostContext* owner = nullptr;  // logs the server's end
};

namespace tessera {
namespace {

// The count of a run's processes holding it (tessera_store_config.hold_run).
constexpr const char* kLiveKey = ".live";

HostContext* context(void* ctx) noexcept { return static_cast<HostContext*>(ctx); }

std::string text_or_empty(const char* s) { return s != nullptr ? std::string(s) : std::string(); }

// Runs `fn`, turning what it throws into a status and the message a plugin
// reads with last_error; nothing escapes across the C boundary.
template <typename Fn>
tessera_status guarded(Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return TESSERA_OK;
  } catch (const Error& e) {
    set_host_call_error(e.what());
    return e.status() == TESSERA_OK ? TESSERA_ERR_INTERNAL : e.status();
  } catch (const std::bad_alloc&) {
    set_host_call_error("out of memory");
    return TESSERA_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_host_call_error(e.what());
    return TESSERA_ERR_INTERNAL;
  } catch (...) {
    set_host_call_error("unknown exception");
    return TESSERA_ERR_INTERNAL;
  }
}

void require(bool ok, const char* what) {
  TESSERA_CHECK(ok, TESSERA_ERR_INVALID_ARGUMENT, "store call: ", what);
}

std::vector<char> bytes_of(const void* data, uint64_t size) {
  const auto* p = static_cast<const char*>(data);
  return size == 0 ? std::vector<char>() : std::vector<char>(p, p + size);
}

std::vector<std::string> keys_of(const char* const* keys, uint64_t count) {
  require(keys != nullptr || count == 0, "the key list is NULL");
  std::vector<std::string> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    require(keys[i] != nullptr, "a key is NULL");
    out.emplace_back(keys[i]);
  }
  return out;
}

// Config fields a caller of `config_size` bytes has set (fields are only
// appended: a larger caller's extra fields are ignored).
store::Config to_config(const tessera_store_config& c) {
  require(c.struct_size >= offsetof(tessera_store_config, hold_run) + sizeof(c.hold_run),
          "tessera_store_config.struct_size is smaller than ABI 1.8's config");
  store::Config out;
  switch (c.kind) {
    case TESSERA_STORE_TCP:
      out.kind = store::Kind::kTcp;
      break;
    case TESSERA_STORE_FILE:
      out.kind = store::Kind::kFile;
      break;
    case TESSERA_STORE_REDIS:
      out.kind = store::Kind::kRedis;
      break;
    default:
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("store kind ", c.kind, " is not TCP (0), file (1) or Redis (2)"));
  }
  out.host = text_or_empty(c.host);
  out.port = c.port;
  out.dir = text_or_empty(c.dir);
  out.ns = text_or_empty(c.ns);
  out.timeout_ms = c.timeout_ms;
  out.source = text_or_empty(c.source);
  if (out.kind != store::Kind::kFile) {
    TESSERA_CHECK(!out.host.empty() && out.port >= 1 && out.port <= 65535,
                  TESSERA_ERR_INVALID_ARGUMENT, "the store address '", out.host, ":", out.port, "'",
                  out.source.empty() ? "" : " (" + out.source + ")",
                  " needs a host and a port in 1..65535");
  }
  // The last holder removes every key under the namespace: without one,
  // that would be every key of the store.
  TESSERA_CHECK(c.hold_run == 0 || !out.ns.empty(), TESSERA_ERR_INVALID_ARGUMENT,
                "a store handle that holds the run needs the run's namespace (ns), since the "
                "last holder removes every key under it");
  TESSERA_CHECK(c.serve == 0 || c.hold_run == 0, TESSERA_ERR_INVALID_ARGUMENT,
                "a store handle either serves the TCP store or holds the run, not both (the "
                "server removes the run's keys itself)");
  TESSERA_CHECK(c.serve == 0 || out.kind == store::Kind::kTcp, TESSERA_ERR_INVALID_ARGUMENT,
                "only a TCP store can be served by a rank, not a ",
                out.kind == store::Kind::kFile ? "file" : "Redis", " store");
  return out;
}

tessera_status host_store_open(void* ctx, const tessera_store_config* config,
                               tessera_store** out) noexcept {
  return guarded([&] {
    require(config != nullptr && out != nullptr, "the config or the output is NULL");
    *out = nullptr;
    const store::Config c = to_config(*config);
    auto handle = std::make_unique<tessera_store>();
    handle->host = c.host;
    handle->ns = c.ns;
    handle->timeout_ms = c.timeout_ms;
    handle->owner = context(ctx);
    if (config->serve != 0) {
      try {
        handle->server = std::make_unique<store::TcpStoreServer>(c.host, c.port);
      } catch (const Error& e) {
        throw Error(e.status(),
                    detail::concat(e.what(), " (this process serves it as rank 0 on ",
                                   c.source.empty() ? "MASTER_ADDR:MASTER_PORT" : c.source, ")"));
      }
      handle->owner->logger()->debug("rank 0 serves the TCP store on {}:{}", c.host,
                                     handle->server->port());
    }
    handle->client = store::open(c);
    handle->description = handle->client->description();
    if (config->hold_run != 0) {
      (void)handle->client->add(kLiveKey, 1);
      handle->holds_run = true;
    }
    *out = handle.release();
  });
}

// The served store's end: the clients first (bounded), so a rank still
// reading a key gets it before the run's keys go; then the server stops.
void stop_server(tessera_store& s) noexcept {
  try {
    s.client.reset();  // this process's own connection
    const auto linger = std::chrono::milliseconds(s.timeout_ms > 0 ? s.timeout_ms : 60000);
    const size_t connected = s.server->connections();
    const size_t stragglers = s.server->await_clients(linger);
    const size_t removed = s.server->erase_prefix(s.ns.empty() ? "" : s.ns + "/");
    (void)s.server->stop(std::chrono::milliseconds(0));
    s.owner->logger()->debug(
        "the TCP store on {}:{} removed the {} keys of run '{}' and stopped holding {} keys, {} "
        "of {} clients still connected{}",
        s.host, s.server->port(), removed, s.ns, s.server->count(""), stragglers, connected,
        stragglers == 0 ? "" : " after waiting for them");
  } catch (...) {
    // Closing reports what it can.
  }
}

// A holder of the run lets go; the last one removes the run's keys (the
// count included). The others may still be reading until they let go.
void release_run(tessera_store& s) noexcept {
  try {
    if (s.client->add(kLiveKey, -1) > 0) return;
    const int64_t removed = s.client->delete_prefix("");
    s.owner->logger()->debug("the last process of run '{}' removed its {} keys from the {}", s.ns,
                             removed, s.description);
  } catch (const std::exception& e) {
    try {
      s.owner->logger()->debug("could not remove the keys of run '{}' from the {}: {}", s.ns,
                               s.description, e.what());
    } catch (...) {
      // Closing reports what it can.
    }
  }
}

void host_store_close(void* /*ctx*/, tessera_store* store) noexcept {
  if (store == nullptr) return;
  if (store->holds_run) release_run(*store);
  if (store->server) stop_server(*store);
  delete store;  // NOLINT(cppcoreguidelines-owning-memory): the C handle's owner
}

const char* host_store_description(void* /*ctx*/, const tessera_store* store) noexcept {
  return store != nullptr ? store->description.c_str() : "";
}

store::Store& client_of(tessera_store* store) {
  require(store != nullptr, "the store handle is NULL");
  return *store->client;
}

tessera_status host_store_set(void* /*ctx*/, tessera_store* store, const char* key,
                              const void* value, uint64_t size) noexcept {
  return guarded([&] {
    require(key != nullptr && (value != nullptr || size == 0), "the key or the value is NULL");
    client_of(store).set(key, bytes_of(value, size));
  });
}

tessera_status host_store_get(void* /*ctx*/, tessera_store* store, const char* key,
                              int64_t timeout_ms, tessera_bytes_sink sink, void* user) noexcept {
  return guarded([&] {
    require(key != nullptr && sink != nullptr, "the key or the sink is NULL");
    const std::vector<char> value = client_of(store).get(key, timeout_ms);
    sink(user, value.data(), value.size());
  });
}

tessera_status host_store_add(void* /*ctx*/, tessera_store* store, const char* key, int64_t delta,
                              int64_t* out) noexcept {
  return guarded([&] {
    require(key != nullptr && out != nullptr, "the key or the output is NULL");
    *out = client_of(store).add(key, delta);
  });
}

tessera_status host_store_compare_set(void* /*ctx*/, tessera_store* store, const char* key,
                                      const void* expected, uint64_t expected_size,
                                      const void* desired, uint64_t desired_size, int32_t* swapped,
                                      tessera_bytes_sink sink, void* user) noexcept {
  return guarded([&] {
    require(key != nullptr && swapped != nullptr && (desired != nullptr || desired_size == 0),
            "the key, the desired value or the output is NULL");
    std::optional<std::vector<char>> want;
    if (expected != nullptr) want = bytes_of(expected, expected_size);
    const store::CasResult r =
        client_of(store).compare_and_set(key, want, bytes_of(desired, desired_size));
    *swapped = r.swapped ? 1 : 0;
    if (sink != nullptr && r.value) sink(user, r.value->data(), r.value->size());
  });
}

tessera_status host_store_wait(void* /*ctx*/, tessera_store* store, const char* const* keys,
                               uint64_t count, int64_t timeout_ms) noexcept {
  return guarded([&] { client_of(store).wait(keys_of(keys, count), timeout_ms); });
}

tessera_status host_store_check(void* /*ctx*/, tessera_store* store, const char* const* keys,
                                uint64_t count, int32_t* present) noexcept {
  return guarded([&] {
    require(present != nullptr, "the output is NULL");
    *present = client_of(store).check(keys_of(keys, count)) ? 1 : 0;
  });
}

tessera_status host_store_delete_prefix(void* /*ctx*/, tessera_store* store, const char* prefix,
                                        int64_t* removed) noexcept {
  return guarded([&] {
    require(prefix != nullptr, "the prefix is NULL");
    const int64_t n = client_of(store).delete_prefix(prefix);
    if (removed != nullptr) *removed = n;
  });
}

}  // namespace

void install_store_calls(tessera_host_api& api) noexcept {
  api.store_open = &host_store_open;
  api.store_close = &host_store_close;
  api.store_description = &host_store_description;
  api.store_set = &host_store_set;
  api.store_get = &host_store_get;
  api.store_add = &host_store_add;
  api.store_compare_set = &host_store_compare_set;
  api.store_wait = &host_store_wait;
  api.store_check = &host_store_check;
  api.store_delete_prefix = &host_store_delete_prefix;
}

}  // namespace tessera
