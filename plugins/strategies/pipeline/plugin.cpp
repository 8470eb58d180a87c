// Registration of the `pipeline` strategy plugin: the SDK's pipeline engine
// with the options of pipeline_options.hpp.
#include "pipeline_options.hpp"
#include "tessera/sdk/pipeline_engine.hpp"

TESSERA_REGISTER_STRATEGY(tessera::sdk::PipelineEngine, "pipeline", "0.1.0",
                          "pipeline parallel: the model's units split into stages, micro-batches "
                          "streamed through them (gpipe, 1f1b, interleaved, zb1), data-parallel "
                          "replicas",
                          tessera::strategies::kPipelineOptions)
