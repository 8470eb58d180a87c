#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <thread>

#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;

// Width of one endpoint in the exchange: "[" + IPv6 text + "]:" + port fits.
constexpr size_t kEndpointBytes = 64;

std::string join_key(const GroupAddress& where, int32_t rank) {
  return where.prefix + "/join/" + std::to_string(rank);
}

std::string where_text(const GroupAddress& where, const Store& store) {
  return detail::concat("group '", where.name, "' (rank ", where.rank, " of ", where.size,
                        ") through the ", store.description());
}

// Every rank sends rank k the local endpoint of its pair with k; rank k then
// holds, by sender, the remote endpoint of each of its connections.
std::vector<std::string> exchange_endpoints(const std::shared_ptr<gloo::Context>& context,
                                            int64_t timeout_ms) {
  const auto size = static_cast<size_t>(context->size);
  const std::vector<std::string> mine = local_endpoints(*context);
  std::vector<char> out(size * kEndpointBytes, '\0');
  std::vector<char> in(size * kEndpointBytes, '\0');
  for (size_t k = 0; k < size; ++k) {
    const std::string& e = mine[k];
    std::copy_n(e.begin(), std::min(e.size(), kEndpointBytes - 1),
                out.begin() + static_cast<std::ptrdiff_t>(k * kEndpointBytes));
  }
  gloo::AlltoallOptions opts(context);
  opts.setInput(out.data(), out.size());
  opts.setOutput(in.data(), in.size());
  opts.setTimeout(std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 3600000));
  gloo::alltoall(opts);
  std::vector<std::string> remote(size);
  for (size_t k = 0; k < size; ++k) {
    if (static_cast<int>(k) == context->rank) continue;
    const char* p = in.data() + k * kEndpointBytes;
    remote[k] = std::string(p, std::find(p, p + kEndpointBytes, '\0'));
  }
  return remote;
}

}  // namespace

void await_members(Store& store, const GroupAddress& where, int64_t timeout_ms) {
  std::string me = "pid ";
  me += std::to_string(::getpid());
  // A key already there is another process's arrival under this run id.
  TESSERA_CHECK(
      store.put_if_absent(join_key(where, where.rank), std::vector<char>(me.begin(), me.end())),
      TESSERA_ERR_INVALID_ARGUMENT, "gloo: cannot join ", where_text(where, store), ": rank ",
      where.rank, "'s arrival key '", join_key(where, where.rank),
      "' already exists (a key of this run already exists: use a fresh store directory "
      "or another run_id)");
  const auto start = Clock::now();
  std::vector<int32_t> missing;
  for (int32_t r = 0; r < where.size; ++r) {
    if (r != where.rank) missing.push_back(r);
  }
  auto pause = std::chrono::milliseconds(2);
  while (!missing.empty()) {
    std::erase_if(missing, [&](int32_t r) { return store.has({join_key(where, r)}); });
    if (missing.empty()) break;
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (timeout_ms >= 0 && waited >= timeout_ms) {
      std::string list;
      for (const int32_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("gloo: connecting ", where_text(where, store), " timed out after ",
                                 waited, " ms: ", missing.size() == 1 ? "rank " : "ranks ", list,
                                 " never arrived (start all ", where.size,
                                 " ranks with `tessera launch -n ", where.size,
                                 " -- ...`, each with its own RANK and the same store)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Connection connect_group(Store& store, const GroupAddress& where,
                         const std::shared_ptr<gloo::transport::Device>& device,
                         int64_t timeout_ms) {
  Connection c;
  try {
    auto context = std::make_shared<gloo::rendezvous::Context>(where.rank, where.size);
    // Zero is gloo's "no timeout" for pairs and the store.
    context->setTimeout(std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0));
    GlooStore adapted(store, timeout_ms);
    gloo::rendezvous::PrefixStore prefixed(where.prefix + "/mesh", adapted);
    std::shared_ptr<gloo::transport::Device> dev = device;
    context->connectFullMesh(prefixed, dev);
    c.context = context;
    if (where.size > 1) {
      c.peer_endpoints = exchange_endpoints(c.context, timeout_ms);
      c.sockets = PairSockets::find(local_endpoints(*c.context), c.peer_endpoints);
    } else {
      c.peer_endpoints.assign(1, "");
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_PEER_LOST, detail::concat("gloo: connecting ", where_text(where, store),
                                                      " failed: ", e.what()));
  }
  return c;
}

}  // namespace tessera::gloo_backend
