// The order of a gpt decoder block's parameters (GptBlock, and its CUDA
// unit in plugins/models/common/cuda), shared so the two cannot drift.
#pragma once

#include <cstddef>

namespace tessera::model::gpt_block {

enum Param : std::size_t {
  kLn1G,
  kLn1B,
  kQkvW,
  kQkvB,
  kAttnProjW,
  kAttnProjB,
  kLn2G,
  kLn2B,
  kFcW,
  kFcB,
  kProjW,
  kProjB,
  kParamCount
};

}  // namespace tessera::model::gpt_block
