// Helpers of the strategy tests (see run_support.hpp).
#include "run_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

std::string model_toml(const std::string& model) {
  if (model == "gpt") {
    return "name = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n";
  }
  if (model == "llama") {
    // Grouped-query attention: 4 query heads share 2 key/value heads.
    return "name = \"llama\"\nlayers = 2\nd_model = 16\nheads = 4\nkv_heads = 2\nseq_len = 8\n"
           "vocab = 32\n";
  }
  return "name = \"mlp\"\ninput = 16\nhidden = [32, 24]\nclasses = 5\nactivation = \"gelu\"\n";
}

int threads_per_rank_from_env() {
  const char* value = std::getenv("TESSERA_TEST_THREADS_PER_RANK");
  if (value == nullptr) return 1;
  const int n = std::atoi(value);
  return n >= 1 ? n : 1;
}

std::string config_toml(const RunSpec& spec) {
  std::ostringstream t;
  t << "[run]\nworld_size = " << spec.world << "\nthreads_per_rank = " << spec.threads_per_rank
    << "\nsteps = " << spec.steps << "\nseed = 7\nlog_every = " << std::max<int64_t>(spec.steps, 1)
    << "\n\n"
    << "[backend]\nname = \"inmemory\"\ntimeout_s = " << spec.timeout_s << "\n"
    << "[backend.options]\nspin_us = 0\n\n"
    << "[strategy]\nname = \"" << spec.strategy << "\"\n"
    << "[strategy.options]\n"
    << spec.strategy_options << "\n\n"
    << "[model]\n"
    << (spec.model_table.empty() ? model_toml(spec.model) : spec.model_table) << "\n"
    << "[data]\nkind = \"synthetic\"\nbatch_size = " << spec.batch
    << "\nmicro_batches = " << spec.micro_batches << "\n\n"
    << "[optimizer]\nname = \"" << spec.optimizer << "\"\nlr = " << spec.lr
    << "\nweight_decay = 0.01\n"
    << "grad_clip = " << spec.grad_clip << "\n";
  if (spec.optimizer == "adam" || spec.optimizer == "adamw") t << "eps = " << spec.eps << "\n";
  t << "warmup_steps = " << std::min<int64_t>(2, spec.steps) << "\n\n" << spec.extra_toml << "\n";
  return t.str();
}

const PluginRegistry& registry() {
  static PluginRegistry* reg = [] {
    auto* r = new PluginRegistry();
    r->scan({TESSERA_STRATEGIES_PLUGIN_DIR});
    return r;
  }();
  return *reg;
}

train::RunResult run(const RunSpec& spec) {
  const Config config = parse_config(config_toml(spec), "strategy_test.toml");
  std::ostringstream log;
  train::RunOptions options;
  options.out = &log;
  options.collect_final_state = true;
  return train::run_training(config, registry(), options);
}

std::vector<std::string> tensor_names(const train::CollectedState& state) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state.tensors) names.push_back(name);
  return names;  // std::map: already sorted
}

std::vector<std::string> param_names(const train::CollectedState& state) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state.tensors) {
    if (name.rfind("optim.", 0) != 0) names.push_back(name);
  }
  return names;
}

train::CollectedState merged(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  TESSERA_CHECK(a.size() == b.size(), TESSERA_ERR_INVALID_ARGUMENT, "tensors of ", a.size(),
                " and ", b.size(), " elements");
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  return scale > 0.0 ? diff / scale : diff;
}

double max_param_rel_diff(const train::CollectedState& state,
                          const train::CollectedState& reference, std::string* worst) {
  double max = 0.0;
  for (const std::string& name : param_names(reference)) {
    const double d = max_rel_diff(state.full(name), reference.full(name));
    if (d >= max) {
      max = d;
      if (worst != nullptr) *worst = name;
    }
  }
  return max;
}

std::string first_bit_difference(const train::CollectedState& a, const train::CollectedState& b) {
  if (tensor_names(a) != tensor_names(b)) return "the two states hold different tensors";
  for (const std::string& name : tensor_names(a)) {
    const std::vector<float> x = a.full(name);
    const std::vector<float> y = b.full(name);
    if (x.size() != y.size()) return name + ": sizes differ";
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
        std::ostringstream m;
        m << name << "[" << i << "]: " << x[i] << " vs " << y[i];
        return m.str();
      }
    }
  }
  return {};
}

std::string first_piece_difference(const train::CollectedState& a, const train::CollectedState& b) {
  if (tensor_names(a) != tensor_names(b)) return "the tensor names";
  for (const auto& [name, tensor] : a.tensors) {
    const auto& other = b.tensors.at(name).pieces;
    if (tensor.pieces.size() != other.size()) return name + " (piece count)";
    for (size_t i = 0; i < other.size(); ++i) {
      const auto& x = tensor.pieces[i].values;
      const auto& y = other[i].values;
      if (tensor.pieces[i].offset != other[i].offset || x.size() != y.size() ||
          std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
        return name;
      }
    }
  }
  return "";
}

}  // namespace tessera::test
