// The in-memory backend: every rank is a thread of this process and
// collectives move data directly between the ranks' buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "group.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::inmemory {

// The process-wide engine: forms the world group from the ranks that connect.
class InMemoryBackend final : public sdk::Backend {
 public:
  // Its communicators re-form a group after a failure (Group::shrink).
  static constexpr bool kCanShrink = true;

  // Reads the options and config (see Settings::from; throws
  // INVALID_ARGUMENT for bad values).
  InMemoryBackend(const sdk::Host& host, const sdk::Options& options,
                  const tessera_backend_config& config);

  // Joins the world as `rank` (0 <= rank < world_size) and blocks until all
  // ranks joined. Throws INVALID_ARGUMENT for a bad or already joined rank,
  // TIMEOUT naming the ranks that never joined when the config's timeout
  // passes (every waiting rank then fails; a later connect fails with
  // PEER_LOST). After a whole world joined, the next connects form a fresh
  // world.
  std::unique_ptr<sdk::Comm> connect(int32_t rank) override;

 private:
  std::shared_ptr<const Engine> engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> joined_;
  int32_t joined_count_ = 0;
  uint64_t generation_ = 0;        // worlds formed so far
  std::shared_ptr<Group> formed_;  // the world of generation_
  std::string failure_;            // set when a connect timed out
};

}  // namespace tessera::inmemory
