// The options of the `async_sgd` strategy ([strategy.options]) and their
// checks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kAsyncSgdOptions[] = {
    {"servers", TESSERA_OPT_INT, "1",
     "parameter servers: the first `servers` ranks of the world; the other ranks are workers"},
    {"staleness", TESSERA_OPT_INT, "4",
     "how many versions a worker may run ahead of the slowest worker (0: synchronous SGD)"},
    {"predict", TESSERA_OPT_BOOL, "true",
     "staleness >= 1: a server's reply carries the parameters predicted for when the worker's "
     "next push will be applied (the current ones moved along the recent updates), not the "
     "current ones"},
    {"delay_ms", TESSERA_OPT_INT, "0",
     "injected slowdown for tests and benchmarks: sleep this long at the start of every step "
     "on the ranks of delay_ranks"},
    {"delay_ranks", TESSERA_OPT_STRING, "",
     "world ranks that sleep delay_ms per step, comma-separated (\"1\", \"1,3\"); empty: none"},
    {"delay_every", TESSERA_OPT_INT, "1",
     "with delay_ms: the i-th rank of delay_ranks sleeps only at the steps t with t % "
     "delay_every == i % delay_every (1: every step), so slowdowns can come and go, or move "
     "from rank to rank"},
    sdk::kActivationCheckpointingOption,
};

struct AsyncSgdOptions {
  int32_t servers = 1;
  int64_t staleness = 4;
  bool predict = true;  // staleness >= 1 only
  int64_t delay_ms = 0;
  std::vector<int32_t> delay_ranks;  // sorted, distinct world ranks
  int64_t delay_every = 1;
  int64_t activation_checkpointing = 0;

  // Whether the servers predict the parameters of their replies: only
  // where pushes are applied one by one (staleness >= 1).
  [[nodiscard]] bool predicting() const noexcept { return predict && staleness > 0; }

  // Reads and checks the options for a world of `world_size` ranks.
  // Throws tessera::Error (invalid argument) naming the strategy, the
  // option and its value when servers < 1 or the world has no rank left
  // for a worker (world_size < servers + 1), staleness or delay_ms is
  // negative, delay_every is below 1, or delay_ranks is not a comma-separated list of ranks in
  // [0, world_size).
  static AsyncSgdOptions read(const sdk::Options& options, int32_t world_size) {
    AsyncSgdOptions o;
    const int64_t servers = options.get_int("servers");
    TESSERA_CHECK(servers >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "async_sgd: option 'servers' = ", servers, " must be >= 1");
    TESSERA_CHECK(servers < world_size, TESSERA_ERR_INVALID_ARGUMENT,
                  "async_sgd: option 'servers' = ", servers, " leaves no worker on ", world_size,
                  " ranks: the first 'servers' ranks serve the parameters and the others train, "
                  "so the world needs at least servers + 1 = ",
                  static_cast<uint64_t>(servers) + 1, " ranks");  // no overflow at INT64_MAX
    o.servers = static_cast<int32_t>(servers);
    o.staleness = options.get_int("staleness");
    TESSERA_CHECK(o.staleness >= 0, TESSERA_ERR_INVALID_ARGUMENT,
                  "async_sgd: option 'staleness' = ", o.staleness,
                  " must be >= 0 (0: synchronous SGD)");
    o.predict = options.get_bool("predict");
    o.delay_ms = options.get_int("delay_ms");
    TESSERA_CHECK(o.delay_ms >= 0, TESSERA_ERR_INVALID_ARGUMENT,
                  "async_sgd: option 'delay_ms' = ", o.delay_ms, " must be >= 0");
    o.delay_ranks = parse_ranks(options.get_string("delay_ranks"), world_size);
    o.delay_every = options.get_int("delay_every");
    TESSERA_CHECK(o.delay_every >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "async_sgd: option 'delay_every' = ", o.delay_every,
                  " must be >= 1 (1: the delayed ranks sleep at every step)");
    o.activation_checkpointing = sdk::read_activation_checkpointing(options, "async_sgd");
    return o;
  }

  // "1,3" -> {1, 3}; "" -> {}. Spaces around the numbers are allowed.
  static std::vector<int32_t> parse_ranks(const std::string& text, int32_t world_size) {
    std::vector<int32_t> ranks;
    size_t at = 0;
    while (at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string item = trim(text.substr(at, comma - at));
      if (item.empty()) {
        TESSERA_CHECK(text.find_first_not_of(' ') == std::string::npos,
                      TESSERA_ERR_INVALID_ARGUMENT, "async_sgd: option 'delay_ranks' = '", text,
                      "' has an empty entry; write world ranks separated by commas, e.g. \"1,3\"");
        break;
      }
      int64_t rank = 0;
      bool digits = true;
      for (const char c : item) {
        if (c < '0' || c > '9' || rank > world_size) {
          digits = false;
          break;
        }
        rank = rank * 10 + (c - '0');
      }
      TESSERA_CHECK(digits && rank < world_size, TESSERA_ERR_INVALID_ARGUMENT,
                    "async_sgd: option 'delay_ranks' = '", text, "': '", item,
                    "' is not a world rank in [0, ", world_size, ")");
      ranks.push_back(static_cast<int32_t>(rank));
      at = comma + 1;
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  }

 private:
  static std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(' ');
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(' ') - b + 1);
  }
};

}  // namespace tessera::strategies
