// The TCP connections behind one gloo context, as seen by this process.
//
// gloo offers no call that fails a pair's pending operations on the local
// side (Context::closeConnections only closes the descriptors, so a thread
// blocked inside a collective keeps waiting until its timeout). Shutting a
// connected socket down does: the transport's event loop reads end-of-file,
// fails every operation pending on that pair with an IoException and closes
// it, and the peer sees the same. So each group finds the socket behind each
// of its pairs once, right after connecting, and can later break them all.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gloo/context.h>

namespace tessera::gloo_backend {

// The forms gloo may print an endpoint in: "[127.0.0.1]:5000", with the port
// in host order or as the raw network-order number (gloo's Address::str()
// prints the latter). Matching accepts both.
std::vector<std::string> endpoint_spellings(const sockaddr_storage& address);

// The local endpoint of each of a context's pairs, by peer rank, in gloo's own
// spelling (Pair::address().str()); "" for the caller's own rank.
std::vector<std::string> local_endpoints(gloo::Context& context);

// The sockets of one context's pairs.
class PairSockets {
 public:
  PairSockets() = default;

  // Finds, for every peer k, the connected socket of this process whose
  // local endpoint is `local[k]` and whose remote endpoint is `remote[k]`
  // (both in gloo's spelling; "" skips k). Peers whose socket is not found
  // are left out (their pair then only fails through its own timeout).
  static PairSockets find(const std::vector<std::string>& local,
                          const std::vector<std::string>& remote);

  // Shuts every socket down (both directions) after checking it still joins
  // the same two endpoints, so a descriptor number gloo has since closed and
  // reused is never touched. Safe to call from any thread, more than once.
  void shutdown_all() const noexcept;

  // Gives each socket its send buffer size from when it was found back if
  // it is smaller now. gloo sizes a pair's send buffer to the message when
  // it sends from a bound buffer (the algorithm objects do) and never does
  // for unbound buffers (gloo::allreduce and friends): after a small message
  // of an algorithm object, a pair keeps a send buffer of one partial
  // segment, and every later large message then waits for delayed
  // acknowledgements (tens of milliseconds per segment). Called after every
  // algorithm-object run. Safe from any thread.
  void restore_send_buffers() const noexcept;

  // True when the socket found for peer `peer` no longer joins its two
  // endpoints: the connection was reset, or gloo closed it after its pair
  // failed. False for a peer whose socket was not found.
  [[nodiscard]] bool closed(int32_t peer) const noexcept;

  // Number of sockets found.
  [[nodiscard]] size_t size() const noexcept { return sockets_.size(); }

 private:
  struct Socket {
    int32_t peer = -1;
    int fd = -1;
    std::string local;
    std::string remote;
    int send_buffer = 0;  // SO_SNDBUF when found
  };
  std::vector<Socket> sockets_;
};

// The rank whose endpoint (in `endpoints`, gloo spelling, by rank) appears in
// `text` (an exception message such as "Connection closed by peer
// [127.0.0.1]:4242"), or std::nullopt.
std::optional<int32_t> rank_named_in(std::string_view text,
                                     const std::vector<std::string>& endpoints);

}  // namespace tessera::gloo_backend
