#include "bench_launch.hpp"

#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "cli_error.hpp"
#include "tessera/core/rank_threads.hpp"

namespace tessera::cli {

namespace {

void launch_threads(Backend& backend, int ranks, const BenchSpec& spec,
                    const std::vector<uint64_t>& requested, BenchReporter& reporter) {
  const BenchPlan plan = plan_bench(spec, requested, ranks);
  reporter.begin(plan, true);

  std::mutex mu;
  std::string failure;  // set once a rank failed; late joiners abort at once
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(ranks));
  auto body = [&](int rank) {
    auto comm = backend.connect(rank);
    Communicator* c = comm.get();
    {
      const std::lock_guard lock(mu);
      comms[static_cast<size_t>(rank)] = std::move(comm);
      if (!failure.empty()) c->abort(failure);
    }
    run_bench_rank(*c, spec, plan, [&](const BenchRow& row) { reporter.row(row); });
  };
  auto on_failure = [&](int rank, const std::string& message) {
    const std::lock_guard lock(mu);
    failure = "rank " + std::to_string(rank) + " failed: " + message;
    for (auto& c : comms) {
      if (c) c->abort(failure);
    }
  };
  // Communicators are destroyed here, after every rank thread has joined.
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
  try {
    if (comm->rank() == 0) reporter.begin(plan, false);
    comm->barrier();
    run_bench_rank(*comm, spec, plan, [&](const BenchRow& row) { reporter.row(row); });
    if (comm->rank() == 0) reporter.end();
  } catch (const std::exception& e) {
    comm->abort("rank " + std::to_string(comm->rank()) + " failed: " + e.what());
    throw;
  }
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
