// Helpers shared by the tests of the sharded strategies (zero1, zero2,
// zero3, fsdp) and of ddp's options: run specs, a per-process cache of
// runs, replica checks, the per-unit parameter counts of the tiny models,
// the ZeRO memory formulas and the exact bytes a step sends.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "run_support.hpp"

namespace tessera::test {

// Tolerance of the f32 paths against `none` on one rank (max relative
// difference per parameter tensor).
inline constexpr double kTolerance = 1e-5;

// A 20-step AdamW run of `model` under `strategy` on `world` ranks with
// `options` as [strategy.options]. The batch (12, or 24 with
// micro-batches) divides evenly for 1 to 4 ranks.
RunSpec spec(const std::string& model, const std::string& strategy, int world,
             const std::string& options = "", int64_t micro_batches = 1);

// As spec(), with a global batch that 2, 3 and 4 ranks do not all divide
// (mlp 11, gpt and llama 10; 24 with micro-batches), so ranks see uneven
// batches.
RunSpec uneven_spec(const std::string& model, const std::string& strategy, int world,
                    const std::string& options = "", int64_t micro_batches = 1);

// The run of `s`, computed once per distinct configuration in this process.
const train::RunResult& cached(const RunSpec& s);

// Expects every rank's parameter tensors to hold rank 0's bits.
void expect_params_identical(const train::RunResult& result);

// The message plan_run throws for `s`, or "" if it accepts it; expects a
// thrown error to carry TESSERA_ERR_INVALID_ARGUMENT and no source location
// (file:line of a .cpp or .hpp).
std::string refusal(const RunSpec& s);

// The message of the error training `s` with `plugins` throws ("" if it
// runs), for what is refused once the run starts; expects it to carry
// TESSERA_ERR_INVALID_ARGUMENT.
std::string run_error(const RunSpec& s, const PluginRegistry& plugins = registry());

// Ψ_u of every model unit by name, summed from the parameter tensors
// "<unit>.<param>" of a one-rank state (unit names hold no dot).
std::map<std::string, int64_t> unit_params(const train::CollectedState& state);

// An FSDP unit: model unit names and how many allgathers of it one step
// runs (gathers of a unit still held are skipped).
struct FsdpUnit {
  std::vector<std::string> units;
  int64_t gathers = 2;
};

// One unit per model unit of `model` ("mlp" or "gpt") with the allgathers
// a fully sharded step runs (zero3, fsdp full_shard): the last unit runs
// its backward right after its forward (1 gather), the others are gathered
// for their forward and their backward (2), and gpt's embedding also for
// the tied head's forward (3).
std::vector<FsdpUnit> per_unit(const std::string& model);

// per_unit(model) with every unit gathered once per step (zero2's
// allgather of the updated parameters, fsdp shard_grad_op).
std::vector<FsdpUnit> per_unit_once(const std::string& model);

// Σ over `wrapped` units of ceil(Ψ_g / group): the elements of each rank's
// parameter, gradient and optimizer-slot shards.
int64_t padded_shard(const std::map<std::string, int64_t>& psi,
                     const std::vector<FsdpUnit>& wrapped, int group);

// Σ over every model unit u of `psi` of ceil(Ψ_u / group).
int64_t padded_shard(const std::map<std::string, int64_t>& psi, int group);

// Bytes one rank sends in the ring allreduce of the f64 sum of squares of
// the gradient norm over `world` ranks: 2(N-1)/N · 8, in whole bytes.
int64_t norm_bytes(int world);

// Bytes one rank sends per step of a sharded run over `world` ranks in
// one sharding group with `wrapped` units of the model whose unit sizes
// are `psi`: per unit of Ψ_g parameters and piece s_g = ceil(Ψ_g / N),
// (N-1)·s_g·`param_bytes` per allgather and (N-1)·s_g·`reduce_bytes` for
// its reduce-scatter, plus norm_bytes(N).
int64_t sharded_step_bytes(const std::map<std::string, int64_t>& psi,
                           const std::vector<FsdpUnit>& wrapped, int world, int64_t param_bytes = 4,
                           int64_t reduce_bytes = 4);

// Peak bytes per rank of the persistent categories.
struct PersistentBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
};

// Expects `result` to hold memory statistics of `world` ranks whose
// parameter, gradient and optimizer peaks are exactly `expected` (and so
// their sum); `where` prefixes the failure messages.
void expect_persistent_peaks(const train::RunResult& result, int world,
                             const PersistentBytes& expected, const std::string& where = "");
// The same with the peaks of each rank (ranks that hold different parts of
// the model, e.g. pipeline stages): `expected[r]` for rank r.
void expect_persistent_peaks(const train::RunResult& result,
                             const std::vector<PersistentBytes>& expected,
                             const std::string& where = "");

// A run against `ref` (`none` on one rank) of a strategy whose rank r holds
// what rank r % `stride` holds (the same place in another data-parallel
// replica): those ranks' pieces bit-identical (no rank compared when
// stride >= the world), the merged state's tensors those of `ref` and
// within kTolerance of them, the final loss within 1e-4 relative, and the
// logged global gradient norm within 1e-4 relative.
void expect_matches_reference(const train::RunResult& result, const train::RunResult& ref,
                              int stride);

// Runs `s` with logger `logger` (e.g. "strategy.tensor") captured at debug
// level, and returns what it wrote; the run's result into *result when
// given. The logger's level and sinks are restored, also when run() throws.
std::string debug_log_of(const RunSpec& s, const std::string& logger,
                         train::RunResult* result = nullptr);

// The allgathers and reduce-scatters rank 0's fsdp strategy reports in its
// debug line for step `step` of a run of `s` (the strategy's logger is
// captured at debug level during the run); {-1, -1} if it wrote none.
struct Collectives {
  int64_t allgathers = -1;
  int64_t reduce_scatters = -1;
};
Collectives step_collectives(const RunSpec& s, int64_t step);

}  // namespace tessera::test
