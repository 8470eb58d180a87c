// The options of the `hybrid` strategy ([strategy.options]) and their
// checks.
#pragma once

#include <cstdint>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/pipeline_plan.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kHybridOptions[] = {
    {"dp", TESSERA_OPT_INT, "0",
     "data-parallel replicas (the outermost mesh axis); 0: world / (tp x pp)"},
    {"tp", TESSERA_OPT_INT, "1",
     "ranks per tensor-parallel group (the innermost mesh axis: neighbouring ranks)"},
    {"pp", TESSERA_OPT_INT, "1", "pipeline stages (the middle mesh axis)"},
    {"schedule", TESSERA_OPT_STRING, "1f1b",
     "micro-batch schedule of the pipeline axis, as the pipeline strategy's: gpipe, 1f1b, "
     "interleaved or zb1"},
    {"virtual_stages", TESSERA_OPT_INT, "0",
     "schedule = \"interleaved\": model chunks per stage (>= 2; 0: 2)"},
    {"partition", TESSERA_OPT_STRING, "balanced",
     "units to stages: balanced (by the model's per-unit cost) or explicit (boundaries)"},
    {"boundaries", TESSERA_OPT_INT_LIST, "[]",
     "partition = \"explicit\": the first unit of stages (chunks) 1 .., increasing"},
    {"mode", TESSERA_OPT_STRING, "tensor",
     "the tensor axis as the tensor strategy's: tensor (allreduces) or sequence (norm and "
     "residual regions split along the sequence too)"},
    {"dp_shard", TESSERA_OPT_STRING, "none",
     "state sharded over the data axis: none (replicated), zero1 (the optimizer state) or "
     "zero2 (the optimizer state, and the gradients reduce-scattered instead of allreduced)"},
    sdk::kActivationCheckpointingOption,
};

struct HybridOptions {
  int32_t dp = 1;
  sdk::PipelineOptions pipeline;  // stages = pp, tp, sequence, the schedule

  // Reads and checks the options for `world_size` ranks. Throws
  // tessera::Error (invalid argument) naming the options when an axis is
  // < 1 (dp < 0), when dp x tp x pp is not the world size, for the
  // schedule's keys as the pipeline strategy does, and for an unknown mode
  // or dp_shard.
  static HybridOptions read(const sdk::Options& options, int32_t world_size);
};

}  // namespace tessera::strategies
