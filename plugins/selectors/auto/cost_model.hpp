// The `auto` selector's cost model: a candidate's step time from its
// estimate (compute FLOPs, bytes and messages per axis, pipeline bubble)
// and the rates of this machine and backend.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/selector.h"
#include "tessera/sdk/selector.hpp"

namespace tessera::selectors {

// Links between nodes are assumed this many times slower than the links
// within a node (a node's GPU interconnect against its network card).
inline constexpr double kInterNodeSlowdown = 8.0;

// Assumed compute rates of device backends, FLOP/s per rank (no probe
// runs on the device; option gemm_flops overrides).
struct DeviceRate {
  tessera_device_type device;
  double flops;
  const char* note;
};
inline constexpr DeviceRate kDeviceRates[] = {
    {TESSERA_DEVICE_CUDA, 1.0e14, "assumed 100 TFLOP/s per CUDA device"},
};

struct Rates {
  double flops = 1.0;            // per rank
  double intra_bandwidth = 1.0;  // bytes/s, groups inside a node
  double inter_bandwidth = 1.0;  // bytes/s, groups spanning nodes
  double latency = 0.0;          // seconds per collective call
  int32_t world_size = 1;
  int32_t ranks_per_node = 1;
  // Cores the rank threads of this node share when they outnumber them
  // (CPU backends with ranks as threads); 0: a core (or device) per rank.
  int32_t shared_cores = 0;
  // Seconds per parameter element of a step's optimizer update and
  // gradient zeroing (the host's timing; 0 where it has none), and the
  // optimizer's state slots, which tell how many elements a rank updates.
  double update_seconds_per_element = 0.0;
  int32_t optimizer_slots = 0;
  std::string flops_source;
  std::string link_source;
};

// The rates for env: `gemm_flops` (> 0); else for a CPU backend the host's
// timing of the model's own units (env.compute_rate), or where it has none
// the single-thread sgemm rate (and the cores rank threads share, when
// they outnumber them); for a device backend an assumed rate; and the
// backend's bandwidth and latency.
Rates make_rates(const sdk::SelectEnv& env, double gemm_flops);

// Single-thread sgemm rate of this machine (OpenBLAS, a 512 x 512 x 512
// product, best of three after a warm-up), measured once per process.
double measured_gemm_flops();

struct Prediction {
  double compute = 0.0;
  double comm = 0.0;
  double bubble = 0.0;
  [[nodiscard]] double step() const noexcept { return compute + comm + bubble; }
};

// busy = compute_flops / flops + u · elements, the busiest rank's compute
// with a core to itself (u: update_seconds_per_element; elements: what the
// rank updates, its optimizer state bytes / (4 · slots), or its parameter
// bytes / 4 for a rule without state); critical = busy / (1 - b), its
// schedule with the bubble b. With a processor per rank, compute = busy
// and bubble = critical - busy; with `shared_cores` cores for the
// ranks_per_node rank threads, compute = busy · ranks / cores and
// bubble = max(critical - compute, 0). comm = Σ over axes of
// bytes / bandwidth(axis) + messages · latency.
Prediction predict(const tessera_estimate& e, const Rates& rates);

}  // namespace tessera::selectors
