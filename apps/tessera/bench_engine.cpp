#include "bench_engine.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench_buffer.hpp"
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

uint64_t rank_buffer_bytes(const BenchSpec& spec, const BenchPlan& plan) {
  uint64_t most = 0;
  for (const auto& size : plan.sizes) {
    const OpLayout l = op_layout(spec.op, size.bytes, spec.dtype, plan.ranks);
    most = std::max(
        most, (l.send_count + (l.in_place ? 0 : l.recv_count)) * tessera_dtype_size(spec.dtype));
  }
  return most;
}

namespace {

// Buffers of one rank for one size, filled for the timed runs (on the
// spec's device).
struct RankBuffers {
  BenchBuffer send;
  BenchBuffer recv;  // unused for in-place ops
  tessera_buffer send_view{};
  tessera_buffer recv_view{};
};

RankBuffers make_buffers(const BenchSpec& spec, const CheckCase& c, const CheckReference& ref,
                         int rank) {
  RankBuffers b;
  b.send = BenchBuffer(spec.device, c.layout.send_count, c.dtype);
  if (!c.layout.in_place) b.recv = BenchBuffer(spec.device, c.layout.recv_count, c.dtype);
  ref.fill_input(rank, b.send.host());
  b.send.to_device();
  b.send_view = b.send.view();
  b.recv_view = c.layout.in_place ? b.send_view : b.recv.view();
  return b;
}

// Element-wise largest of every rank's `local` values, gathered through
// `comm` (all ranks pass the same number of values).
std::vector<double> max_over_ranks(Communicator& comm, const tessera_device& device,
                                   std::vector<double> local) {
  const size_t n = local.size();
  std::vector<double> all(n * static_cast<size_t>(comm.size()));
  allgather_values(comm, device, local, all);
  for (size_t k = 0; k < all.size(); ++k) local[k % n] = std::max(local[k % n], all[k]);
  return local;
}

// Mismatch counts summed over the ranks.
uint64_t count_over_ranks(Communicator& comm, const tessera_device& device, uint64_t local) {
  return static_cast<uint64_t>(sum_over_ranks(comm, device, static_cast<int64_t>(local)));
}

// The two ways an operation is run: through the plugin (the normal path)
// or through the backend's raw library call.
enum class Path { kTessera, kRaw };

void run_path(Communicator& comm, Path path, const CheckCase& c, const RankBuffers& b) {
  if (path == Path::kRaw) {
    run_raw_op(comm, c.op, b.send_view, b.recv_view, c.redop);
  } else {
    run_op(comm, c.op, b.send_view, b.recv_view, c.redop);
  }
}

// A barrier, then `iters` timed operations on `path`; this rank's average
// time per operation in microseconds.
double time_block(Communicator& comm, Path path, int iters, const CheckCase& c,
                  const RankBuffers& b) {
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run_path(comm, path, c, b);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  return std::chrono::duration<double, std::micro>(elapsed).count() / iters;
}

// Times of one size with --compare-raw (see kCompareRounds): per path, the
// best round, a round's time being the largest per-rank average.
struct PathTimes {
  double tessera_us = 0.0;
  double raw_us = 0.0;
};

PathTimes time_both_paths(Communicator& comm, const BenchSpec& spec, const CheckCase& c,
                          const RankBuffers& b) {
  for (int i = 0; i < spec.warmup; ++i) run_path(comm, Path::kTessera, c, b);
  for (int i = 0; i < spec.warmup; ++i) run_path(comm, Path::kRaw, c, b);
  // local[2 * round + 0]: tessera, local[2 * round + 1]: raw.
  std::vector<double> local(2 * static_cast<size_t>(kCompareRounds));
  for (int round = 0; round < kCompareRounds; ++round) {
    const bool raw_first = round % 2 == 1;
    for (const Path path :
         {raw_first ? Path::kRaw : Path::kTessera, raw_first ? Path::kTessera : Path::kRaw}) {
      const size_t slot = 2 * static_cast<size_t>(round) + (path == Path::kRaw ? 1 : 0);
      local[slot] = time_block(comm, path, spec.iters, c, b);
    }
  }
  const std::vector<double> rounds = max_over_ranks(comm, spec.device, local);
  PathTimes best{rounds[0], rounds[1]};
  for (size_t slot = 2; slot < rounds.size(); slot += 2) {
    best.tessera_us = std::min(best.tessera_us, rounds[slot]);
    best.raw_us = std::min(best.raw_us, rounds[slot + 1]);
  }
  return best;
}

// Resets the result (and, for in-place broadcast, the root's input), runs
// the op once on `path` and counts this rank's mismatches (on the host copy
// of the result).
uint64_t check_once(Communicator& comm, Path path, const CheckCase& c, const CheckReference& ref,
                    RankBuffers& b) {
  const int rank = comm.rank();
  ref.fill_input(rank, b.send.host());
  if (c.layout.in_place) {
    if (rank != 0) ref.fill_sentinel(b.send.host(), c.layout.send_count);
  } else {
    ref.fill_sentinel(b.recv.host(), c.layout.recv_count);
    b.recv.to_device();
  }
  b.send.to_device();
  run_path(comm, path, c, b);
  BenchBuffer& result = c.layout.in_place ? b.send : b.recv;
  result.to_host();
  return ref.count_wrong(rank, result.host());
}

BenchRow run_size(Communicator& comm, const BenchSpec& spec, uint64_t bytes) {
  const int ranks = comm.size();
  const CheckCase c{spec.op, spec.dtype, spec.redop, ranks,
                    op_layout(spec.op, bytes, spec.dtype, ranks)};
  const CheckReference ref(c);
  RankBuffers b = make_buffers(spec, c, ref, comm.rank());

  BenchRow row;
  row.bytes = bytes;
  row.count = bytes / tessera_dtype_size(spec.dtype);
  if (spec.compare_raw) {
    const PathTimes t = time_both_paths(comm, spec, c, b);
    row.time_us = t.tessera_us;
    row.raw_time_us = t.raw_us;
  } else {
    for (int i = 0; i < spec.warmup; ++i) run_path(comm, Path::kTessera, c, b);
    row.time_us =
        max_over_ranks(comm, spec.device, {time_block(comm, Path::kTessera, spec.iters, c, b)})[0];
  }
  row.algbw_gbps = row.time_us > 0.0 ? static_cast<double>(bytes) / row.time_us / 1e3 : 0.0;
  row.busbw_gbps = row.algbw_gbps * busbw_factor(spec.op, ranks);
  row.wrong = count_over_ranks(comm, spec.device, check_once(comm, Path::kTessera, c, ref, b));
  if (spec.compare_raw) {
    row.compared_raw = true;
    row.raw_wrong = count_over_ranks(comm, spec.device, check_once(comm, Path::kRaw, c, ref, b));
  }
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
