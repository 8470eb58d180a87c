// Options of the `hybrid` strategy (see hybrid_options.hpp).
#include "hybrid_options.hpp"

#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

HybridOptions HybridOptions::read(const sdk::Options& options, int32_t world_size) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "strategy 'hybrid' needs at least one rank, but the world size is ", world_size);
  const int64_t dp = options.get_int("dp");
  const int64_t tp = options.get_int("tp");
  const int64_t pp = options.get_int("pp");
  TESSERA_CHECK(tp >= 1 && pp >= 1 && dp >= 0, TESSERA_ERR_INVALID_ARGUMENT, "hybrid: tp = ", tp,
                ", pp = ", pp, ", dp = ", dp,
                ": tp and pp must be >= 1 and dp >= 0 (0: world / (tp x pp))");
  const int64_t inner = tp * pp;
  const int64_t replicas = dp == 0 ? world_size / inner : dp;
  TESSERA_CHECK(replicas >= 1 && replicas * inner == world_size, TESSERA_ERR_INVALID_ARGUMENT,
                "hybrid: dp x tp x pp = ", dp == 0 ? std::string("?") : std::to_string(dp), " x ",
                tp, " x ", pp, " must be the world size ", world_size,
                dp == 0 ? " (tp x pp must divide it)" : "");
  HybridOptions o;
  o.dp = static_cast<int32_t>(replicas);
  o.pipeline.who = "hybrid";
  o.pipeline.stages_key = "pp";
  o.pipeline.stages = static_cast<int32_t>(pp);
  o.pipeline.tp = static_cast<int32_t>(tp);
  sdk::PipelineOptions::read_schedule(options, o.pipeline);
  const std::string mode = options.get_string("mode");
  TESSERA_CHECK(mode == "tensor" || mode == "sequence", TESSERA_ERR_INVALID_ARGUMENT,
                "hybrid: mode = \"", mode, "\" is not one of tensor, sequence");
  o.pipeline.sequence = mode == "sequence";
  const std::string shard = options.get_string("dp_shard");
  TESSERA_CHECK(shard == "none" || shard == "zero1" || shard == "zero2",
                TESSERA_ERR_INVALID_ARGUMENT, "hybrid: dp_shard = \"", shard,
                "\" is not one of none, zero1, zero2");
  o.pipeline.shard_optimizer = shard != "none";
  o.pipeline.shard_gradients = shard == "zero2";
  return o;
}

}  // namespace tessera::strategies
