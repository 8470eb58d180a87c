#include "bench_raw.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "bench_buffer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

// Runs the op once through the raw call on zeroed buffers of `bytes` (on
// the spec's device). Returns false when this rank has no raw call for it.
bool try_raw_once(Communicator& comm, const BenchSpec& spec, uint64_t bytes) {
  if (!comm.has_raw()) return false;
  const OpLayout layout = op_layout(spec.op, bytes, spec.dtype, comm.size());
  const BenchBuffer send(spec.device, layout.send_count, spec.dtype);
  const BenchBuffer recv(spec.device, layout.in_place ? 0 : layout.recv_count, spec.dtype);
  const tessera_buffer& send_view = send.view();
  const tessera_buffer& recv_view = layout.in_place ? send_view : recv.view();
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

  const int64_t lacking =
      sum_over_ranks(comm, spec.device, try_raw_once(comm, spec, smallest) ? 0 : 1);
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
