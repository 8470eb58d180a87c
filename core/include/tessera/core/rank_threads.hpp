// Runs the ranks of a thread-rank backend (e.g. inmemory) as threads of this
// process: one thread per rank, each with its rank set for logging.
#pragma once

#include <functional>
#include <string>

namespace tessera {

// Calls body(rank) on `world_size` threads and joins them all. When a rank
// throws, `on_failure(rank, message)` runs once (on that rank's thread), so
// the caller can abort its communicators and release ranks blocked waiting
// for the failed one; after every thread has finished, the first failure is
// rethrown (as the original exception type). world_size must be >= 1.
void run_rank_threads(
    int world_size, const std::function<void(int rank)>& body,
    const std::function<void(int rank, const std::string& message)>& on_failure = nullptr);

}  // namespace tessera
