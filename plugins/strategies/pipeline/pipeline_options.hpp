// The options of the `pipeline` strategy ([strategy.options]) and their
// checks.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kPipelineOptions[] = {
    {"stages", TESSERA_OPT_INT, "0",
     "pipeline stages; the world size must be a multiple (world = data-parallel replicas x "
     "stages); 0: as many stages as ranks"},
    {"schedule", TESSERA_OPT_STRING, "1f1b",
     "micro-batch schedule: gpipe (all forwards, then all backwards) or 1f1b (one forward, "
     "one backward; needs data.micro_batches >= stages)"},
    {"partition", TESSERA_OPT_STRING, "balanced",
     "how units are assigned to stages: balanced (contiguous runs of units with the smallest "
     "largest per-stage cost, from the model's per-unit cost) or explicit (from boundaries)"},
    {"boundaries", TESSERA_OPT_INT_LIST, "[]",
     "partition = \"explicit\": the first unit of stages 1 .. stages-1, increasing (stage 0 "
     "starts at unit 0)"},
};

enum class PipelineSchedule { kGpipe, kOneFOneB };

struct PipelineOptions {
  int32_t stages = 0;  // resolved: >= 1, divides the world
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  bool explicit_partition = false;
  std::vector<int64_t> boundaries;  // explicit: first unit of stages 1 .. stages-1

  // Reads and checks the options for `world_size` ranks. Throws
  // tessera::Error (invalid argument) naming the option when stages is
  // negative or does not divide the world size, when schedule is not
  // gpipe or 1f1b (interleaved and zb1: not implemented yet), when
  // partition is not balanced or explicit, or when boundaries is not
  // stages-1 increasing unit indices >= 1 (or is given with balanced).
  static PipelineOptions read(const sdk::Options& options, int32_t world_size);

  // The schedule's ideal bubble fraction, the share of a stage's step spent
  // idle with equal forward and backward times per stage and no transfer
  // time: (p-1)/(m+p-1) for gpipe and 1f1b with p stages and m
  // micro-batches; 0 with one stage.
  [[nodiscard]] double bubble_formula(int32_t micro_batches) const noexcept;

  [[nodiscard]] const char* schedule_name() const noexcept {
    return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
  }
};

}  // namespace tessera::strategies
