#include "comm.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "control.hpp"
#include "group.hpp"
#include "progress.hpp"
#include "runtime.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/error.hpp"
#include "work.hpp"

namespace tessera::mpi {

MpiComm::MpiComm(std::shared_ptr<Group> group) : group_(std::move(group)) {}

MpiComm::~MpiComm() {
  group_->engine().control().detach(group_.get());
  if (scratch_ && scratch_->pending()) group_->engine().abandon(std::move(scratch_));
}

int32_t MpiComm::rank() const { return group_->rank(); }
int32_t MpiComm::size() const { return group_->size(); }

std::unique_ptr<OpState> MpiComm::take_scratch() {
  if (!scratch_) return std::make_unique<OpState>();
  std::unique_ptr<OpState> op = std::move(scratch_);
  op->reset();
  return op;
}

std::unique_ptr<sdk::Work> MpiComm::post(const tessera_coll_args& args, bool nonblocking) {
  Group& g = *group_;
  sdk::validate_coll_args(args, g.rank(), g.size(), TESSERA_BACKEND_CAP_CPU_BUFFERS);
  const bool p2p = args.coll == TESSERA_COLL_SEND || args.coll == TESSERA_COLL_RECV;
  if (p2p && args.tag > g.tag_ub()) {
    sdk::coll_detail::fail(args, g.rank(), g.size(), "tag ", args.tag,
                           " is above the largest tag MPI accepts (MPI_TAG_UB = ", g.tag_ub(), ")");
  }
  std::unique_ptr<OpState> op = nonblocking ? std::make_unique<OpState>() : take_scratch();
  op->coll = args.coll;
  if (args.coll == TESSERA_COLL_SEND) {
    op->peer = args.peer;
    op->tag = args.tag;
    op->seq = g.begin_send(args.peer);
  } else if (args.coll == TESSERA_COLL_RECV) {
    op->peer = args.peer;
    op->tag = args.tag;
    op->seq = g.begin_recv(args.peer);
  } else {
    op->seq = g.begin_collective();
  }
  if (ControlService::has_message(g)) g.engine().control().drain();
  if (g.failed()) g.throw_failure(op_label(*op));
  op->started = Clock::now();
  op->timeout_ms = g.engine().settings().resolve_timeout(args.timeout_ms);
  op->deadline = deadline_after(op->started, op->timeout_ms);
  try {
    start_op(g, args, *op);
  } catch (const Error& e) {
    if (op->pending()) g.engine().abandon(std::move(op));
    if (e.status() == TESSERA_ERR_PEER_LOST) {
      note_peer_lost();
      fail_group(group_, e.status(), detail::concat("rank ", g.rank(), " lost a peer: ", e.what()),
                 false);
    }
    throw;
  }
  if (nonblocking) return std::make_unique<MpiWork>(group_, std::move(op));
  drive(group_, op, op->started, Deadline::max());
  scratch_ = std::move(op);
  return nullptr;
}

std::unique_ptr<sdk::Comm> MpiComm::split(int32_t color, int32_t key) {
  Group& g = *group_;
  const int32_t size = g.size();
  auto op = std::make_unique<OpState>();
  op->coll = kCollSplit;
  op->seq = g.begin_collective();
  const uint64_t number = g.next_split();  // every rank counts it, opted out or not
  if (ControlService::has_message(g)) g.engine().control().drain();
  if (g.failed()) g.throw_failure(op_label(*op));
  op->started = Clock::now();
  op->timeout_ms = g.engine().settings().timeout_ms;
  op->deadline = deadline_after(op->started, op->timeout_ms);

  // Everyone's (color, key), gathered with a deadline: after it, every
  // member is known to be inside this split, so MPI_Comm_split cannot hang.
  const size_t pair = 2 * sizeof(int32_t);
  op->staging.resize(pair * (static_cast<size_t>(size) + 1));
  const int32_t mine[2] = {color, key};
  std::memcpy(op->staging.data(), mine, pair);
  MPI_Request& request = op->requests.emplace_back(MPI_REQUEST_NULL);
  check_mpi(MPI_Iallgather(op->staging.data(), 2, MPI_INT32_T, op->staging.data() + pair, 2,
                           MPI_INT32_T, g.data(), &request),
            detail::concat(op_label(*op), " on ", g.label(), ": MPI_Iallgather"),
            TESSERA_ERR_PEER_LOST);
  drive(group_, op, op->started, Deadline::max());
  std::vector<int32_t> all(2 * static_cast<size_t>(size));
  std::memcpy(all.data(), op->staging.data() + pair, all.size() * sizeof(int32_t));

  const std::string what = detail::concat(op_label(*op), " on ", g.label());
  MPI_Comm data = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(g.data(), color < 0 ? MPI_UNDEFINED : color, key, &data),
            what + ": MPI_Comm_split", TESSERA_ERR_PEER_LOST);
  if (color < 0) return nullptr;

  std::vector<std::pair<int32_t, int32_t>> order;  // (key, rank here) of the same color
  for (int32_t r = 0; r < size; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) order.emplace_back(all[2 * r + 1], r);
  }
  std::sort(order.begin(), order.end());
  std::vector<Identity> members;
  int32_t new_rank = -1;
  for (const auto& [k, r] : order) {
    if (r == g.rank()) new_rank = static_cast<int32_t>(members.size());
    members.push_back(g.member(r));
  }
  int mpi_rank = -1;
  MPI_Comm_rank(data, &mpi_rank);
  TESSERA_CHECK(mpi_rank == new_rank, TESSERA_ERR_INTERNAL, what, ": MPI_Comm_split made this ",
                "rank ", mpi_rank, " of the new group, but the (color, key) order says ", new_rank);
  auto child = open_group(g.engine_ptr(), data, detail::concat("split ", number, " of ", g.name()),
                          new_rank, std::move(members), op->deadline);
  g.add_child(child);
  g.engine().host().log(TESSERA_LOG_DEBUG, g.world_rank(), "mpi: ", what, " (color ", color,
                        ", key ", key, ") -> rank ", new_rank, " of ", child->size());
  return std::make_unique<MpiComm>(std::move(child));
}

void MpiComm::abort(const char* reason) noexcept {
  try {
    fail_group(group_, TESSERA_ERR_PEER_LOST,
               detail::concat("aborted by rank ", group_->rank(), ": ",
                              reason != nullptr ? reason : "aborted"),
               true);
  } catch (...) {  // NOLINT(bugprone-empty-catch): only allocation can fail here
  }
}

void MpiComm::raw(const tessera_coll_args& args) { run_raw(*group_, args, raw_staging_); }

}  // namespace tessera::mpi
