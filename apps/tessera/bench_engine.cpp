#include "bench_engine.hpp"

#include <algorithm>
#include <chrono>

#include "aligned_buffer.hpp"
#include "bench_check.hpp"
#include "cli_error.hpp"
#include "tessera/sdk/dtype.hpp"

namespace tessera::cli {

BenchPlan plan_bench(const BenchSpec& spec, const std::vector<uint64_t>& requested, int ranks) {
  BenchPlan plan;
  plan.ranks = ranks;
  plan.unit = tessera_dtype_size(spec.dtype);
  if (op_splits_by_rank(spec.op)) plan.unit *= static_cast<uint64_t>(ranks);
  plan.sizes = round_sizes(requested, plan.unit, plan.dropped);
  if (plan.sizes.empty()) {
    throw UsageError("no size in --sizes is large enough for " + std::string(coll_name(spec.op)) +
                     " of " + std::string(dtype_name(spec.dtype)) + " over " +
                     std::to_string(ranks) + " ranks: the smallest is " +
                     std::to_string(plan.unit) + " B");
  }
  return plan;
}

namespace {

// Buffers of one rank for one size, filled for the timed runs.
struct RankBuffers {
  AlignedBuffer send;
  AlignedBuffer recv;
  tessera_buffer send_view{};
  tessera_buffer recv_view{};
};

RankBuffers make_buffers(const CheckCase& c, const CheckReference& ref, int rank) {
  const size_t elt = tessera_dtype_size(c.dtype);
  RankBuffers b;
  b.send = AlignedBuffer(c.layout.send_count * elt);
  b.recv = AlignedBuffer(c.layout.recv_count * elt);
  ref.fill_input(rank, b.send.data());
  b.recv.touch();
  b.send_view = cpu_buffer(b.send.data(), c.layout.send_count, c.dtype);
  b.recv_view =
      c.layout.in_place ? b.send_view : cpu_buffer(b.recv.data(), c.layout.recv_count, c.dtype);
  return b;
}

// Largest per-rank value, gathered through `comm`.
double max_over_ranks(Communicator& comm, double local) {
  std::vector<double> all(static_cast<size_t>(comm.size()));
  comm.allgather(cpu_buffer(&local, 1, TESSERA_F64),
                 cpu_buffer(all.data(), all.size(), TESSERA_F64));
  return *std::max_element(all.begin(), all.end());
}

uint64_t sum_over_ranks(Communicator& comm, uint64_t local) {
  auto value = static_cast<int64_t>(local);
  comm.allreduce(cpu_buffer(&value, 1, TESSERA_I64), cpu_buffer(&value, 1, TESSERA_I64),
                 TESSERA_SUM);
  return static_cast<uint64_t>(value);
}

// Resets the result (and, for in-place broadcast, the root's input), runs
// the op once and counts this rank's mismatches.
uint64_t check_once(Communicator& comm, const CheckCase& c, const CheckReference& ref,
                    RankBuffers& b) {
  const int rank = comm.rank();
  ref.fill_input(rank, b.send.data());
  if (c.layout.in_place) {
    if (rank != 0) ref.fill_sentinel(b.send.data(), c.layout.send_count);
  } else {
    ref.fill_sentinel(b.recv.data(), c.layout.recv_count);
  }
  run_op(comm, c.op, b.send_view, b.recv_view, c.redop);
  return ref.count_wrong(rank, c.layout.in_place ? b.send.data() : b.recv.data());
}

BenchRow run_size(Communicator& comm, const BenchSpec& spec, uint64_t bytes) {
  const int ranks = comm.size();
  const CheckCase c{spec.op, spec.dtype, spec.redop, ranks,
                    op_layout(spec.op, bytes, spec.dtype, ranks)};
  const CheckReference ref(c);
  RankBuffers b = make_buffers(c, ref, comm.rank());

  for (int i = 0; i < spec.warmup; ++i) run_op(comm, c.op, b.send_view, b.recv_view, c.redop);
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < spec.iters; ++i) run_op(comm, c.op, b.send_view, b.recv_view, c.redop);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  const double local_us = std::chrono::duration<double, std::micro>(elapsed).count() / spec.iters;

  BenchRow row;
  row.bytes = bytes;
  row.count = bytes / tessera_dtype_size(spec.dtype);
  row.time_us = max_over_ranks(comm, local_us);
  row.algbw_gbps = row.time_us > 0.0 ? static_cast<double>(bytes) / row.time_us / 1e3 : 0.0;
  row.busbw_gbps = row.algbw_gbps * busbw_factor(spec.op, ranks);
  row.wrong = sum_over_ranks(comm, check_once(comm, c, ref, b));
  return row;
}

}  // namespace

void run_bench_rank(Communicator& comm, const BenchSpec& spec, const BenchPlan& plan,
                    const std::function<void(const BenchRow&)>& on_row) {
  for (const auto& size : plan.sizes) {
    const BenchRow row = run_size(comm, spec, size.bytes);
    if (comm.rank() == 0 && on_row) on_row(row);
  }
}

}  // namespace tessera::cli
