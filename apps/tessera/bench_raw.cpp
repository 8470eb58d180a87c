#include "bench_raw.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "aligned_buffer.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

// Runs the op once through the raw call on zeroed buffers of `bytes`.
// Returns false when this rank has no raw call for it.
bool try_raw_once(Communicator& comm, const BenchSpec& spec, uint64_t bytes) {
  if (!comm.has_raw()) return false;
  const OpLayout layout = op_layout(spec.op, bytes, spec.dtype, comm.size());
  const size_t elt = tessera_dtype_size(spec.dtype);
  AlignedBuffer send(layout.send_count * elt);
  AlignedBuffer recv(layout.recv_count * elt);
  send.touch();
  recv.touch();
  const tessera_buffer send_view = cpu_buffer(send.data(), layout.send_count, spec.dtype);
  const tessera_buffer recv_view =
      layout.in_place ? send_view : cpu_buffer(recv.data(), layout.recv_count, spec.dtype);
  try {
    run_raw_op(comm, spec.op, send_view, recv_view, spec.redop);
  } catch (const Error& e) {
    if (e.status() != TESSERA_ERR_UNSUPPORTED) throw;
    return false;
  }
  return true;
}

}  // namespace

std::string check_raw_call(Communicator& comm, const BenchSpec& spec, const BenchPlan& plan) {
  uint64_t smallest = plan.sizes.front().bytes;
  for (const auto& s : plan.sizes) smallest = std::min(smallest, s.bytes);

  int64_t lacking = try_raw_once(comm, spec, smallest) ? 0 : 1;
  comm.allreduce(cpu_buffer(&lacking, 1, TESSERA_I64), cpu_buffer(&lacking, 1, TESSERA_I64),
                 TESSERA_SUM);
  if (lacking == 0) return {};
  std::string message = "--compare-raw: backend '" + comm.backend_name() +
                        "' has no raw library call for " + std::string(coll_name(spec.op));
  if (lacking < comm.size()) {
    message +=
        " on " + std::to_string(lacking) + " of its " + std::to_string(comm.size()) + " ranks";
  }
  return message;
}

}  // namespace tessera::cli
