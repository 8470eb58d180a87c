// Registration of the `none` strategy plugin.
#include "none_strategy.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace {
// The options every strategy takes; `none` has no others.
constexpr tessera_option_decl kNoneOptions[] = {tessera::sdk::kActivationCheckpointingOption};
}  // namespace

TESSERA_REGISTER_STRATEGY(tessera::strategies::NoneStrategy, "none", "0.1.0",
                          "one rank trains alone: the reference for every other strategy",
                          kNoneOptions)
