// The candidates the `auto` selector estimates: strategies and option sets
// proposed from the installed strategies' declared options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "guide.hpp"
#include "tessera/sdk/selector.hpp"

namespace tessera::selectors {

// At most this many candidates (worlds past 16 ranks only try powers of
// two for stages and group sizes, which keeps them well under it).
inline constexpr size_t kMaxCandidates = 64;

struct Candidate {
  std::string strategy;
  std::string options;  // "key = value, ..." ("" for the defaults)
  Family family = Family::kOther;
  int32_t order = 0;  // generation order: the last tie-break
};

// "ddp", or "fsdp (sharding_strategy = \"full_shard\")".
std::string display_name(const std::string& strategy, const std::string& options);

// The strategies to propose: the names in `only` (comma-separated; each
// must be installed, the error lists the installed ones), or every
// installed strategy that can estimate.
std::vector<const tessera_strategy_info*> chosen_strategies(const sdk::SelectEnv& env,
                                                            const std::string& only);

// The candidates of `strategies` for env's world, model and ranks per node.
std::vector<Candidate> make_candidates(const sdk::SelectEnv& env,
                                       const std::vector<const tessera_strategy_info*>& strategies);

// Why `info` proposes no candidate where it proposes none ("" otherwise):
// for the error that says no strategy proposed any.
std::string why_no_candidate(const sdk::SelectEnv& env, const tessera_strategy_info& info);

}  // namespace tessera::selectors
