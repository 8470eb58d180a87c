// The order of a llama decoder block's parameters (LlamaBlock, and its
// CUDA unit in plugins/models/common/cuda), shared so the two cannot drift.
#pragma once

#include <cstddef>

namespace tessera::model::llama_block {

enum Param : std::size_t {
  kAttnNormG,
  kWq,
  kWk,
  kWv,
  kWo,
  kMlpNormG,
  kWGate,
  kWUp,
  kWDown,
  kParamCount
};

}  // namespace tessera::model::llama_block
