// The options of the `tensor` strategy ([strategy.options]) and their
// checks.
#pragma once

#include <cstdint>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kTensorOptions[] = {
    {"size", TESSERA_OPT_INT, "0",
     "ranks per tensor-parallel group; must divide the world size (world = data-parallel "
     "replicas x size); 0: the whole world"},
    {"mode", TESSERA_OPT_STRING, "tensor",
     "tensor: Megatron column/row splits, one allreduce per pair forward and backward; "
     "sequence: the norm and residual regions also split along the sequence, the allreduces "
     "become allgather + reduce-scatter"},
    sdk::kActivationCheckpointingOption,
};

struct TensorOptions {
  int32_t size = 1;              // resolved: >= 1, divides the world
  bool sequence = false;         // mode = "sequence"
  int64_t checkpoint_every = 0;  // activation_checkpointing

  // Reads and checks the options for `world_size` ranks. Throws
  // tessera::Error (invalid argument) naming the option when size is
  // negative or does not divide the world size, when mode is not
  // "tensor" or "sequence", or when activation_checkpointing is negative.
  static TensorOptions read(const sdk::Options& options, int32_t world_size);
};

}  // namespace tessera::strategies
