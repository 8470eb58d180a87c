// Options of the `pipeline` strategy (see pipeline_options.hpp).
#include "pipeline_options.hpp"

#include <algorithm>
#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

PipelineOptions PipelineOptions::read(const sdk::Options& options, int32_t world_size) {
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

void PipelineOptions::read_schedule(const sdk::Options& options, PipelineOptions& o) {
  const char* const who = o.who;
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
                detail::concat(who, ": schedule = \"", schedule,
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
    o.virtual_stages =
        virtual_stages == 0 ? 2 : static_cast<int32_t>(std::min<int64_t>(virtual_stages, 1 << 20));
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
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        detail::concat(who, ": partition = \"", partition, "\" is not one of balanced, explicit"));
  }
}

double PipelineOptions::bubble_formula(int32_t micro_batches) const noexcept {
  if (stages <= 1 || micro_batches <= 0) return 0.0;
  const double idle = stages - 1;
  const double slots = schedule == PipelineSchedule::kZeroBubble ? 3.0 : virtual_stages;
  return idle / (slots * micro_batches + idle);
}

}  // namespace tessera::strategies
