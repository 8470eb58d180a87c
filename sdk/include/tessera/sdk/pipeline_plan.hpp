// The plan of a pipeline: its options (stages, schedule, virtual stages,
// partition; and the tensor axis and optimizer sharding of strategies that
// combine the pipeline with other axes, as `hybrid` does), the checks that
// read them, the ideal bubble of each schedule, and which units each stage
// runs (contiguous runs balanced by the model's per-unit cost, or explicit
// boundaries). Used by PipelineEngine (pipeline_engine.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::sdk {

enum class PipelineSchedule { kGpipe, kOneFOneB, kInterleaved, kZeroBubble };

struct PipelineOptions {
  int32_t stages = 0;  // resolved: >= 1, divides the world
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  int32_t virtual_stages = 1;  // model chunks per rank: >= 2 under interleaved, else 1
  bool explicit_partition = false;
  std::vector<int64_t> boundaries;  // explicit: first unit of chunks 1 .. chunks()-1
  // Set by the strategies that combine the pipeline with other axes
  // (`hybrid`): ranks per tensor-parallel group inside every stage, its
  // sequence mode, the name its messages start with and the key its
  // stage count is read from.
  int32_t tp = 1;
  bool sequence = false;
  // The optimizer state sharded over the data-parallel replicas (ZeRO-1
  // over the data axis): each replica updates its slice of the held
  // parameters, then the replicas allgather them.
  bool shard_optimizer = false;
  // ... and the gradients (ZeRO-2 over the data axis, needs
  // shard_optimizer): the replicas reduce-scatter the held gradients once
  // the pipeline drains instead of allreducing each unit's, and each
  // updates from its slice (the accumulation over the micro-batches still
  // needs the whole buffer during the backward).
  bool shard_gradients = false;
  const char* who = "pipeline";
  const char* stages_key = "stages";
  // activation_checkpointing: every that many units of each chunk (never
  // its last) recompute their forward before their backward; 0: off.
  int64_t checkpoint_every = 0;

  // Reads and checks the options for `world_size` ranks. Throws
  // tessera::Error (invalid argument) naming the option when stages is
  // negative or does not divide the world size, when schedule is not
  // gpipe, 1f1b, interleaved or zb1, when
  // interleaved has fewer than 2 stages or virtual_stages is not >= 2 (or
  // virtual_stages is set for another schedule), when partition is not
  // balanced or explicit, or when boundaries is not chunks()-1 increasing
  // unit indices >= 1 (or is given with balanced).
  static PipelineOptions read(const sdk::Options& options, int32_t world_size);
  // The keys after `stages` (schedule, virtual_stages, partition,
  // boundaries, activation_checkpointing) into `o` for o.stages, checked as
  // read() does, the messages starting with o.who.
  static void read_schedule(const sdk::Options& options, PipelineOptions& o);

  // The schedule's ideal bubble fraction, the share of a stage's step spent
  // idle with equal forward and backward times per stage and no transfer
  // time: (p-1)/(v*m+p-1) with p stages, m micro-batches and v virtual
  // stages (1 for gpipe and 1f1b); zb1, with the input and weight halves
  // of the backward each as long as a forward: (p-1)/(3m+p-1); 0 with one
  // stage.
  [[nodiscard]] double bubble_formula(int32_t micro_batches) const noexcept;

  // Model chunks over all stages (stages x virtual_stages).
  [[nodiscard]] int32_t chunks() const noexcept { return stages * virtual_stages; }

  [[nodiscard]] const char* schedule_name() const noexcept {
    switch (schedule) {
      case PipelineSchedule::kGpipe:
        return "gpipe";
      case PipelineSchedule::kInterleaved:
        return "interleaved";
      case PipelineSchedule::kZeroBubble:
        return "zb1";
      case PipelineSchedule::kOneFOneB:
        break;
    }
    return "1f1b";
  }
};

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
StagePlan explicit_plan(const std::vector<int64_t>& boundaries, int32_t units,
                        std::string_view who = "pipeline");

inline PipelineOptions PipelineOptions::read(const sdk::Options& options, int32_t world_size) {
  PipelineOptions o;
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "strategy 'pipeline' needs at least one rank, but the world size is ", world_size);
  const int64_t stages = options.get_int("stages");
  TESSERA_CHECK(stages >= 0, TESSERA_ERR_INVALID_ARGUMENT, "pipeline: stages = ", stages,
                " must be >= 1 (or 0: one stage per rank)");
  o.stages = stages == 0 ? world_size : static_cast<int32_t>(std::min<int64_t>(stages, 1 << 30));
  TESSERA_CHECK(world_size % o.stages == 0, TESSERA_ERR_INVALID_ARGUMENT,
                "pipeline: stages = ", stages, " does not divide the world size ", world_size,
                " (world = data-parallel replicas x stages)");
  read_schedule(options, o);
  return o;
}

