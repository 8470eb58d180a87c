// Per-rank memory accounting by category (current and peak bytes), fed by
// plugins through the host API and by the core itself.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tessera/c/host.h"

namespace tessera {

struct MemoryStats {
  std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT> current{};
  std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

// Process-wide tracker. Thread-safe and lock-free on the update path.
class MemoryTracker {
 public:
  static MemoryTracker& instance();
  // Tracks ranks 0..max_ranks-1 (negative max_ranks counts as 0), each with
  // its own counters; bytes for any other rank (TESSERA_RANK_UNKNOWN
  // included) go to one separate "unranked" slot. Resets every counter to
  // zero. Meant to be called between runs: adds racing with it are safe but
  // may be lost. Until the first reset, one rank (0) is tracked.
  // `process_rank` >= 0: this process is that one rank of a world of
  // max_ranks processes, and the bytes of every rank go to it (a strategy
  // that re-formed the world counts under the new rank numbers, the host
  // under the old one: elastic).
  void reset(int max_ranks, int process_rank = -1);
  // Adds `delta_bytes` (negative when freed) to `rank`'s `category` and
  // total, raising the peaks. An unknown category counts as
  // TESSERA_MEM_OTHER. Lock-free.
  void add(int rank, tessera_mem_category category, int64_t delta_bytes) noexcept;
  // Counters of `rank`; a rank outside 0..ranks()-1 (e.g. -1) reads the
  // unranked slot. total_peak is the peak of the sum over categories.
  [[nodiscard]] MemoryStats stats(int rank) const;
  // Number of tracked ranks (the last reset's max_ranks).
  [[nodiscard]] int ranks() const noexcept;
  // "params", "grads", "optimizer", "comm", "activations", "other";
  // "unknown" for anything else.
  static const char* category_name(tessera_mem_category category) noexcept;

 private:
  MemoryTracker();
  struct Impl;
  Impl* impl_;
};

}  // namespace tessera
