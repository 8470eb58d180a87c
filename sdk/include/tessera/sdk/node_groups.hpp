// The two communicators of a hierarchical gradient reduction (strategy
// option hierarchy = "node", docs/strategies/README.md "Hierarchical
// allreduce"): the world's ranks form M nodes of L consecutive ranks,
// world rank r = n·L + l (node n, local rank l). `intra` holds the L ranks
// of this rank's node (its rank there is l); `inter` the M ranks with the
// same local rank, one per node (its rank there is n). Bytes sent on
// `inter` are what a step reports as comm_bytes_cross_node.
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

class NodeGroups {
 public:
  // Collective over `world`: splits it once into the intra- and the
  // inter-node communicator. `ranks_per_node` must divide world.size()
  // (an internal error otherwise: the options are checked before).
  NodeGroups(CommView& world, int32_t ranks_per_node)
      : local_size_(ranks_per_node),
        nodes_(ranks_per_node >= 1 ? world.size() / ranks_per_node : 0),
        local_rank_(ranks_per_node >= 1 ? world.rank() % ranks_per_node : 0),
        node_(ranks_per_node >= 1 ? world.rank() / ranks_per_node : 0) {
    TESSERA_CHECK(ranks_per_node >= 1 && world.size() % ranks_per_node == 0, TESSERA_ERR_INTERNAL,
                  "node groups: ", ranks_per_node, " ranks per node for a world of ", world.size());
    intra_ = world.split(node_, local_rank_);
    inter_ = world.split(local_rank_, node_);
    TESSERA_CHECK(intra_ != nullptr && inter_ != nullptr && intra_->size() == local_size_ &&
                      inter_->size() == nodes_ && intra_->rank() == local_rank_ &&
                      inter_->rank() == node_,
                  TESSERA_ERR_INTERNAL, "node groups: the backend's split does not give ",
                  local_size_, " ranks per node and ", nodes_, " nodes");
  }

  [[nodiscard]] CommView& intra() noexcept { return *intra_; }
  [[nodiscard]] CommView& inter() noexcept { return *inter_; }
  [[nodiscard]] int32_t local_size() const noexcept { return local_size_; }  // L
  [[nodiscard]] int32_t nodes() const noexcept { return nodes_; }            // M
  [[nodiscard]] int32_t local_rank() const noexcept { return local_rank_; }  // l
  [[nodiscard]] int32_t node() const noexcept { return node_; }              // n

 private:
  int32_t local_size_;
  int32_t nodes_;
  int32_t local_rank_;
  int32_t node_;
  std::unique_ptr<CommView> intra_;
  std::unique_ptr<CommView> inter_;
};

}  // namespace tessera::sdk
