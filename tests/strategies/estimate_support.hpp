// Shared by the estimate tests (estimate_test.cpp: the data-parallel
// strategies; estimate_parallel_test.cpp: pipeline, tensor, hybrid): the
// models they use, a run spec, the estimate of a spec through the host
// (train::estimate_config) and its comparison with the run.
#pragma once

#include <cstdint>
#include <string>

#include "strategy_support.hpp"
#include "tessera/c/strategy.h"

namespace tessera::test {

// The quickstart's gpt (examples/quickstart.toml), the same with 8 layers,
// and examples/llama.toml's llama with 2 layers instead of 4.
extern const char* const kQuickstartGpt;
extern const char* const kGpt8;
extern const char* const kLlama2;

// Two steps of `strategy` on `world` in-memory ranks with [model] table
// `model`, a global batch of `batch` and AdamW: every peak is reached in
// the first step (contexts are made then and kept), the second shows the
// steady traffic.
RunSpec estimate_spec(const char* model, const std::string& strategy, int world,
                      const std::string& options = "", int64_t micro_batches = 1,
                      int64_t batch = 32);

// train::estimate_config for `s` on s.world ranks.
tessera_estimate estimate_of(const RunSpec& s);

// Bytes per step over all axes of `e`.
int64_t sent_bytes(const tessera_estimate& e);

// Expects the estimate of `s` to match its run: the largest rank's total
// peak within 10%, its peaks per category within 10% (parameters,
// gradients and optimizer state exactly; for a pipeline, whose messages
// wait for their receiver for as long as timing has them wait, the
// communication peak only at most the estimate's per micro-batch), the
// bytes per step equal to the logged comm_bytes, the bubble equal to the
// logged formula. Prints the predicted and measured numbers.
void expect_estimate_matches_run(const RunSpec& s);

// The message of the estimate's refusal of `s`; expects INVALID_ARGUMENT
// (a failed test and "" when the estimate accepts it).
std::string estimate_refusal(const RunSpec& s);

}  // namespace tessera::test
