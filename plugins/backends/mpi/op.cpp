#include "op.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "dtypes.hpp"
#include "group.hpp"
#include "runtime.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::mpi {
namespace {

const std::byte* at(const void* p, uint64_t bytes) noexcept {
  return static_cast<const std::byte*>(p) + bytes;
}

// True for the operations issued as several MPI calls when large.
bool elementwise(tessera_coll_type c) noexcept {
  return c == TESSERA_COLL_ALLREDUCE || c == TESSERA_COLL_REDUCE || c == TESSERA_COLL_BROADCAST ||
         c == TESSERA_COLL_SEND || c == TESSERA_COLL_RECV;
}

void* offset(void* p, uint64_t bytes) noexcept {
  return p == nullptr ? p : static_cast<std::byte*>(p) + bytes;
}
const void* offset(const void* p, uint64_t bytes) noexcept {
  return (p == nullptr || p == MPI_IN_PLACE) ? p : static_cast<const std::byte*>(p) + bytes;
}

}  // namespace

void OpState::reset() noexcept {
  coll = TESSERA_COLL_BARRIER;
  seq = 0;
  peer = -1;
  tag = 0;
  dtype = TESSERA_U8;
  chunk = 0;
  total = 0;
  avg_result = nullptr;
  avg_count = 0;
  timeout_ms = -1;
  deadline = Deadline::max();
  next_liveness_check = {};
  requests.clear();
  next = 0;
}

std::string op_label(const OpState& op) {
  if (op.coll == kCollSplit) return detail::concat("split #", op.seq);
  if (op.coll == TESSERA_COLL_SEND) {
    return detail::concat("send #", op.seq, " to rank ", op.peer, " (tag ", op.tag, ")");
  }
  if (op.coll == TESSERA_COLL_RECV) {
    return detail::concat("recv #", op.seq, " from rank ", op.peer, " (tag ", op.tag, ")");
  }
  return detail::concat(coll_name(op.coll), " #", op.seq);
}

const char* mpi_call_name(tessera_coll_type coll, bool nonblocking) noexcept {
  switch (coll) {
    case TESSERA_COLL_ALLREDUCE:
      return nonblocking ? "MPI_Iallreduce" : "MPI_Allreduce";
    case TESSERA_COLL_BROADCAST:
      return nonblocking ? "MPI_Ibcast" : "MPI_Bcast";
    case TESSERA_COLL_REDUCE:
      return nonblocking ? "MPI_Ireduce" : "MPI_Reduce";
    case TESSERA_COLL_ALLGATHER:
      return nonblocking ? "MPI_Iallgather" : "MPI_Allgather";
    case TESSERA_COLL_REDUCE_SCATTER:
      return nonblocking ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
    case TESSERA_COLL_GATHER:
      return nonblocking ? "MPI_Igather" : "MPI_Gather";
    case TESSERA_COLL_SCATTER:
      return nonblocking ? "MPI_Iscatter" : "MPI_Scatter";
    case TESSERA_COLL_ALLTOALL:
      return nonblocking ? "MPI_Ialltoall" : "MPI_Alltoall";
    case TESSERA_COLL_BARRIER:
      return nonblocking ? "MPI_Ibarrier" : "MPI_Barrier";
    case TESSERA_COLL_SEND:
      return nonblocking ? "MPI_Isend" : "MPI_Send";
    case TESSERA_COLL_RECV:
      return nonblocking ? "MPI_Irecv" : "MPI_Recv";
    default:
      return nonblocking ? "MPI_Iallgather" : "MPI_Allgather";
  }
}

Plan make_plan(const Group& group, const tessera_coll_args& a, std::vector<std::byte>& staging) {
  const int32_t rank = group.rank();
  const bool use_send = sdk::coll_uses_send(a.coll, rank, a.root);
  const bool use_recv = sdk::coll_uses_recv(a.coll, rank, a.root);
  Plan p;
  const tessera_dtype dtype = use_send ? a.send.dtype : a.recv.dtype;
  p.type = mpi_datatype(dtype);
  if (sdk::coll_is_reduction(a.coll)) p.op = mpi_op(dtype, a.op);
  p.count = sdk::coll_block_count(a, group.size());
  p.send = use_send ? a.send.data : nullptr;
  p.recv = use_recv ? a.recv.data : nullptr;
  if (!use_send || !use_recv) return p;

  const size_t esz = tessera_dtype_size(dtype);
  const uint64_t block = p.count * esz;
  const void* s = a.send.data;
  const void* r = a.recv.data;
  const bool overlapping = sdk::buffers_overlap(s, a.send.count * esz, r, a.recv.count * esz);
  bool in_place = false;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_REDUCE:
      in_place = s == r;
      break;
    case TESSERA_COLL_BROADCAST:  // the root: send from recv after a local copy
      if (s != r && block > 0) std::memmove(a.recv.data, s, static_cast<size_t>(block));
      p.send = nullptr;
      return p;
    case TESSERA_COLL_ALLGATHER:
      in_place = at(r, static_cast<uint64_t>(rank) * block) == s;
      break;
    case TESSERA_COLL_GATHER:
      in_place = at(r, static_cast<uint64_t>(a.root) * block) == s;
      break;
    case TESSERA_COLL_SCATTER:
      // MPI's in-place scatter leaves the root's block where it is.
      if (at(s, static_cast<uint64_t>(a.root) * block) == r) {
        p.recv = static_cast<void*>(MPI_IN_PLACE);
        return p;
      }
      break;
    default:
      break;
  }
  if (in_place) {
    p.send = MPI_IN_PLACE;
  } else if (overlapping) {
    const uint64_t bytes = a.send.count * esz;
    staging.resize(static_cast<size_t>(bytes));
    std::memcpy(staging.data(), s, static_cast<size_t>(bytes));
    p.send = staging.data();
  }
  return p;
}

