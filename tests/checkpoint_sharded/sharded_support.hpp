// Helpers of the sharded-checkpoint tests: run specifications of the tiny
// models that checkpoint (in format "sharded" or "full"), and the message
// of an expected tessera::Error. Scratch directories, the [checkpoint]
// table and the resume harness come from the strategy tests'
// resume_support.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../support/error_of.hpp"
#include "resume_support.hpp"
#include "run_support.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/core/train/trainer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

// Options of a strategy for these tests: fsdp with full_shard, nothing for
// the others.
std::string strategy_options_of(const std::string& strategy);

// A run of `model` under `strategy` (with strategy_options_of) on `world`
// ranks for `steps` steps with a batch of 12 and `checkpoint` (a
// [checkpoint] table, or "") appended to the configuration.
RunSpec checkpoint_spec(const std::string& model, const std::string& strategy, int world,
                        int64_t steps, const std::string& checkpoint);

}  // namespace tessera::test
