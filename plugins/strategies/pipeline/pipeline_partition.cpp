// Stage partitions of the `pipeline` strategy (see pipeline_partition.hpp).
#include "pipeline_partition.hpp"

#include <algorithm>
#include <limits>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

namespace {

void check_stage_count(int32_t stages, int32_t units) {
  if (stages > units) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("pipeline: stages = ", stages, " is more than the model's ", units,
                               " units (every stage needs at least one unit)"));
  }
}

}  // namespace

int32_t StagePlan::stage_of(int32_t unit) const {
  const auto it = std::upper_bound(first.begin(), first.end(), unit);
  return static_cast<int32_t>(it - first.begin()) - 1;
}

StagePlan balanced_plan(const std::vector<double>& cost, int32_t stages) {
  const auto units = static_cast<int32_t>(cost.size());
  check_stage_count(stages, units);
  // Units without an estimate count as equal, so the split is still even.
  std::vector<double> c(cost);
  const bool none = std::all_of(c.begin(), c.end(), [](double v) { return !(v > 0.0); });
  if (none) std::fill(c.begin(), c.end(), 1.0);
  std::vector<double> prefix(static_cast<size_t>(units) + 1, 0.0);
  for (int32_t u = 0; u < units; ++u) {
    prefix[static_cast<size_t>(u) + 1] = prefix[static_cast<size_t>(u)] + c[static_cast<size_t>(u)];
  }
  const auto sum = [&](int32_t a, int32_t b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)];
  };
  // best[k][j]: smallest largest cost of units [0, j) on k stages; cut[k][j]
  // the first unit of the last of those stages.
  const double inf = std::numeric_limits<double>::infinity();
  const auto n = static_cast<size_t>(units) + 1;
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1,
                                        std::vector<double>(n, inf));
  std::vector<std::vector<int32_t>> cut(static_cast<size_t>(stages) + 1,
                                        std::vector<int32_t>(n, 0));
  best[0][0] = 0.0;
  for (int32_t k = 1; k <= stages; ++k) {
    for (int32_t j = k; j <= units; ++j) {
      for (int32_t i = k - 1; i < j; ++i) {
        const double v =
            std::max(best[static_cast<size_t>(k) - 1][static_cast<size_t>(i)], sum(i, j));
        if (v < best[static_cast<size_t>(k)][static_cast<size_t>(j)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(j)] = v;
          cut[static_cast<size_t>(k)][static_cast<size_t>(j)] = i;
        }
      }
    }
  }
  StagePlan plan;
  plan.first.assign(static_cast<size_t>(stages) + 1, 0);
  plan.first[static_cast<size_t>(stages)] = units;
  int32_t j = units;
  for (int32_t k = stages; k >= 1; --k) {
    j = cut[static_cast<size_t>(k)][static_cast<size_t>(j)];
    plan.first[static_cast<size_t>(k) - 1] = j;
  }
  return plan;
}

StagePlan explicit_plan(const std::vector<int64_t>& boundaries, int32_t units) {
  const auto stages = static_cast<int32_t>(boundaries.size()) + 1;
  check_stage_count(stages, units);
  StagePlan plan;
  plan.first.push_back(0);
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] >= units) {
      throw Error(
          TESSERA_ERR_INVALID_ARGUMENT,
          detail::concat("pipeline: boundaries entry ", i, " is ", boundaries[i],
                         ", out of range: the model has ", units, " units (0 .. ", units - 1, ")"));
    }
    plan.first.push_back(static_cast<int32_t>(boundaries[i]));
  }
  plan.first.push_back(units);
  return plan;
}

}  // namespace tessera::strategies
