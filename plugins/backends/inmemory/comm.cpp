#include "comm.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "stream.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "work.hpp"

namespace tessera::inmemory {

namespace {

// True when send and recv of `args` overlap in a way other than the
// in-place form the data movement supports for this collective.
bool needs_staging(const tessera_coll_args& a, int32_t rank, uint64_t n) {
  const size_t esz = tessera_dtype_size(a.send.dtype);
  if (!sdk::buffers_overlap(a.send.data, a.send.count * esz, a.recv.data, a.recv.count * esz))
    return false;
  const auto* s = static_cast<const std::byte*>(a.send.data);
  const auto* r = static_cast<const std::byte*>(a.recv.data);
  const uint64_t block = n * esz;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_REDUCE:
    case TESSERA_COLL_BROADCAST:
      return s != r;
    case TESSERA_COLL_ALLGATHER:
      return s != r + static_cast<uint64_t>(rank) * block;
    case TESSERA_COLL_REDUCE_SCATTER:
      return r != s + static_cast<uint64_t>(rank) * block;
    case TESSERA_COLL_GATHER:
      return s != r + static_cast<uint64_t>(a.root) * block;
    case TESSERA_COLL_SCATTER:
      return r != s + static_cast<uint64_t>(a.root) * block;
    default:
      return true;  // alltoall: every rank reads block r of every send
  }
}

}  // namespace

InMemoryComm::InMemoryComm(std::shared_ptr<Group> group, int32_t rank)
    : group_(std::move(group)), rank_(rank), executor_([this](Task& t) { return run_task(t); }) {}

InMemoryComm::~InMemoryComm() {
  const size_t pending = executor_.pending();
  if (pending > 0) {
    try {
      const std::string why =
          detail::concat(group_->rank_label(rank_), " destroyed its communicator with ", pending,
                         " operation(s) still pending");
      group_->engine().host.log(TESSERA_LOG_WARN, group_->world_rank(rank_), "inmemory: ", why);
      group_->fail(TESSERA_ERR_PEER_LOST, why);
    } catch (...) {  // NOLINT(bugprone-empty-catch): only allocation can fail here
    }
  }
  executor_.shutdown();
  group_->mailbox(rank_).fail_posted(TESSERA_ERR_PEER_LOST, "the communicator was destroyed");
  const size_t held = staging_.size() + scratch_.tile.size();
  if (held > 0) {
    group_->engine().host.track_memory(group_->world_rank(rank_), TESSERA_MEM_COMM,
                                       -static_cast<int64_t>(held));
  }
}

std::string InMemoryComm::op_label(int32_t coll, uint64_t seq) const {
  return detail::concat(call_name(coll), " #", seq, " on ", group_->rank_label(rank_),
                        " of group of ", group_->size());
}

const std::byte* InMemoryComm::stage(const tessera_buffer& send, int32_t coll) {
  const uint64_t bytes = send.count * tessera_dtype_size(send.dtype);
  if (staging_.size() < bytes) {
    const auto grow = static_cast<int64_t>(bytes - staging_.size());
    try {
      staging_.resize(static_cast<size_t>(bytes));
    } catch (const std::bad_alloc&) {
      throw Error(
          TESSERA_ERR_OUT_OF_MEMORY,
          detail::concat("inmemory: cannot allocate ", bytes, " bytes to stage the send buffer of ",
                         op_label(coll, seq_), " (it overlaps the recv buffer)"));
    }
    group_->engine().host.track_memory(group_->world_rank(rank_), TESSERA_MEM_COMM, grow);
  }
  std::memcpy(staging_.data(), send.data, static_cast<size_t>(bytes));
  return staging_.data();
}

Call InMemoryComm::make_call(const tessera_coll_args& args) {
  Call c;
  c.coll = args.coll;
  const bool use_send = sdk::coll_uses_send(args.coll, rank_, args.root);
  const bool use_recv = sdk::coll_uses_recv(args.coll, rank_, args.root);
  if (args.coll != TESSERA_COLL_BARRIER) {
    c.count = sdk::coll_block_count(args, group_->size());
    c.dtype = use_send ? args.send.dtype : args.recv.dtype;
  }
  if (sdk::coll_is_reduction(args.coll)) c.op = args.op;
  if (sdk::coll_has_root(args.coll)) c.root = args.root;
  if (use_send) c.send = static_cast<const std::byte*>(args.send.data);
  if (use_recv) c.recv = static_cast<std::byte*>(args.recv.data);
  if (use_send && use_recv && needs_staging(args, rank_, c.count))
    c.send = stage(args.send, args.coll);
  return c;
}

void InMemoryComm::run_collective(const tessera_coll_args& args) {
  if (group_->fault().is_set()) group_->fault().throw_lost(op_label(args.coll, seq_ + 1));
  const uint64_t seq = ++seq_;
  const int64_t timeout = group_->engine().settings.resolve_timeout(args.timeout_ms);
  const Call call = make_call(args);
  if (scratch_.tile.empty() &&
      streams(call, group_->size(), group_->engine().settings.stream_bytes)) {
    scratch_.tile.resize(kStreamTileBytes);
    group_->engine().host.track_memory(group_->world_rank(rank_), TESSERA_MEM_COMM,
                                       static_cast<int64_t>(kStreamTileBytes));
  }
  group_->join(rank_, seq, call, deadline_after(timeout), timeout);
  const std::string mismatch = group_->check_agreement(seq);
  if (mismatch.empty()) run_share(*group_, rank_, scratch_);
  group_->leave(rank_, seq);
  if (!mismatch.empty()) throw Error(TESSERA_ERR_MISMATCH, mismatch);
}

