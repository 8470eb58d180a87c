#include "p2p.hpp"

#include <stdexcept>

#include "forever.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

// Above every slot gloo's collectives use (prefixes 0x01..0x08 in the top
// byte, small integers for the algorithm objects).
constexpr uint64_t kP2pPrefix = uint64_t{0xA5} << 56;

}  // namespace

uint64_t p2p_slot(int32_t tag, tessera_dtype dtype, uint64_t count) noexcept {
  // Layout: prefix (8 bits) | tag (31 bits) | hash of dtype and count (24 bits).
  uint64_t h = 14695981039346656037ULL;
  for (int shift = 0; shift < 64; shift += 8) {
    h ^= (count >> shift) & 0xffU;
    h *= 1099511628211ULL;
  }
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(dtype));
  h *= 1099511628211ULL;
  const uint64_t fold = (h ^ (h >> 24) ^ (h >> 48)) & 0xffffffU;
  return kP2pPrefix | (static_cast<uint64_t>(static_cast<uint32_t>(tag) & 0x7fffffffU) << 24) |
         fold;
}

P2pOp::P2pOp(const std::shared_ptr<gloo::Context>& context, const tessera_coll_args& args,
             WaitRegistry* registry)
    : send_(args.coll == TESSERA_COLL_SEND), peer_(args.peer), slot_(0), bytes_(0) {
  const tessera_buffer& b = send_ ? args.send : args.recv;
  slot_ = p2p_slot(args.tag, b.dtype, b.count);
  bytes_ = static_cast<size_t>(b.count) * tessera_dtype_size(b.dtype);
  buffer_ = context->createUnboundBuffer(b.data, bytes_);
  if (registry != nullptr) {
    watched_ = Waits::Watched(&waits_, buffer_.get());
    enlisted_.emplace(*registry, waits_);
  }
}

void P2pOp::post() {
  if (send_) {
    buffer_->send(peer_, slot_, 0, bytes_);
  } else {
    buffer_->recv(peer_, slot_, 0, bytes_);
  }
}

void P2pOp::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout.count() < 0 ? std::chrono::milliseconds(kForever) : timeout;
  const bool done = send_ ? buffer_->waitSend(nullptr, limit) : buffer_->waitRecv(nullptr, limit);
  // gloo reports an interrupted wait with false: the group broke.
  if (!done) {
    throw std::runtime_error(detail::concat("gloo ", send_ ? "send to" : "recv from", " rank ",
                                            peer_,
                                            ": the wait was interrupted (the group's connections "
                                            "were shut down)"));
  }
}

}  // namespace tessera::gloo_backend
