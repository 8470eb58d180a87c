// Helpers shared by the sharded-strategy tests (see strategy_support.hpp).
#include "strategy_support.hpp"

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

#include "tessera/core/config.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

RunSpec spec(const std::string& model, const std::string& strategy, int world,
             const std::string& options, int64_t micro_batches) {
  RunSpec s;
  s.model = model;
  s.strategy = strategy;
  s.world = world;
  s.batch = micro_batches > 1 ? 24 : 12;
  s.micro_batches = micro_batches;
  s.strategy_options = options;
  return s;
}

RunSpec uneven_spec(const std::string& model, const std::string& strategy, int world,
                    const std::string& options, int64_t micro_batches) {
  RunSpec s = spec(model, strategy, world, options, micro_batches);
  if (micro_batches == 1) s.batch = model == "mlp" ? 11 : 10;
  return s;
}

const train::RunResult& cached(const RunSpec& s) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = config_toml(s);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run(s)).first;
  return it->second;
}

void expect_params_identical(const train::RunResult& result) {
  const train::CollectedState& first = result.final_state.at(0);
  for (size_t r = 1; r < result.final_state.size(); ++r) {
    for (const std::string& name : param_names(first)) {
      const std::vector<float> a = result.final_state[r].full(name);
      const std::vector<float> b = first.full(name);
      ASSERT_EQ(a.size(), b.size()) << name;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 in " << name;
    }
  }
}

std::string refusal(const RunSpec& s) {
  try {
    (void)train::plan_run(parse_config(config_toml(s), "bad.toml"), registry());
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << msg;
    // A refusal answers the user's configuration: no source location.
    EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(".hpp:"), std::string::npos) << msg;
    return msg;
  }
  return "";
}

std::string run_error(const RunSpec& s, const PluginRegistry& plugins) {
  try {
    std::ostringstream log;
    train::RunOptions options;
    options.out = &log;
    (void)train::run_training(parse_config(config_toml(s), "bad.toml"), plugins, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  return "";
}

std::map<std::string, int64_t> unit_params(const train::CollectedState& state) {
  std::map<std::string, int64_t> per_unit;
  for (const std::string& name : param_names(state)) {
    per_unit[name.substr(0, name.find('.'))] += static_cast<int64_t>(state.full(name).size());
  }
  return per_unit;
}

std::vector<FsdpUnit> per_unit(const std::string& model) {
  if (model == "gpt") {
    return {{{"embed"}, 3}, {{"block0"}, 2}, {{"block1"}, 2}, {{"head"}, 1}};
  }
  return {{{"layer0"}, 2}, {{"layer1"}, 2}, {{"head"}, 1}};
}

std::vector<FsdpUnit> per_unit_once(const std::string& model) {
  std::vector<FsdpUnit> once = per_unit(model);
  for (FsdpUnit& g : once) g.gathers = 1;
  return once;
}

namespace {
int64_t params_of(const std::map<std::string, int64_t>& psi, const FsdpUnit& g) {
  int64_t n = 0;
  for (const std::string& u : g.units) n += psi.at(u);
  return n;
}
}  // namespace

int64_t padded_shard(const std::map<std::string, int64_t>& psi,
                     const std::vector<FsdpUnit>& wrapped, int group) {
  int64_t sum = 0;
  for (const FsdpUnit& g : wrapped) sum += (params_of(psi, g) + group - 1) / group;
  return sum;
}

int64_t padded_shard(const std::map<std::string, int64_t>& psi, int group) {
  int64_t sum = 0;
  for (const auto& [unit, n] : psi) sum += (n + group - 1) / group;
  return sum;
}

int64_t norm_bytes(int world) { return 2 * (world - 1) * 8 / world; }

int64_t sharded_step_bytes(const std::map<std::string, int64_t>& psi,
                           const std::vector<FsdpUnit>& wrapped, int world, int64_t param_bytes,
                           int64_t reduce_bytes) {
  int64_t bytes = norm_bytes(world);
  for (const FsdpUnit& g : wrapped) {
    const int64_t piece = (params_of(psi, g) + world - 1) / world;
    bytes += (world - 1) * piece * (g.gathers * param_bytes + reduce_bytes);
  }
  return bytes;
}

void expect_persistent_peaks(const train::RunResult& result, int world,
                             const PersistentBytes& expected, const std::string& where) {
  expect_persistent_peaks(
      result, std::vector<PersistentBytes>(static_cast<size_t>(world), expected), where);
}

void expect_persistent_peaks(const train::RunResult& result,
                             const std::vector<PersistentBytes>& expected,
                             const std::string& where) {
  ASSERT_EQ(result.memory.size(), expected.size()) << where;
  for (size_t r = 0; r < result.memory.size(); ++r) {
    const auto& peak = result.memory[r].peak;
    const PersistentBytes& e = expected[r];
    EXPECT_EQ(peak[TESSERA_MEM_PARAMS], e.params) << where << " rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_GRADS], e.grads) << where << " rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_OPTIMIZER], e.optimizer) << where << " rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_PARAMS] + peak[TESSERA_MEM_GRADS] + peak[TESSERA_MEM_OPTIMIZER],
              e.params + e.grads + e.optimizer)
        << where << " rank " << r;
  }
}