void InMemoryComm::run_split(Task& task) {
  if (group_->fault().is_set()) group_->fault().throw_lost(op_label(kCollSplit, seq_ + 1));
  const uint64_t seq = ++seq_;
  const int64_t timeout = group_->engine().settings.timeout_ms;
  Call call;
  call.coll = kCollSplit;
  call.color = task.color;
  call.key = task.key;
  group_->join(rank_, seq, call, deadline_after(timeout), timeout);
  const std::string mismatch = group_->check_agreement(seq);
  if (mismatch.empty() && task.color >= 0) {
    std::vector<std::pair<int32_t, int32_t>> members;  // (key, rank here)
    for (int32_t r = 0; r < group_->size(); ++r) {
      if (group_->call(r).color == task.color) members.emplace_back(group_->call(r).key, r);
    }
    std::sort(members.begin(), members.end());
    std::vector<int32_t> world;
    world.reserve(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      world.push_back(group_->world_rank(members[i].second));
      if (members[i].second == rank_) task.split_rank = static_cast<int32_t>(i);
    }
    task.split_group = group_->split_child(seq, task.color, world);
  }
  group_->leave(rank_, seq);
  if (!mismatch.empty()) throw Error(TESSERA_ERR_MISMATCH, mismatch);
  group_->engine().host.log(
      TESSERA_LOG_DEBUG, group_->world_rank(rank_), "inmemory: split #", seq, " of ",
      group_->rank_label(rank_), " (color ", task.color, ", key ", task.key, ") -> ",
      task.split_group ? detail::concat("rank ", task.split_rank, " of ", task.split_group->size())
                       : std::string("no group"));
}

void InMemoryComm::run_send(const tessera_coll_args& args) {
  const std::string what =
      detail::concat("send to rank ", args.peer, " (tag ", args.tag, ") on ",
                     group_->rank_label(rank_), " of group of ", group_->size());
  group_->mailbox(args.peer).deliver(rank_, group_->world_rank(rank_), args.tag, args.send,
                                     group_->fault(), what);
}

std::shared_ptr<RecvRequest> InMemoryComm::start_recv(const tessera_coll_args& args,
                                                      std::shared_ptr<Completion> done) {
  auto request = std::make_shared<RecvRequest>();
  request->source = args.peer;
  request->tag = args.tag;
  request->buffer = args.recv;
  request->timeout_ms = group_->engine().settings.resolve_timeout(args.timeout_ms);
  request->deadline = deadline_after(request->timeout_ms);
  request->what = detail::concat("recv from rank ", args.peer, " (tag ", args.tag, ") on ",
                                 group_->rank_label(rank_), " of group of ", group_->size());
  request->done = std::move(done);
  group_->mailbox(rank_).post(request, group_->fault());
  return request;
}

bool InMemoryComm::run_task(Task& task) {
  if (task.kind == Task::Kind::kSplit) {
    run_split(task);
    return true;
  }
  switch (task.args.coll) {
    case TESSERA_COLL_SEND:
      run_send(task.args);
      return true;
    case TESSERA_COLL_RECV:
      task.set_request(start_recv(task.args, task.done));
      return false;
    default:
      run_collective(task.args);
      return true;
  }
}

std::unique_ptr<sdk::Work> InMemoryComm::post(const tessera_coll_args& args, bool nonblocking) {
  sdk::validate_coll_args(args, rank_, group_->size(), TESSERA_BACKEND_CAP_CPU_BUFFERS);
  const bool p2p = args.coll == TESSERA_COLL_SEND || args.coll == TESSERA_COLL_RECV;
  if (!nonblocking && executor_.idle()) {
    if (args.coll == TESSERA_COLL_RECV) {
      const auto request = start_recv(args, std::make_shared<Completion>());
      await_recv(*group_, rank_, *request);
    } else if (args.coll == TESSERA_COLL_SEND) {
      run_send(args);
    } else {
      run_collective(args);
    }
    return nullptr;
  }
  auto task = std::make_shared<Task>();
  task->args = args;
  if (p2p && executor_.idle()) {
    executor_.run(*task);  // starting a send or receive never blocks
  } else {
    executor_.submit(task);
  }
  auto work = std::make_unique<InMemoryWork>(std::move(task), group_, rank_);
  if (nonblocking) return work;
  work->wait(-1);
  return nullptr;
}

std::unique_ptr<sdk::Comm> InMemoryComm::split(int32_t color, int32_t key) {
  auto task = std::make_shared<Task>();
  task->kind = Task::Kind::kSplit;
  task->color = color;
  task->key = key;
  if (executor_.idle()) {
    executor_.run(*task);
  } else {
    executor_.submit(task);
  }
  InMemoryWork(task, group_, rank_).wait(-1);
  if (!task->split_group) return nullptr;
  return std::make_unique<InMemoryComm>(task->split_group, task->split_rank);
}

std::unique_ptr<sdk::Comm> InMemoryComm::shrink(int64_t grace_ms) {
  auto [group, rank] = group_->shrink(rank_, grace_ms);
  return std::make_unique<InMemoryComm>(std::move(group), rank);
}

void InMemoryComm::abort(const char* reason) noexcept {
  try {
    group_->abort(rank_, reason != nullptr ? reason : "aborted");
  } catch (...) {  // NOLINT(bugprone-empty-catch): only allocation can fail here
  }
}

}  // namespace tessera::inmemory
