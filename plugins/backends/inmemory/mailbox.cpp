#include "mailbox.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

namespace {

uint64_t byte_size(tessera_dtype dtype, uint64_t count) noexcept {
  return count * tessera_dtype_size(dtype);
}

}  // namespace

Mailbox::~Mailbox() {
  for (const Message& m : buffered_) {
    host_.track_memory(m.source_world, TESSERA_MEM_COMM, -static_cast<int64_t>(m.bytes.size()));
  }
}

void Mailbox::fill(RecvRequest& request, int32_t sender, tessera_dtype dtype, uint64_t count,
                   const void* bytes) {
  const tessera_buffer& b = request.buffer;
  if (dtype != b.dtype || count != b.count) {
    request.done->finish(
        TESSERA_ERR_MISMATCH,
        detail::concat(request.what, ": expects count=", b.count, " ", dtype_name(b.dtype),
                       " but rank ", sender, " sent count=", count, " ", dtype_name(dtype)));
    return;
  }
  const uint64_t n = byte_size(dtype, count);
  if (n > 0) std::memcpy(b.data, bytes, static_cast<size_t>(n));
  request.done->finish(TESSERA_OK, std::string());
}

void Mailbox::deliver(int32_t source, int32_t source_world, int32_t tag, const tessera_buffer& data,
                      const Fault& fault, std::string_view what) {
  std::shared_ptr<RecvRequest> match;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (fault.is_set()) fault.throw_lost(what);
    const auto it = std::find_if(posted_.begin(), posted_.end(), [&](const auto& r) {
      return r->source == source && r->tag == tag;
    });
    if (it != posted_.end()) {
      match = *it;
      posted_.erase(it);
    } else {
      Message m;
      m.source = source;
      m.source_world = source_world;
      m.tag = tag;
      m.dtype = data.dtype;
      m.count = data.count;
      const uint64_t n = byte_size(data.dtype, data.count);
      try {
        m.bytes.resize(static_cast<size_t>(n));
      } catch (const std::bad_alloc&) {
        throw Error(TESSERA_ERR_OUT_OF_MEMORY,
                    detail::concat("inmemory: cannot allocate ", n, " bytes to hold the ", what,
                                   " until its receive is posted"));
      }
      if (n > 0) std::memcpy(m.bytes.data(), data.data, static_cast<size_t>(n));
      host_.track_memory(source_world, TESSERA_MEM_COMM, static_cast<int64_t>(n));
      buffered_.push_back(std::move(m));
      return;
    }
  }
  // Taken out of the list: nobody else touches this request any more.
  fill(*match, source, data.dtype, data.count, data.data);
}

void Mailbox::post(const std::shared_ptr<RecvRequest>& request, const Fault& fault) {
  Message taken;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (fault.is_set()) {
      request->done->finish(
          TESSERA_ERR_PEER_LOST,
          detail::concat(request->what, " failed: the group is broken: ", fault.reason()));
      return;
    }
    const auto it = std::find_if(buffered_.begin(), buffered_.end(), [&](const Message& m) {
      return m.source == request->source && m.tag == request->tag;
    });
    if (it == buffered_.end()) {
      posted_.push_back(request);
      return;
    }
    taken = std::move(*it);
    buffered_.erase(it);
  }
  fill(*request, taken.source, taken.dtype, taken.count, taken.bytes.data());
  host_.track_memory(taken.source_world, TESSERA_MEM_COMM,
                     -static_cast<int64_t>(taken.bytes.size()));
}

bool Mailbox::withdraw(const RecvRequest& request) {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = std::find_if(posted_.begin(), posted_.end(),
                               [&](const auto& r) { return r.get() == &request; });
  if (it == posted_.end()) return false;
  posted_.erase(it);
  return true;
}

void Mailbox::fail_posted(tessera_status status, const std::string& message) {
  std::deque<std::shared_ptr<RecvRequest>> failed;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    failed.swap(posted_);
  }
  for (const auto& r : failed)
    r->done->finish(status, detail::concat(r->what, " failed: ", message));
}

}  // namespace tessera::inmemory
