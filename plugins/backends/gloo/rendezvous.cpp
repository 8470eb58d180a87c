#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
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

// A member's sign of life while it connects a group (see connect_group).
class Heartbeat {
 public:
  static constexpr std::chrono::milliseconds kPeriod{100};
  // How long a counter must stand still for its rank to count as stopped:
  // several periods, so that a rank that is only slow to be scheduled (two
  // cores, sanitizers) is not named.
  static constexpr std::chrono::milliseconds kSilence{800};

  Heartbeat(std::unique_ptr<Store> store, const GroupAddress& where)
      : store_(std::move(store)), where_(where) {
    thread_ = std::thread([this] { beat(); });
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  ~Heartbeat() {
    try {
      leave();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the store is gone; nothing waits on the key
    }
  }

  // Stops beating and marks this rank as having left. Idempotent.
  void leave() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    store_->set(key("left", where_.rank), {'1'});
  }

  // After leave(): the other members whose counter stood still for
  // kSilence and who never left. Empty when the store cannot say.
  std::vector<int32_t> stopped_members() {
    try {
      std::vector<int32_t> watched;
      std::vector<int64_t> before;
      for (int32_t r = 0; r < where_.size; ++r) {
        if (r == where_.rank || store_->has({key("left", r)})) continue;
        watched.push_back(r);
        before.push_back(store_->add(key("beat", r), 0));
      }
      if (watched.empty()) return {};
      std::this_thread::sleep_for(kSilence);
      std::vector<int32_t> stopped;
      for (size_t i = 0; i < watched.size(); ++i) {
        const int32_t r = watched[i];
        if (store_->has({key("left", r)})) continue;
        if (store_->add(key("beat", r), 0) == before[i]) stopped.push_back(r);
      }
      return stopped;
    } catch (const std::exception&) {
      return {};
    }
  }

 private:
  [[nodiscard]] std::string key(const char* what, int32_t rank) const {
    return detail::concat(where_.prefix, "/", what, "/", rank);
  }

  void beat() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      lock.unlock();
      try {
        (void)store_->add(key("beat", where_.rank), 1);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a missed beat; the connect reports the store
      }
      lock.lock();
      wake_.wait_for(lock, kPeriod, [this] { return stop_; });
    }
  }

  std::unique_ptr<Store> store_;
  GroupAddress where_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// "rank 2 stopped while connecting" / "ranks 1, 3 stopped ...", or empty.
std::string stopped_text(const std::vector<int32_t>& stopped) {
  if (stopped.empty()) return {};
  return detail::concat(ranks_phrase(stopped),
                        " stopped while connecting (killed or frozen: no heartbeat in the store "
                        "for ",
                        Heartbeat::kSilence.count(), " ms)");
}

}  // namespace

std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string text;
  for (const int32_t r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

std::string ranks_phrase(const std::vector<int32_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

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
      throw Error(
          TESSERA_ERR_TIMEOUT,
          detail::concat("gloo: connecting ", where_text(where, store), " timed out after ", waited,
                         " ms: ", ranks_phrase(missing), " never arrived (start all ", where.size,
                         " ranks with `tessera launch -n ", where.size,
                         " -- ...`, each with its own RANK and the same store)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Connection connect_group(Store& store, std::unique_ptr<Store> beat_store, const GroupAddress& where,
                         const std::shared_ptr<gloo::transport::Device>& device,
                         int64_t timeout_ms) {
  std::optional<Heartbeat> heartbeat;
  if (beat_store != nullptr && where.size > 1) heartbeat.emplace(std::move(beat_store), where);
  // Names the members that stopped, when connecting failed for a reason
  // other than a reused run id; empty otherwise.
  const auto stopped = [&](tessera_status status) {
    if (!heartbeat || status == TESSERA_ERR_INVALID_ARGUMENT) return std::string();
    try {
      heartbeat->leave();
    } catch (const std::exception&) {
      return std::string();
    }
    return stopped_text(heartbeat->stopped_members());
  };
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
  } catch (const Error& e) {
    const std::string who = stopped(e.status());
    if (who.empty()) throw;
    throw Error(TESSERA_ERR_PEER_LOST, detail::concat("gloo: connecting ", where_text(where, store),
                                                      " failed: ", who, " (", e.what(), ")"));
  } catch (const std::exception& e) {
    const std::string who = stopped(TESSERA_ERR_PEER_LOST);
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("gloo: connecting ", where_text(where, store), " failed: ",
                               who.empty() ? std::string(e.what())
                                           : detail::concat(who, " (gloo: ", e.what(), ")")));
  }
  return c;
}

}  // namespace tessera::gloo_backend
