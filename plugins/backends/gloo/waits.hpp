// The unbound buffers a group's running operations handed to gloo, so that
// a broken group can wake every thread waiting on them.
//
// Breaking a group's sockets (Group::break_sockets) does not end every wait
// inside gloo. A pair that fails signals the sends and receives it still
// tracks, but a send of an unbound buffer that was already handed to the
// connection's write queue is not among them: when the peer reset the
// connection just before the write, gloo queues the send, the pair fails,
// and the sender waits on that buffer until gloo's own timeout, however
// early the group broke. (In a 4-rank ring allgather: the receiving peer
// posted its receive, failed because of a third rank and shut its side;
// the sender's write meets the reset.) UnboundBuffer::abortWaitSend and
// abortWaitRecv wake such waits; the waiting gloo algorithm then goes on to
// its next step, where it fails on the broken pairs or, having nothing left
// to wait for, returns. Either way the operation is over and its result is
// discarded (Waits::interrupted).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

namespace tessera::gloo_backend {

class WaitRegistry;

// The buffers of one running operation. Register it with its group's
// registry for the operation's duration (Waits::Enlisted).
class Waits {
 public:
  Waits() = default;
  Waits(const Waits&) = delete;
  Waits& operator=(const Waits&) = delete;
  ~Waits() = default;

  // Records `buffer` (owned by the caller or by gloo's options object)
  // until the returned guard goes. Declare the guard after the object that
  // owns the buffer, so the buffer is forgotten before it is freed.
  class Watched {
   public:
    Watched() = default;
    Watched(Waits* waits, gloo::transport::UnboundBuffer* buffer);
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;
    Watched(Watched&& other) noexcept;
    Watched& operator=(Watched&& other) noexcept;
    ~Watched();

   private:
    Waits* waits_ = nullptr;
    gloo::transport::UnboundBuffer* buffer_ = nullptr;
  };

  // Wakes every wait on the recorded buffers and marks the operation
  // interrupted.
  void interrupt() noexcept;
  // True once interrupt() ran: the operation's result must be discarded.
  [[nodiscard]] bool interrupted() const noexcept;

 private:
  void add(gloo::transport::UnboundBuffer* buffer);
  void remove(gloo::transport::UnboundBuffer* buffer) noexcept;

  mutable std::mutex mu_;
  std::vector<gloo::transport::UnboundBuffer*> buffers_;  // guarded by mu_
  bool interrupted_ = false;                              // guarded by mu_
};

// The running operations of one group. Thread-safe.
class WaitRegistry {
 public:
  // Registers `waits` while the guard lives.
  class Enlisted {
   public:
    Enlisted(WaitRegistry& registry, Waits& waits);
    Enlisted(const Enlisted&) = delete;
    Enlisted& operator=(const Enlisted&) = delete;
    ~Enlisted();

   private:
    WaitRegistry& registry_;
    Waits& waits_;
  };

  // Interrupts every registered operation (Waits::interrupt).
  void interrupt_all() noexcept;

 private:
  std::mutex mu_;
  std::vector<Waits*> running_;  // guarded by mu_
};

}  // namespace tessera::gloo_backend
