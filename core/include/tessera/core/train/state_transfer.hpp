// Moving what the ranks' strategies saved (CollectedState) to rank 0, where
// the checkpoint is written: through shared memory when the ranks are
// threads, through send/recv of a flat serialisation when they are
// processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "tessera/core/comm.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// The state as bytes: per tensor its name, shape and pieces (offset, box if
// any, f32 values), little-endian, in name order. Lossless.
std::vector<std::byte> serialize_state(const CollectedState& state);

// The inverse of serialize_state. Throws tessera::Error (invalid argument)
// when the bytes are truncated or malformed (e.g. a piece outside its
// tensor), naming what was being read.
CollectedState deserialize_state(std::span<const std::byte> bytes);

// Collects every rank's state on rank 0 (collective over `comm`).
class StateGather {
 public:
  virtual ~StateGather() = default;
  // Every rank of `comm` calls it with its own pieces; rank 0 gets all of
  // them merged (CollectedState::merge, so shapes must agree), the others
  // nullopt. Callers synchronise (e.g. a barrier after writing the
  // checkpoint) before the next gather. Throws tessera::Error on a
  // communication failure or a shape conflict.
  virtual std::optional<CollectedState> gather(Communicator& comm, CollectedState state) = 0;
};

// Ranks that are threads of one process: each rank moves its state into a
// shared slot, a barrier, and rank 0 merges the slots.
class SharedMemoryGather final : public StateGather {
 public:
  explicit SharedMemoryGather(int world_size);
  std::optional<CollectedState> gather(Communicator& comm, CollectedState state) override;

 private:
  std::mutex mu_;
  std::vector<CollectedState> slots_;
};

// Ranks that are processes: every other rank sends its serialised state
// (an i64 byte count, then u8 bytes) to rank 0, which receives them in rank
// order.
class MessageGather final : public StateGather {
 public:
  std::optional<CollectedState> gather(Communicator& comm, CollectedState state) override;
};

}  // namespace tessera::train