inline void PipelineOptions::read_schedule(const sdk::Options& options, PipelineOptions& o) {
  const char* const who = o.who;
  o.checkpoint_every = read_activation_checkpointing(options, who);
  const std::string schedule = options.get_string("schedule");
  if (schedule == "gpipe") {
    o.schedule = PipelineSchedule::kGpipe;
  } else if (schedule == "1f1b") {
    o.schedule = PipelineSchedule::kOneFOneB;
  } else if (schedule == "interleaved") {
    o.schedule = PipelineSchedule::kInterleaved;
  } else if (schedule == "zb1") {
    o.schedule = PipelineSchedule::kZeroBubble;
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(who, ": schedule = \"", schedule,
                                          "\" is not one of gpipe, 1f1b, interleaved, zb1"));
  }
  const int64_t virtual_stages = options.get_int("virtual_stages");
  if (o.schedule == PipelineSchedule::kInterleaved) {
    TESSERA_CHECK(virtual_stages == 0 || virtual_stages >= 2, TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": virtual_stages = ", virtual_stages,
                  " must be >= 2 for schedule = \"interleaved\" (model chunks per rank; 0: 2)");
    TESSERA_CHECK(o.stages >= 2, TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": schedule = \"interleaved\" needs stages >= 2, but there is ", o.stages,
                  " stage");
    constexpr int64_t kMostVirtualStages = int64_t{1} << 20;
    TESSERA_CHECK(virtual_stages <= kMostVirtualStages, TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": virtual_stages = ", virtual_stages, " is more than ", kMostVirtualStages,
                  " (model chunks per rank; a rank's chunks need at least as many units)");
    o.virtual_stages = virtual_stages == 0 ? 2 : static_cast<int32_t>(virtual_stages);
  } else {
    TESSERA_CHECK(virtual_stages == 0, TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": virtual_stages = ", virtual_stages, " is set but schedule = \"", schedule,
                  "\" (virtual stages need schedule = \"interleaved\")");
  }

  const std::string partition = options.get_string("partition");
  o.boundaries = options.get_int_list("boundaries");
  if (partition == "balanced") {
    TESSERA_CHECK(o.boundaries.empty(), TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": boundaries is set but partition = \"balanced\" (set partition = "
                  "\"explicit\" to use them)");
  } else if (partition == "explicit") {
    o.explicit_partition = true;
    if (o.virtual_stages == 1) {
      TESSERA_CHECK(o.boundaries.size() == static_cast<size_t>(o.stages - 1),
                    TESSERA_ERR_INVALID_ARGUMENT, who, ": boundaries has ", o.boundaries.size(),
                    " entries, but ", o.stages, " stages need ", o.stages - 1,
                    " (the first unit of stages 1 .. ", o.stages - 1, ")");
    } else {
      TESSERA_CHECK(o.boundaries.size() == static_cast<size_t>(o.chunks() - 1),
                    TESSERA_ERR_INVALID_ARGUMENT, who, ": boundaries has ", o.boundaries.size(),
                    " entries, but ", o.stages, " stages x ", o.virtual_stages,
                    " virtual_stages = ", o.chunks(), " model chunks need ", o.chunks() - 1,
                    " (the first unit of chunks 1 .. ", o.chunks() - 1, ")");
    }
    int64_t prev = 0;
    for (size_t i = 0; i < o.boundaries.size(); ++i) {
      TESSERA_CHECK(o.boundaries[i] > prev, TESSERA_ERR_INVALID_ARGUMENT, who,
                    ": boundaries must be increasing unit indices >= 1, but entry ", i, " is ",
                    o.boundaries[i], (i == 0 ? "" : " after "),
                    (i == 0 ? std::string() : std::to_string(prev)));
      prev = o.boundaries[i];
    }
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(who, ": partition = \"", partition,
                                          "\" is not one of balanced, explicit"));
  }
}

inline double PipelineOptions::bubble_formula(int32_t micro_batches) const noexcept {
  if (stages <= 1 || micro_batches <= 0) return 0.0;
  const double idle = stages - 1;
  const double slots = schedule == PipelineSchedule::kZeroBubble ? 3.0 : virtual_stages;
  return idle / (slots * micro_batches + idle);
}

namespace pipeline_detail {

inline void check_stage_count(int32_t stages, int32_t units) {
  if (stages > units) {
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        ::tessera::detail::concat("pipeline: stages = ", stages, " is more than the model's ",
                                  units, " units (every stage needs at least one unit)"));
  }
}

}  // namespace pipeline_detail

inline int32_t StagePlan::stage_of(int32_t unit) const {
  const auto it = std::upper_bound(first.begin(), first.end(), unit);
  return static_cast<int32_t>(it - first.begin()) - 1;
}

inline StagePlan balanced_plan(const std::vector<double>& cost, int32_t stages) {
  const auto units = static_cast<int32_t>(cost.size());
  pipeline_detail::check_stage_count(stages, units);
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

inline StagePlan explicit_plan(const std::vector<int64_t>& boundaries, int32_t units,
                               std::string_view who) {
  const auto stages = static_cast<int32_t>(boundaries.size()) + 1;
  pipeline_detail::check_stage_count(stages, units);
  StagePlan plan;
  plan.first.push_back(0);
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] >= units) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  ::tessera::detail::concat(who, ": boundaries entry ", i, " is ", boundaries[i],
                                            ", out of range: the model has ", units,
                                            " units (0 .. ", units - 1, ")"));
    }
    plan.first.push_back(static_cast<int32_t>(boundaries[i]));
  }
  plan.first.push_back(units);
  return plan;
}

}  // namespace tessera::sdk
