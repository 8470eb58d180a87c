// The options of the `auto` selector ([strategy.options] of a run whose
// strategy is "auto", and `tessera select`).
#pragma once

#include "tessera/c/plugin.h"

namespace tessera::selectors {

inline constexpr tessera_option_decl kAutoOptions[] = {
    {"headroom", TESSERA_OPT_FLOAT, "0.1",
     "fraction of the memory budget per rank kept free: a candidate fits when its predicted "
     "peak is at most budget x (1 - headroom)"},
    {"noise", TESSERA_OPT_FLOAT, "0.05",
     "relative step-time difference under which predictions count as a tie; among tied "
     "candidates the selection guide's recommendation wins"},
    {"trial_steps", TESSERA_OPT_INT, "0",
     "> 0: run the best `trials` fitting candidates this many steps each and choose the "
     "measured fastest that fits; 0: choose by prediction alone"},
    {"trials", TESSERA_OPT_INT, "3", "how many of the best predicted candidates trial mode runs"},
    {"gemm_flops", TESSERA_OPT_FLOAT, "0",
     "FLOP/s one rank computes at; 0: for CPU backends the host's timing of the model's own "
     "units (else a single-thread sgemm), for device backends a table's assumed rate"},
    {"strategies", TESSERA_OPT_STRING, "",
     "comma-separated strategy names the candidates are restricted to; empty: every "
     "installed strategy that can estimate"},
};

}  // namespace tessera::selectors
