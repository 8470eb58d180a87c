#include "bench_launch.hpp"

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "bench_raw.hpp"
#include "cli_error.hpp"
#include "tessera/core/rank_threads.hpp"

namespace tessera::cli {

namespace {

void launch_threads(Backend& backend, int ranks, const BenchSpec& spec,
                    const std::vector<uint64_t>& requested, BenchReporter& reporter) {
  const BenchPlan plan = plan_bench(spec, requested, ranks);

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
