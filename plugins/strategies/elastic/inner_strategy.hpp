// The strategy the elastic strategy wraps: another strategy plugin of the
// run, found through the host (find_strategy, host ABI 1.6) and driven
// through its C table.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/strategy.h"
#include "tessera/sdk/host.hpp"

namespace tessera::strategies::elastic {

// A strategy plugin and its resolved options.
struct InnerPlugin {
  std::string name;
  const tessera_strategy_api* api = nullptr;
  const tessera_host_api* host = nullptr;  // the inner plugin's own host table
  const tessera_options* options = nullptr;
  uint32_t version = 0;  // major << 16 | minor

  // Finds strategy `name` with "key = value; ..." options. Throws
  // Error(INVALID_ARGUMENT) naming the option of this plugin that chose it.
  static InnerPlugin find(const sdk::Host& host, const std::string& name,
                          const std::string& options);
  // The inner strategy's check for `world_size` ranks; its refusal is ours.
  void check(int32_t world_size) const;
};

// One rank's inner strategy object. Not copyable; destroys it.
class InnerStrategy {
 public:
  // Collective over env.world: the inner strategy's create.
  InnerStrategy(const InnerPlugin& plugin, const tessera_strategy_env& env);
  InnerStrategy(const InnerStrategy&) = delete;
  InnerStrategy& operator=(const InnerStrategy&) = delete;
  ~InnerStrategy();

  [[nodiscard]] const tessera_strategy_layout& layout() const noexcept { return layout_; }
  void load(const tessera_state_reader& reader);
  // Throws Error with the inner strategy's status and message.
  tessera_step_result step(const tessera_step_args& args);
  void save(const tessera_state_writer& writer);

 private:
  [[nodiscard]] std::string what(const char* call) const;
  const InnerPlugin& plugin_;
  tessera_strategy* handle_ = nullptr;
  tessera_strategy_layout layout_{};
};

}  // namespace tessera::strategies::elastic
