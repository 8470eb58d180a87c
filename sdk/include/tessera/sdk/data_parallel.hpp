// The common frame of the data-parallel strategies (ddp, zero1, zero2,
// zero3, fsdp): every rank trains on its own slice of the global batch, so
// the data-parallel layout is (rank, world size); `check` refuses an empty
// world the same way everywhere; and a step reports the time blocked and
// the bytes sent on its communicators as the difference of their
// CommView::stats() over the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::sdk {

// A Strategy whose data-parallel position is its rank in the world: data
// rank = env.rank(), data size = env.world_size(). Derived classes still
// implement load, step and save.
class DataParallelStrategy : public Strategy {
 public:
  // Throws tessera::Error (invalid argument) naming strategy `name` and the
  // world size unless the world has at least one rank.
  static void check_world_size(const char* name, int32_t world_size) {
    TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT, "strategy '", name,
                  "' needs at least one rank, but the world size is ", world_size);
  }

  [[nodiscard]] tessera_strategy_layout layout() const override { return layout_; }

 protected:
  explicit DataParallelStrategy(const StrategyEnv& env) noexcept {
    layout_.struct_size = sizeof layout_;
    layout_.data_rank = env.rank();
    layout_.data_size = env.world_size();
  }

 private:
  tessera_strategy_layout layout_{};
};

// Measures a step's communication: remembers the stats of each communicator
// when made and adds what they grew by since into a StepResult. The
// communicators must outlive it; a nullptr entry (a split that does not
// exist) is skipped.
class CommMeter {
 public:
  CommMeter(std::initializer_list<CommView*> comms) : comms_(comms) {
    for (CommView* c : comms_) before_.push_back(c != nullptr ? c->stats() : CommStats{});
  }

  // Adds the time blocked and bytes sent since construction on every
  // communicator to result.comm_wait_ns and result.comm_bytes, and what
  // gradient compression saved and took to comm_bytes_raw and compress_ns.
  void add_to(StepResult& result) const {
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (comms_[i] == nullptr) continue;
      result.comm_wait_ns += comms_[i]->stats().wait_ns - before_[i].wait_ns;
      const CommStats& now = comms_[i]->stats();
      const int64_t sent = now.bytes_sent - before_[i].bytes_sent;
      result.comm_bytes += sent;
      result.comm_bytes_raw += sent + now.bytes_saved - before_[i].bytes_saved;
      result.compress_ns += now.compress_ns - before_[i].compress_ns;
    }
  }
  // Adds the bytes sent since construction on every communicator to
  // result.comm_bytes_cross_node: a meter of the inter-node communicator of
  // a hierarchical reduction (node_groups.hpp), beside the step's meter of
  // all of them.
  void add_cross_node_to(StepResult& result) const {
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (comms_[i] == nullptr) continue;
      result.comm_bytes_cross_node += comms_[i]->stats().bytes_sent - before_[i].bytes_sent;
    }
  }

 private:
  std::vector<CommView*> comms_;
  std::vector<CommStats> before_;
};

}  // namespace tessera::sdk
