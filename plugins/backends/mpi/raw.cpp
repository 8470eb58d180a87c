// The raw path (tessera_backend_api.raw_post): each operation as one
// blocking MPI call on the group's communicator, for benchmarks that time
// the plugin against MPI itself.
#include <climits>

#include "comm.hpp"
#include "group.hpp"
#include "runtime.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::mpi {

void run_raw(const Group& group, const tessera_coll_args& a, std::vector<std::byte>& staging) {
  const uint64_t count = sdk::coll_block_count(a, group.size());
  if (count > uint64_t{INT_MAX}) {
    throw Error(TESSERA_ERR_UNSUPPORTED,
                detail::concat("raw ", coll_name(a.coll), " on ", group.label(), ": ", count,
                               " elements exceed the ", INT_MAX, " one MPI call can take"));
  }
  const Plan p = make_plan(group, a, staging);
  const int n = static_cast<int>(p.count);
  const MPI_Comm comm = group.data();
  int rc = MPI_SUCCESS;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
      rc = MPI_Allreduce(p.send, p.recv, n, p.type, p.op, comm);
      break;
    case TESSERA_COLL_BROADCAST:
      rc = MPI_Bcast(p.recv, n, p.type, a.root, comm);
      break;
    case TESSERA_COLL_REDUCE:
      rc = MPI_Reduce(p.send, p.recv, n, p.type, p.op, a.root, comm);
      break;
    case TESSERA_COLL_ALLGATHER:
      rc = MPI_Allgather(p.send, n, p.type, p.recv, n, p.type, comm);
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
      rc = MPI_Reduce_scatter_block(p.send, p.recv, n, p.type, p.op, comm);
      break;
    case TESSERA_COLL_GATHER:
      rc = MPI_Gather(p.send, n, p.type, p.recv, n, p.type, a.root, comm);
      break;
    case TESSERA_COLL_SCATTER:
      rc = MPI_Scatter(p.send, n, p.type, p.recv, n, p.type, a.root, comm);
      break;
    case TESSERA_COLL_ALLTOALL:
      rc = MPI_Alltoall(p.send, n, p.type, p.recv, n, p.type, comm);
      break;
    case TESSERA_COLL_BARRIER:
      rc = MPI_Barrier(comm);
      break;
    case TESSERA_COLL_SEND:
      rc = MPI_Send(p.send, n, p.type, a.peer, a.tag, comm);
      break;
    case TESSERA_COLL_RECV:
      rc = MPI_Recv(p.recv, n, p.type, a.peer, a.tag, comm, MPI_STATUS_IGNORE);
      break;
    default:
      throw Error(TESSERA_ERR_UNSUPPORTED,
                  detail::concat("raw: MPI has no call for collective type ", a.coll));
  }
  if (rc != MPI_SUCCESS) {
    throw_mpi(rc, detail::concat("raw ", mpi_call_name(a.coll, false), " on ", group.label()),
              TESSERA_ERR_PEER_LOST);
  }
  // MPI has no average: the sum divided by the group size, as in post().
  if (a.op == TESSERA_AVG && sdk::coll_is_reduction(a.coll) && p.recv != nullptr) {
    sdk::finish_avg(p.recv, p.count, a.send.dtype, group.size());
  }
}

}  // namespace tessera::mpi
