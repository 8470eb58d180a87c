// Registration of the `pipeline` strategy plugin.
#include "pipeline_options.hpp"
#include "pipeline_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::PipelineStrategy, "pipeline", "0.1.0",
                          "pipeline parallel: the model's units split into stages, micro-batches "
                          "streamed through them (gpipe, 1f1b), data-parallel replicas",
                          tessera::strategies::kPipelineOptions)
