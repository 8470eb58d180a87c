// Helpers shared by the `fsdp` tests (see fsdp_support.hpp).
#include "fsdp_support.hpp"

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>

#include <cstring>
#include <memory>
#include <regex>
#include <sstream>
#include <utility>

#include "tessera/core/logging.hpp"

namespace tessera::test::fsdp {

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

train::CollectedState merged(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

std::map<std::string, int64_t> unit_params(const train::CollectedState& state) {
  std::map<std::string, int64_t> per_unit;
  for (const std::string& name : param_names(state)) {
    per_unit[name.substr(0, name.find('.'))] += static_cast<int64_t>(state.full(name).size());
  }
  return per_unit;
}

namespace {
int64_t params_of(const std::map<std::string, int64_t>& psi, const FsdpUnit& g) {
  int64_t n = 0;
  for (const std::string& u : g.units) n += psi.at(u);
  return n;
}
}  // namespace

int64_t sharded_step_bytes(const std::map<std::string, int64_t>& psi,
                           const std::vector<FsdpUnit>& wrapped, int world, int64_t param_bytes,
                           int64_t reduce_bytes) {
  int64_t bytes = 2 * (world - 1) * 8 / world;
  for (const FsdpUnit& g : wrapped) {
    const int64_t piece = (params_of(psi, g) + world - 1) / world;
    bytes += (world - 1) * piece * (g.gathers * param_bytes + reduce_bytes);
  }
  return bytes;
}

int64_t padded_shard(const std::map<std::string, int64_t>& psi,
                     const std::vector<FsdpUnit>& wrapped, int group) {
  int64_t sum = 0;
  for (const FsdpUnit& g : wrapped) sum += (params_of(psi, g) + group - 1) / group;
  return sum;
}

Collectives step_collectives(const RunSpec& s, int64_t step) {
  std::ostringstream text;
  const std::shared_ptr<spdlog::logger> logger = get_logger("strategy.fsdp");
  const auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  const spdlog::level::level_enum level = logger->level();
  logger->sinks().push_back(sink);
  logger->set_level(spdlog::level::debug);
  try {
    (void)run(s);
  } catch (...) {
    logger->sinks().pop_back();
    logger->set_level(level);
    throw;
  }
  logger->sinks().pop_back();
  logger->set_level(level);
  const std::regex line("fsdp: step " + std::to_string(step) +
                        ": ([0-9]+) allgathers and ([0-9]+) reduce-scatters");
  std::smatch m;
  const std::string all = text.str();
  Collectives c;
  if (std::regex_search(all, m, line)) {
    c.allgathers = std::stoll(m[1].str());
    c.reduce_scatters = std::stoll(m[2].str());
  }
  return c;
}

std::vector<FsdpUnit> per_unit(const std::string& model) {
  if (model == "gpt") {
    return {{{"embed"}, 3}, {{"block0"}, 2}, {{"block1"}, 2}, {{"head"}, 1}};
  }
  return {{{"layer0"}, 2}, {{"layer1"}, 2}, {{"head"}, 1}};
}

}  // namespace tessera::test::fsdp
