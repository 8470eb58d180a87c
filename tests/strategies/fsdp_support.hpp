// Helpers shared by the `fsdp` tests: run specs, a per-process cache of
// runs, the per-unit parameter counts of the tiny models and the exact
// bytes an FSDP step sends.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "run_support.hpp"

namespace tessera::test::fsdp {

// Tolerance of the f32 paths against `none` on one rank.
inline constexpr double kTolerance = 1e-5;

// A 20-step AdamW run of `model` under `strategy` on `world` ranks with
// `options` as [strategy.options]. The batch (12, or 24 with micro-batches)
// divides evenly for 1 to 4 ranks.
RunSpec spec(const std::string& model, const std::string& strategy, int world,
             const std::string& options = "", int64_t micro_batches = 1);

// The run of `s`, computed once per distinct configuration in this process.
const train::RunResult& cached(const RunSpec& s);

// Expects every rank's parameter tensors to hold rank 0's bits.
void expect_params_identical(const train::RunResult& result);

// The ranks' states merged into one (each rank wrote its optimizer pieces).
train::CollectedState merged(const train::RunResult& result);

// Ψ_u of every model unit by name, summed from the parameter tensors
// "<unit>.<param>" of a one-rank state (unit names hold no dot).
std::map<std::string, int64_t> unit_params(const train::CollectedState& state);

// An FSDP unit: model unit names and how many allgathers of it one step
// runs (gathers of a unit still held are skipped).
struct FsdpUnit {
  std::vector<std::string> units;
  int64_t gathers = 2;
};

// Bytes one rank sends per step of a full_shard (or shard_grad_op) run
// over `world` ranks in one sharding group with `wrapped` FSDP units of
// the model whose unit sizes are `psi`: per FSDP unit of Ψ_g parameters and
// piece s_g = ceil(Ψ_g / N), (N-1)·s_g·`param_bytes` per allgather and
// (N-1)·s_g·`reduce_bytes` for its reduce-scatter, plus the f64 norm
// allreduce 2(N-1)/N · 8 (whole bytes).
int64_t sharded_step_bytes(const std::map<std::string, int64_t>& psi,
                           const std::vector<FsdpUnit>& wrapped, int world, int64_t param_bytes = 4,
                           int64_t reduce_bytes = 4);

// Σ over FSDP units of ceil(Ψ_g / group): the elements of each rank's
// parameter, gradient and optimizer-slot shards.
int64_t padded_shard(const std::map<std::string, int64_t>& psi,
                     const std::vector<FsdpUnit>& wrapped, int group);

// The allgathers and reduce-scatters rank 0's fsdp strategy reports in its
// debug line for step `step` of a run of `s` (the strategy's logger is
// captured at debug level during the run); {-1, -1} if it wrote none.
struct Collectives {
  int64_t allgathers = -1;
  int64_t reduce_scatters = -1;
};
Collectives step_collectives(const RunSpec& s, int64_t step);

// One FSDP unit per model unit of `model` ("mlp" or "gpt") with the
// allgathers full_shard runs per step: the last unit runs its backward
// right after its forward (1 gather), the others are gathered for their
// forward and their backward (2), and gpt's embedding also for the tied
// head's forward (3).
std::vector<FsdpUnit> per_unit(const std::string& model);

}  // namespace tessera::test::fsdp
