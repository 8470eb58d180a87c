// The cost model (cost_model.hpp).
#include "cost_model.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace tessera::selectors {
namespace {

// Mesh axes from the innermost (neighbouring ranks) out; an axis another
// strategy names is taken as outermost.
constexpr std::array<const char*, 3> kAxisOrder = {"tensor", "pipeline", "data"};

size_t axis_position(const char* name) {
  for (size_t i = 0; i < kAxisOrder.size(); ++i) {
    if (name != nullptr && std::strcmp(name, kAxisOrder.at(i)) == 0) return i;
  }
  return kAxisOrder.size();
}

// Whether the groups of axis `a` cross nodes: the ranks one group spans
// (its size times the product of the axes inside it) exceed a node.
bool spans_nodes(const tessera_estimate& e, int32_t a, const Rates& r) {
  if (r.world_size <= r.ranks_per_node) return false;
  const size_t pos = axis_position(e.axes[a].name);
  int64_t stride = 1;
  for (int32_t b = 0; b < e.num_axes; ++b) {
    if (b != a && axis_position(e.axes[b].name) < pos) stride *= std::max(e.axes[b].group_size, 1);
  }
  return stride * std::max(e.axes[a].group_size, 1) > r.ranks_per_node;
}

}  // namespace

double measured_gemm_flops() {
  static const double rate = [] {
    constexpr int n = 512;
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5F);
    std::vector<float> b(a.size(), 0.25F);
    std::vector<float> c(a.size(), 0.0F);
    openblas_set_num_threads(1);
    double best = 1e300;
    for (int rep = 0; rep < 4; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, a.data(), n, b.data(),
                  n, 0.0F, c.data(), n);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (rep > 0) best = std::min(best, dt.count());
    }
    return 2.0 * n * n * n / std::max(best, 1e-9);
  }();
  return rate;
}

Rates make_rates(const sdk::SelectEnv& env, double gemm_flops) {
  Rates r;
  r.world_size = env.world_size();
  r.ranks_per_node = std::min(env.ranks_per_node(), env.world_size());
  const tessera_backend_props props = env.backend();
  std::ostringstream fs;
  if (gemm_flops > 0) {
    r.flops = gemm_flops;
    fs << "option gemm_flops";
  } else if (props.device != TESSERA_DEVICE_CPU) {
    r.flops = 0.0;
    for (const DeviceRate& d : kDeviceRates) {
      if (d.device == props.device) {
        r.flops = d.flops;
        fs << d.note;
      }
    }
    TESSERA_CHECK(r.flops > 0, TESSERA_ERR_INVALID_ARGUMENT, "auto: backend '",
                  props.name != nullptr ? props.name : "?", "' has device type ", props.device,
                  ", whose compute rate is unknown; set option 'gemm_flops'");
  } else {
    // The host's timing of the model's own units is what a step runs; the
    // sgemm peak only stands in where the host has no model to time.
    std::string why;
    if (const auto rate = env.compute_rate(&why); rate && rate->flops_per_second > 0) {
      r.flops = rate->flops_per_second;
      r.update_seconds_per_element = rate->update_seconds_per_element;
      fs << rate->source;
    } else {
      r.flops = measured_gemm_flops();
      fs << "single-thread sgemm (" << why << ")";
    }
    // Thread ranks of one process share its cores.
    const unsigned cores = std::max(std::thread::hardware_concurrency(), 1U);
    if (props.thread_ranks != 0 && static_cast<unsigned>(r.ranks_per_node) > cores) {
      r.shared_cores = static_cast<int32_t>(cores);
      fs << "; " << r.ranks_per_node << " rank threads share " << cores << " cores";
    }
  }
  r.flops_source = fs.str();
  r.optimizer_slots = env.model().optimizer_slots();
  const double bw = props.bandwidth > 0 ? props.bandwidth : 1.0;
  // A probe over a world spanning nodes measured the slower links.
  if (props.probed != 0 && r.world_size > r.ranks_per_node) {
    r.inter_bandwidth = bw;
    r.intra_bandwidth = bw * kInterNodeSlowdown;
  } else {
    r.intra_bandwidth = bw;
    r.inter_bandwidth = bw / kInterNodeSlowdown;
  }
  r.latency = std::max(props.latency, 0.0);
  r.link_source = props.source != nullptr ? props.source : "";
  return r;
}

Prediction predict(const tessera_estimate& e, const Rates& rates) {
  Prediction p;
  // The elements this rank's optimizer updates (a sharded state updates
  // its shard only: ZeRO's saving in time as well as memory).
  const double elements =
      rates.optimizer_slots > 0
          ? static_cast<double>(e.memory[TESSERA_MEM_OPTIMIZER]) / (4.0 * rates.optimizer_slots)
          : static_cast<double>(e.memory[TESSERA_MEM_PARAMS]) / 4.0;
  // The busiest rank, a core to itself.
  const double busy = e.compute_flops / rates.flops + elements * rates.update_seconds_per_element;
  const double bubble = std::clamp(e.bubble, 0.0, 0.99);
  const double critical = busy / (1.0 - bubble);  // its schedule, idle time included
  if (rates.shared_cores > 0) {
    // More rank threads than cores: the ranks' work, about the busiest
    // rank's on each, takes ranks / cores times as long, unless the
    // schedule's own critical path is longer (a pipeline's idle stages
    // leave their cores to the busy ones).
    p.compute = busy * rates.ranks_per_node / rates.shared_cores;
    p.bubble = std::max(critical - p.compute, 0.0);
  } else {
    p.compute = busy;
    p.bubble = critical - busy;
  }
  for (int32_t a = 0; a < std::min(e.num_axes, TESSERA_ESTIMATE_MAX_AXES); ++a) {
    const double bw = spans_nodes(e, a, rates) ? rates.inter_bandwidth : rates.intra_bandwidth;
    p.comm += static_cast<double>(e.axes[a].bytes) / bw +
              static_cast<double>(e.axes[a].messages) * rates.latency;
  }
  return p;
}

}  // namespace tessera::selectors
