// Registration of the `auto` selector plugin.
#include "auto_options.hpp"
#include "auto_selector.hpp"

TESSERA_REGISTER_SELECTOR(tessera::selectors::AutoSelector, "auto", "0.1.0",
                          "the strategy selection guide generalised by a cost model: the "
                          "fastest predicted strategy that fits the memory budget",
                          tessera::selectors::kAutoOptions)