void expect_matches_reference(const train::RunResult& result, const train::RunResult& ref,
                              int stride) {
  const auto world = static_cast<int>(result.final_state.size());
  for (int r = stride; r < world; ++r) {
    EXPECT_EQ(first_piece_difference(result.final_state[static_cast<size_t>(r)],
                                     result.final_state[static_cast<size_t>(r % stride)]),
              "")
        << "rank " << r << " differs from rank " << r % stride << " (same place, other replica)";
  }
  // merged() also refuses pieces of one tensor that differ between ranks.
  const train::CollectedState all = merged(result);
  EXPECT_EQ(tensor_names(all), tensor_names(ref.final_state[0]));
  std::string worst;
  EXPECT_LE(max_param_rel_diff(all, ref.final_state[0], &worst), kTolerance)
      << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, ref.final_loss, 1e-4 * std::fabs(ref.final_loss));
  ASSERT_EQ(result.logged.size(), 1U);
  ASSERT_EQ(ref.logged.size(), 1U);
  EXPECT_NEAR(result.logged[0].grad_norm, ref.logged[0].grad_norm, 1e-4 * ref.logged[0].grad_norm);
}

std::string debug_log_of(const RunSpec& s, const std::string& logger_name,
                         train::RunResult* result) {
  std::ostringstream text;
  const std::shared_ptr<spdlog::logger> logger = get_logger(logger_name);
  const auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  const spdlog::level::level_enum level = logger->level();
  logger->sinks().push_back(sink);
  logger->set_level(spdlog::level::debug);
  try {
    train::RunResult r = run(s);
    if (result != nullptr) *result = std::move(r);
  } catch (...) {
    logger->sinks().pop_back();
    logger->set_level(level);
    throw;
  }
  logger->sinks().pop_back();
  logger->set_level(level);
  return text.str();
}

Collectives step_collectives(const RunSpec& s, int64_t step) {
  const std::string all = debug_log_of(s, "strategy.fsdp");
  // "fsdp: step S: A allgathers and R reduce-scatters ..." (no std::regex:
  // g++ 12 warns inside <regex> under the sanitizers).
  const std::string prefix = "fsdp: step " + std::to_string(step) + ": ";
  Collectives c;
  const size_t at = all.find(prefix);
  if (at != std::string::npos) {
    std::istringstream fields(all.substr(at + prefix.size()));
    std::string word1;
    std::string word2;
    fields >> c.allgathers >> word1 >> word2 >> c.reduce_scatters;
    if (!fields || word1 != "allgathers" || word2 != "and") c = Collectives{};
  }
  return c;
}

}  // namespace tessera::test
