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
     "micro-batch schedule: gpipe (all forwards, then all backwards), 1f1b (one forward, "
     "one backward; needs data.micro_batches >= stages) or interleaved (1f1b over "
     "virtual_stages model chunks per rank; needs data.micro_batches a multiple of stages) or "
     "zb1 (zero-bubble H1: backward split into its input and weight halves, every unit must "
     "split)"},
    {"virtual_stages", TESSERA_OPT_INT, "0",
     "schedule = \"interleaved\": model chunks per rank (>= 2; 0: 2); rank s runs chunks s, "
     "s + stages, s + 2 stages, ..."},
    {"partition", TESSERA_OPT_STRING, "balanced",
     "how units are assigned to stages: balanced (contiguous runs of units with the smallest "
     "largest per-stage cost, from the model's per-unit cost) or explicit (from boundaries)"},
    {"boundaries", TESSERA_OPT_INT_LIST, "[]",
     "partition = \"explicit\": the first unit of stages 1 .. stages-1 (interleaved: of "
     "chunks 1 .. stages x virtual_stages - 1), increasing (stage 0 starts at unit 0)"},
};

enum class PipelineSchedule { kGpipe, kOneFOneB, kInterleaved, kZeroBubble };

struct PipelineOptions {
  int32_t stages = 0;  // resolved: >= 1, divides the world
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  int32_t virtual_stages = 1;  // model chunks per rank: >= 2 under interleaved, else 1
  bool explicit_partition = false;
  std::vector<int64_t> boundaries;  // explicit: first unit of chunks 1 .. chunks()-1
  // Set by the strategies that combine the pipeline with other axes
  // (`hybrid`): ranks per tensor-parallel group inside every stage, its
  // sequence mode, the name its messages start with and the key its
  // stage count is read from.
  int32_t tp = 1;
  bool sequence = false;
  // The optimizer state sharded over the data-parallel replicas (ZeRO-1
  // over the data axis): each replica updates its slice of the held
  // parameters, then the replicas allgather them.
  bool shard_optimizer = false;
  const char* who = "pipeline";
  const char* stages_key = "stages";

  // Reads and checks the options for `world_size` ranks. Throws
  // tessera::Error (invalid argument) naming the option when stages is
  // negative or does not divide the world size, when schedule is not
  // gpipe, 1f1b, interleaved or zb1, when
  // interleaved has fewer than 2 stages or virtual_stages is not >= 2 (or
  // virtual_stages is set for another schedule), when partition is not
  // balanced or explicit, or when boundaries is not chunks()-1 increasing
  // unit indices >= 1 (or is given with balanced).
  static PipelineOptions read(const sdk::Options& options, int32_t world_size);
  // The keys after `stages` (schedule, virtual_stages, partition,
  // boundaries) into `o` for o.stages, checked as read() does, the
  // messages starting with o.who.
  static void read_schedule(const sdk::Options& options, PipelineOptions& o);

  // The schedule's ideal bubble fraction, the share of a stage's step spent
  // idle with equal forward and backward times per stage and no transfer
  // time: (p-1)/(v*m+p-1) with p stages, m micro-batches and v virtual
  // stages (1 for gpipe and 1f1b); zb1, with the input and weight halves
  // of the backward each as long as a forward: (p-1)/(3m+p-1); 0 with one
  // stage.
  [[nodiscard]] double bubble_formula(int32_t micro_batches) const noexcept;

  // Model chunks over all stages (stages x virtual_stages).
  [[nodiscard]] int32_t chunks() const noexcept { return stages * virtual_stages; }

  [[nodiscard]] const char* schedule_name() const noexcept {
    switch (schedule) {
      case PipelineSchedule::kGpipe:
        return "gpipe";
      case PipelineSchedule::kInterleaved:
        return "interleaved";
      case PipelineSchedule::kZeroBubble:
        return "zb1";
      case PipelineSchedule::kOneFOneB:
        break;
    }
    return "1f1b";
  }
};

}  // namespace tessera::strategies