void start_op(const Group& group, const tessera_coll_args& a, OpState& op) {
  if (!elementwise(a.coll) && sdk::coll_block_count(a, group.size()) > uint64_t{INT_MAX}) {
    throw Error(TESSERA_ERR_UNSUPPORTED,
                detail::concat(coll_name(a.coll), " on ", group.label(), ": blocks of ",
                               sdk::coll_block_count(a, group.size()), " elements exceed the ",
                               INT_MAX, " elements one MPI call can take; split the operation"));
  }
  const Plan p = make_plan(group, a, op.staging);
  const MPI_Comm comm = group.data();
  op.dtype = sdk::coll_uses_send(a.coll, group.rank(), a.root) ? a.send.dtype : a.recv.dtype;
  const auto fail = [&](int rc) {
    throw_mpi(rc,
              detail::concat(op_label(op), " on ", group.label(), ": ", mpi_call_name(a.coll, true),
                             " failed to start"),
              TESSERA_ERR_PEER_LOST);
  };
  if (elementwise(a.coll)) {
    const uint64_t chunk = group.engine().settings().chunk_elements;
    const uint64_t esz = tessera_dtype_size(op.dtype);
    op.total = p.count;
    op.chunk = chunk;
    uint64_t done = 0;
    do {
      const uint64_t n = std::min(chunk, p.count - done);
      const int c = static_cast<int>(n);
      const uint64_t bytes = done * esz;
      MPI_Request& req = op.requests.emplace_back(MPI_REQUEST_NULL);
      int rc = MPI_SUCCESS;
      switch (a.coll) {
        case TESSERA_COLL_ALLREDUCE:
          rc = MPI_Iallreduce(offset(p.send, bytes), offset(p.recv, bytes), c, p.type, p.op, comm,
                              &req);
          break;
        case TESSERA_COLL_REDUCE:
          rc = MPI_Ireduce(offset(p.send, bytes), offset(p.recv, bytes), c, p.type, p.op, a.root,
                           comm, &req);
          break;
        case TESSERA_COLL_BROADCAST:
          rc = MPI_Ibcast(offset(p.recv, bytes), c, p.type, a.root, comm, &req);
          break;
        case TESSERA_COLL_SEND:
          rc = MPI_Isend(offset(p.send, bytes), c, p.type, a.peer, a.tag, comm, &req);
          break;
        default:  // TESSERA_COLL_RECV
          rc = MPI_Irecv(offset(p.recv, bytes), c, p.type, a.peer, a.tag, comm, &req);
          break;
      }
      if (rc != MPI_SUCCESS) {
        op.requests.pop_back();
        fail(rc);
      }
      done += n;
    } while (done < p.count);
    if (a.op == TESSERA_AVG && sdk::coll_is_reduction(a.coll) && p.recv != nullptr) {
      op.avg_result = p.recv;
      op.avg_count = p.count;
    }
    return;
  }

  const int n = static_cast<int>(p.count);
  MPI_Request& req = op.requests.emplace_back(MPI_REQUEST_NULL);
  int rc = MPI_SUCCESS;
  switch (a.coll) {
    case TESSERA_COLL_ALLGATHER:
      rc = MPI_Iallgather(p.send, n, p.type, p.recv, n, p.type, comm, &req);
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
      rc = MPI_Ireduce_scatter_block(p.send, p.recv, n, p.type, p.op, comm, &req);
      if (a.op == TESSERA_AVG) {
        op.avg_result = p.recv;
        op.avg_count = p.count;
      }
      break;
    case TESSERA_COLL_GATHER:
      rc = MPI_Igather(p.send, n, p.type, p.recv, n, p.type, a.root, comm, &req);
      break;
    case TESSERA_COLL_SCATTER:
      rc = MPI_Iscatter(p.send, n, p.type, p.recv, n, p.type, a.root, comm, &req);
      break;
    case TESSERA_COLL_ALLTOALL:
      rc = MPI_Ialltoall(p.send, n, p.type, p.recv, n, p.type, comm, &req);
      break;
    default:  // TESSERA_COLL_BARRIER
      rc = MPI_Ibarrier(comm, &req);
      break;
  }
  if (rc != MPI_SUCCESS) {
    op.requests.pop_back();
    fail(rc);
  }
}

bool test_op(const Group& group, OpState& op) {
  while (op.next < op.requests.size()) {
    int done = 0;
    MPI_Status status{};
    const bool recv = op.coll == TESSERA_COLL_RECV;
    const int rc = MPI_Test(&op.requests[op.next], &done, recv ? &status : MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      ++op.next;  // a request that reports an error is complete
      throw_mpi(rc, detail::concat(op_label(op), " on ", group.label(), " failed"),
                TESSERA_ERR_PEER_LOST);
    }
    if (done == 0) return false;
    if (recv) {
      const uint64_t want = std::min(op.chunk, op.total - op.next * op.chunk);
      int got = 0;
      MPI_Get_count(&status, mpi_datatype(op.dtype), &got);
      if (got == MPI_UNDEFINED || static_cast<uint64_t>(got) != want) {
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        ++op.next;
        throw Error(
            TESSERA_ERR_MISMATCH,
            detail::concat(op_label(op), " on ", group.label(), ": the message held ", bytes,
                           " bytes, but ", want, " elements of ", dtype_name(op.dtype), " (",
                           want * tessera_dtype_size(op.dtype), " bytes) were expected"));
      }
    }
    ++op.next;
  }
  if (op.avg_result != nullptr) {
    sdk::finish_avg(op.avg_result, op.avg_count, op.dtype, group.size());
    op.avg_result = nullptr;
  }
  return true;
}

}  // namespace tessera::mpi
