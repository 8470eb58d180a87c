// Point-to-point messages of one rank of a group.
//
// Semantics of send/recv in the in-memory backend:
//  - Messages from one source with one tag are received in the order they
//    were sent (matching is by exact source and tag; no wildcards).
//  - A send never waits for the receiver: if a matching receive is posted,
//    the data is copied straight into its buffer; otherwise a copy is
//    buffered in the receiver's mailbox (accounted as TESSERA_MEM_COMM of the
//    sender) until a receive takes it. So a blocking send returns once its
//    data is delivered or buffered, and any order of sends and receives
//    between two ranks completes.
//  - A receive takes the oldest buffered matching message, or is posted and
//    completes when the matching send arrives. Its count and dtype must equal
//    the message's, otherwise the receive fails with TESSERA_ERR_MISMATCH.
//  - A receive that waits past its timeout is withdrawn and fails with
//    TESSERA_ERR_TIMEOUT (and the group breaks); when the group breaks, every
//    posted receive fails with TESSERA_ERR_PEER_LOST.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fault.hpp"
#include "signal.hpp"
#include "tessera/c/common.h"
#include "tessera/sdk/host.hpp"

namespace tessera::inmemory {

// A receive waiting in a mailbox. `done` completes when data arrived (or the
// receive failed); the buffer must stay valid until then.
struct RecvRequest {
  int32_t source = 0;
  int32_t tag = 0;
  tessera_buffer buffer{};
  int64_t timeout_ms = -1;  // < 0: none
  Deadline deadline = Deadline::max();
  std::string what;  // "recv from rank 1 (tag 0) on rank 0 of group of 2"
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
};

// Messages sent to one rank of a group: buffered sends and posted receives,
// under one mutex per receiving rank. Thread-safe.
class Mailbox {
 public:
  // `host` receives the memory accounting of buffered messages.
  explicit Mailbox(sdk::Host host) : host_(host) {}
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;
  // Frees buffered messages and returns their bytes to the accounting.
  ~Mailbox();

  // Hands `data` from `source` (world rank `source_world` for accounting) to
  // this mailbox: completes the oldest posted receive for (source, tag) or
  // buffers a copy. Throws Error(PEER_LOST) if `fault` is set.
  void deliver(int32_t source, int32_t source_world, int32_t tag, const tessera_buffer& data,
               const Fault& fault, std::string_view what);

  // Completes `request` from a buffered message, or posts it. A broken group
  // completes it with PEER_LOST.
  void post(const std::shared_ptr<RecvRequest>& request, const Fault& fault);

  // Withdraws `request` if it is still posted; false when a sender already
  // took it (it completes shortly).
  bool withdraw(const RecvRequest& request);

  // Completes every posted receive with `status` and `message`.
  void fail_posted(tessera_status status, const std::string& message);

 private:
  struct Message {
    int32_t source = 0;
    int32_t source_world = 0;
    int32_t tag = 0;
    tessera_dtype dtype = 0;
    uint64_t count = 0;
    std::vector<std::byte> bytes;
  };
  // Copies `bytes` into `request` after checking the shapes agree.
  static void fill(RecvRequest& request, int32_t sender, tessera_dtype dtype, uint64_t count,
                   const void* bytes);

  sdk::Host host_;
  std::mutex mu_;
  std::deque<Message> buffered_;
  std::deque<std::shared_ptr<RecvRequest>> posted_;
};

}  // namespace tessera::inmemory
