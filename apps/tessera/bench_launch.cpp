#include "bench_launch.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "bench_raw.hpp"
#include "cli_error.hpp"
#include "tessera/core/byte_size.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/train/selection.hpp"

namespace tessera::cli {

namespace {

// Refuses, before anything is allocated, a plan whose buffers do not fit
// the memory this process may take: past it the kernel's OOM killer ends
// the process without a word, since allocations themselves succeed (the
// pages are only taken when written). `ranks_here` ranks of this process
// hold their buffers at once; the reporter's memcpy yardstick (two buffers
// of the largest size, only where `reports`) runs while they hold none.
// `share` divides the machine's memory among the processes on it.
void check_bench_memory(const BenchSpec& spec, const BenchPlan& plan, int ranks_here, bool reports,
                        int share) {
  const train::MemoryBudget machine = train::available_memory();
  if (machine.bytes <= 0) return;  // unknown: nothing to compare with
  uint64_t largest = 0;
  for (const auto& size : plan.sizes) largest = std::max(largest, size.bytes);
  const uint64_t buffers = rank_buffer_bytes(spec, plan) * static_cast<uint64_t>(ranks_here);
  const uint64_t yardstick = reports ? 2 * largest : 0;
  const uint64_t need = std::max(buffers, yardstick);
  const auto available = static_cast<uint64_t>(machine.bytes) / static_cast<uint64_t>(share);
  if (need <= available) return;
  const std::string what =
      buffers >= yardstick
          ? fmt::format("the send and receive buffers of {} rank{} at {}", ranks_here,
                        ranks_here == 1 ? "" : "s", format_memory(static_cast<int64_t>(largest)))
          : fmt::format("the memcpy yardstick's two buffers of {}",
                        format_memory(static_cast<int64_t>(largest)));
  throw Error(TESSERA_ERR_OUT_OF_MEMORY,
              fmt::format("bench collectives needs {} for {}, more than the {} this process may "
                          "take ({}{})",
                          format_memory(static_cast<int64_t>(need)), what,
                          format_memory(static_cast<int64_t>(available)), machine.source,
                          share == 1 ? "" : fmt::format(" / {} local ranks", share)));
}

void launch_threads(Backend& backend, int ranks, const BenchSpec& spec,
                    const std::vector<uint64_t>& requested, BenchReporter& reporter) {
  const BenchPlan plan = plan_bench(spec, requested, ranks);
  check_bench_memory(spec, plan, ranks, true, 1);

  std::mutex mu;
  std::string failure;  // set once a rank failed; late joiners abort at once
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(ranks));
  std::string no_raw;  // rank 0's verdict of check_raw_call (all ranks agree)
  auto on_failure = [&](int rank, const std::string& message) {
    const std::lock_guard lock(mu);
    failure = "rank " + std::to_string(rank) + " failed: " + message;
    for (auto& c : comms) {
      if (c) c->abort(failure);
    }
  };
  // Phase 1: every rank connects (and checks the raw call). The header is
  // printed after it, so a usage error found there prints no table.
  auto join = [&](int rank) {
    auto comm = backend.connect(rank);
    Communicator* c = comm.get();
    {
      const std::lock_guard lock(mu);
      comms[static_cast<size_t>(rank)] = std::move(comm);
      if (!failure.empty()) c->abort(failure);
    }
    if (spec.compare_raw) {
      std::string verdict = check_raw_call(*c, spec, plan);
      if (rank == 0) no_raw = std::move(verdict);
    }
  };
  run_rank_threads(ranks, join, on_failure);
  if (!no_raw.empty()) throw UsageError(no_raw);
  // Between the phases no rank thread runs, so the reporter's memcpy
  // measurement has the machine to itself.
  reporter.begin(plan, true);
  // Phase 2: the benchmark. Communicators are destroyed when this function
  // returns, after every rank thread has joined.
  auto body = [&](int rank) {
    run_bench_rank(*comms[static_cast<size_t>(rank)], spec, plan,
                   [&](const BenchRow& row) { reporter.row(row); });
  };
  run_rank_threads(ranks, body, on_failure);
  reporter.end();
}

void launch_process(Backend& backend, int ranks, const BenchSpec& spec,
                    const std::vector<uint64_t>& requested, BenchReporter& reporter) {
  auto comm = backend.connect(-1);
  if (ranks != -1 && ranks != comm->size()) {
    throw UsageError("--ranks " + std::to_string(ranks) + " does not match the world size " +
                     std::to_string(comm->size()) + " of backend '" + backend.name() +
                     "' (each process is one rank; omit --ranks to use the world size)");
  }
  const BenchPlan plan = plan_bench(spec, requested, comm->size());
  // Runs `step`; on a failure this rank aborts the group (so its peers fail
  // fast) and rethrows.
  auto guarded = [&](const auto& step) {
    try {
      step();
    } catch (const std::exception& e) {
      comm->abort("rank " + std::to_string(comm->rank()) + " failed: " + e.what());
      throw;
    }
  };
  guarded([&] {
    check_bench_memory(spec, plan, 1, comm->rank() == 0,
                       std::clamp(train::local_world_size_from_env(), 1, comm->size()));
  });
  // Every rank gets the same verdict, so none aborts for a missing raw call.
  std::string no_raw;
  if (spec.compare_raw) guarded([&] { no_raw = check_raw_call(*comm, spec, plan); });
  if (!no_raw.empty()) throw UsageError(no_raw);
  guarded([&] {
    if (comm->rank() == 0) reporter.begin(plan, false);
    comm->barrier();
    run_bench_rank(*comm, spec, plan, [&](const BenchRow& row) { reporter.row(row); });
    if (comm->rank() == 0) reporter.end();
  });
}

}  // namespace

void launch_bench(Backend& backend, int ranks, const BenchSpec& spec,
                  const std::vector<uint64_t>& requested, BenchReporter& reporter) {
  if (backend.thread_ranks()) {
    if (ranks < 1) {
      throw UsageError("--ranks is required with backend '" + backend.name() +
                       "' (its ranks are threads of this process)");
    }
    launch_threads(backend, ranks, spec, requested, reporter);
  } else {
    launch_process(backend, ranks, spec, requested, reporter);
  }
}

}  // namespace tessera::cli
