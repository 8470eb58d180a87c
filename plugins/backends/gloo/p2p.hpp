// Send and receive with gloo's unbound buffers.
//
// A message is matched by (peer, slot). The slot carries the tag and a hash
// of the dtype and count: gloo does not check that a receive is as large as
// the message (a longer message aborts the process inside gloo's event
// loop), so a send and a receive that disagree on count or dtype are simply
// never matched, and the receive ends in a timeout that names the peer.
// Messages with the same peer, tag, dtype and count are matched in posting
// order.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "tessera/c/backend.h"
#include "waits.hpp"

namespace tessera::gloo_backend {

// The gloo slot of a message with `tag` (>= 0), `dtype` and `count`.
uint64_t p2p_slot(int32_t tag, tessera_dtype dtype, uint64_t count) noexcept;

// One send or receive over the caller's buffer. The buffer must stay valid
// and untouched until wait() returned.
class P2pOp {
 public:
  // `args` is a valid SEND or RECV for `context` (sdk::validate_coll_args).
  // While it lives, its buffer is among the running operations of
  // `registry` (if not null), whose interruption ends its wait.
  P2pOp(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& args,
        WaitRegistry* registry);
  P2pOp(const P2pOp&) = delete;
  P2pOp& operator=(const P2pOp&) = delete;
  ~P2pOp() = default;

  // Hands the operation to gloo; never blocks. Throws what gloo throws (an
  // IoException when the pair to the peer is already broken).
  void post();

  // Blocks until the message is delivered (send: written to the connection,
  // which needs the peer's matching receive; recv: received). gloo fails the
  // whole context after `timeout` (and throws gloo::IoException); a negative
  // timeout waits for as long as the connection lives. Throws
  // std::runtime_error when the registry interrupted the wait.
  void wait(std::chrono::milliseconds timeout);

 private:
  bool send_;
  int32_t peer_;
  uint64_t slot_;
  size_t bytes_;
  // Destroyed in reverse order: unlisted, then forgotten, then freed.
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  Waits waits_;
  Waits::Watched watched_;
  std::optional<WaitRegistry::Enlisted> enlisted_;
};

}  // namespace tessera::gloo_backend
