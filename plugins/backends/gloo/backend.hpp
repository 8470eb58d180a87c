// The gloo backend: one process is one rank; ranks find each other through
// a TCP, file or Redis store and talk over gloo's TCP transport.
#pragma once

#include <cstdint>
#include <memory>

#include "settings.hpp"
#include "tessera/sdk/backend.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::gloo_backend {

class GlooBackend final : public sdk::Backend {
 public:
  // Its communicators re-form a group after a failure (GlooComm::shrink).
  static constexpr bool kCanShrink = true;
  // They admit processes that join a running world (GlooComm::grow).
  static constexpr bool kCanGrow = true;

  // Resolves the options, the config and the environment (RANK,
  // WORLD_SIZE, ...; see Settings::from, which throws INVALID_ARGUMENT
  // naming what is missing or wrong). With the TCP store, rank 0 starts
  // serving it here (INVALID_ARGUMENT naming the address when it cannot).
  // Connects nothing yet.
  GlooBackend(const sdk::Host& host, const sdk::Options& options,
              const tessera_backend_config& config);

  // Joins the world as this process's rank (`rank` must be -1 or equal
  // RANK): waits until every rank arrived in the store, connects the world's
  // data and control contexts and starts the control service. Blocks at
  // most the configured timeout; throws Error(TIMEOUT) naming the ranks that
  // never arrived, Error(INVALID_ARGUMENT) for a wrong rank or store, and
  // Error(PEER_LOST) when connecting fails. Each call forms a new world
  // under its own store prefix. A joining process (config.joining) gets a
  // world of itself alone at once, which GlooComm::grow then admits into
  // the running one.
  std::unique_ptr<sdk::Comm> connect(int32_t rank) override;

 private:
  Settings settings_;
  // The TCP store this process serves as rank 0, or its hold on the run in
  // a store no rank serves (null when neither); every world's engine
  // shares it, so it lives until the last communicator goes.
  std::shared_ptr<sdk::Store> store_service_;
  uint64_t connects_ = 0;
};

}  // namespace tessera::gloo_backend
