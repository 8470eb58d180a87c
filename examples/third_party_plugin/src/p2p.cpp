#include "p2p.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include <tessera/sdk/error.hpp>

namespace example_threads {

using tessera::Error;

void run_send(const RankContext& ctx, const tessera_coll_args& a) {
  const size_t bytes = a.send.count * tessera_dtype_size(a.send.dtype);
  Message message{a.tag, a.send.dtype, a.send.count, std::vector<unsigned char>(bytes)};
  if (bytes > 0) std::memcpy(message.bytes.data(), a.send.data, bytes);
  ctx.group->send(ctx.rank, a.peer, std::move(message));
}

RecvWork::RecvWork(const RankContext& ctx, const tessera_coll_args& a, std::string what)
    : group_(ctx.group), op_(std::make_shared<RecvOp>()), deadline_(ctx.deadline(a.timeout_ms)) {
  op_->from = a.peer;
  op_->to = ctx.rank;
  op_->tag = a.tag;
  op_->dest = a.recv;
  op_->what = std::move(what);
  group_->post_recv(op_);
}

RecvWork::~RecvWork() {
  try {
    group_->wait_recv(op_, Deadline{false, Clock::now(), 0}, /*expire=*/true);
  } catch (...) {  // only std::bad_alloc building the message: nothing to report it to
  }
}

void RecvWork::rethrow() const {
  if (op_->status != TESSERA_OK) throw Error(op_->status, op_->error);
}

void RecvWork::wait(int64_t timeout_ms) {
  const Deadline limit = Deadline::after(timeout_ms);
  const bool own = limit.forever || (!deadline_.forever && deadline_.at <= limit.at);
  if (!group_->wait_recv(op_, own ? deadline_ : limit, own)) {
    throw Error(TESSERA_ERR_TIMEOUT, op_->what + ": still waiting for rank " +
                                         std::to_string(op_->from) + " after " +
                                         std::to_string(timeout_ms) + " ms");
  }
  rethrow();
}

bool RecvWork::test() {
  const bool expired = !deadline_.forever && Clock::now() >= deadline_.at;
  const Deadline now{false, Clock::now(), 0};
  if (!group_->wait_recv(op_, expired ? deadline_ : now, expired)) return false;
  rethrow();
  return true;
}

}  // namespace example_threads
