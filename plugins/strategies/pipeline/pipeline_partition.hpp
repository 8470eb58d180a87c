// Which units each pipeline stage runs: contiguous runs of units, balanced
// by the model's per-unit cost or given as explicit boundaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::strategies {

// first[s] is the first unit of stage s, first[stages] the number of units.
struct StagePlan {
  std::vector<int32_t> first;
  [[nodiscard]] int32_t stages() const noexcept { return static_cast<int32_t>(first.size()) - 1; }
  [[nodiscard]] int32_t begin(int32_t stage) const { return first.at(static_cast<size_t>(stage)); }
  [[nodiscard]] int32_t end(int32_t stage) const {
    return first.at(static_cast<size_t>(stage) + 1);
  }
  // The stage that runs `unit`.
  [[nodiscard]] int32_t stage_of(int32_t unit) const;
};

// Contiguous stages minimising the largest stage cost (sum of `cost` over
// its units; every stage gets at least one unit; ties go to the earliest
// split). Throws tessera::Error (invalid argument) naming the stages option
// when there are more stages than units.
StagePlan balanced_plan(const std::vector<double>& cost, int32_t stages);

// Stages from `boundaries` (the first unit of stages 1 .. n-1, increasing).
// Throws tessera::Error (invalid argument) naming the option when there are
// more stages than units or a boundary is not below the number of units.
StagePlan explicit_plan(const std::vector<int64_t>& boundaries, int32_t units);

}  // namespace tessera::strategies
