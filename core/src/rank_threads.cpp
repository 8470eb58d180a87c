#include "tessera/core/rank_threads.hpp"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

void run_rank_threads(int world_size, const std::function<void(int rank)>& body,
                      const std::function<void(int rank, const std::string& message)>& on_failure) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "world size must be at least 1, got ", world_size);
  std::mutex mu;
  std::exception_ptr first;
  bool failed = false;
  auto rank_main = [&](int rank) {
    ThreadRankGuard guard(rank);
    try {
      body(rank);
    } catch (const std::exception& e) {
      bool notify = false;
      {
        const std::lock_guard lock(mu);
        if (!failed) {
          failed = true;
          first = std::current_exception();
          notify = true;
        }
      }
      if (notify && on_failure) on_failure(rank, e.what());
    } catch (...) {
      const std::lock_guard lock(mu);
      if (!failed) {
        failed = true;
        first = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int r = 1; r < world_size; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);  // rank 0 runs on the calling thread
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tessera
