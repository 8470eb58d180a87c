// Registration of the `hybrid` strategy plugin: the SDK's pipeline engine
// with a tensor axis in every stage and data-parallel replicas of the whole.
#include "hybrid_options.hpp"
#include "tessera/sdk/pipeline_engine.hpp"

namespace tessera::strategies {

// 3D parallelism on a dp x pp x tp mesh (docs/strategies/hybrid.md).
class HybridStrategy final : public sdk::Strategy {
 public:
  static void check(const sdk::Host& /*host*/, const sdk::Options& options, int32_t world_size) {
    (void)HybridOptions::read(options, world_size);
  }
  // Takes no gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kNone;
  // The engine's estimate for the mesh and dp_shard read from the options
  // (docs/strategies/hybrid.md).
  static sdk::Estimate estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                const sdk::EstimateArgs& args) {
    return sdk::PipelineEngine::estimate_for(HybridOptions::read(options, args.world_size).pipeline,
                                             args);
  }
  HybridStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env)
      : engine_(host, HybridOptions::read(options, env.world_size()).pipeline, env) {}

  [[nodiscard]] tessera_strategy_layout layout() const override { return engine_.layout(); }
  void load(const sdk::StateReader& reader) override { engine_.load(reader); }
  sdk::StepResult step(const sdk::StepArgs& args) override { return engine_.step(args); }
  void save(const sdk::StateWriter& writer) override { engine_.save(writer); }

 private:
  sdk::PipelineEngine engine_;
};

}  // namespace tessera::strategies

TESSERA_REGISTER_STRATEGY(tessera::strategies::HybridStrategy, "hybrid", "0.1.0",
                          "3D parallel: data x pipeline x tensor on a mesh (tp innermost), the "
                          "pipeline schedules running tensor-parallel units in every stage",
                          tessera::strategies::kHybridOptions)
