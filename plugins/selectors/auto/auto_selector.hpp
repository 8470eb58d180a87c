// The `auto` selector (selector interface 1.0): candidates from the
// installed strategies, estimated by the strategies themselves, rejected
// past the budget minus headroom, ranked by the cost model, ties resolved
// by the selection guide; optionally the best few run as short trials.
#pragma once

#include "tessera/sdk/selector.hpp"

namespace tessera::selectors {

struct AutoSelector {
  static void select(const sdk::Host& host, const sdk::Options& opts, sdk::SelectEnv& env);
};

}  // namespace tessera::selectors
