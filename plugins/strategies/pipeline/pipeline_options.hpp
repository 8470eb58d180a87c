// The options of the `pipeline` strategy ([strategy.options]); the
// PipelineOptions they are read into and their checks are the SDK's
// (tessera/sdk/pipeline_plan.hpp).
#pragma once

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/pipeline_plan.hpp"
#include "tessera/sdk/strategy_options.hpp"

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
    sdk::kActivationCheckpointingOption,
};

}  // namespace tessera::strategies
