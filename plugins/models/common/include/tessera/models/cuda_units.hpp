// CUDA units of the in-tree models (run.device = "cuda"). They live in a
// module of their own, libtessera_cuda_units.so in the "cuda" directory
// beside the model plugins, which links the CUDA runtime and cuBLAS: a
// model plugin loads it only on a CUDA run, so the plugins still load on
// machines without CUDA libraries.
//
// A CUDA unit wraps the CPU unit it replaces (its "twin"): the same name,
// parameters, cost and initialisation, so checkpoints move between devices
// unchanged. It computes on device or managed memory where the caller's
// buffers are such (the host's mem_alloc on a CUDA run), and through
// device copies where they are ordinary host memory. The units take no
// tensor-parallel group and do not split their backward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tessera/c/host.h"
#include "tessera/models/unit.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::model::cuda {

// The activation of a dense unit.
enum class UnitActivation : int32_t { none = 0, relu = 1, gelu = 2 };

// What the module hands out; a module of another version is refused.
struct UnitFactory {
  uint32_t version;
  // y = act(x·w + b) over the twin's parameters "w" [in, out] and "b" [out].
  std::unique_ptr<Unit> (*dense)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                 int64_t in, int64_t out, UnitActivation act);
  // Softmax cross-entropy over x·w + b, the twin's "w" [in, classes], "b".
  std::unique_ptr<Unit> (*classifier)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                      int64_t in, int64_t classes);
  // gpt's units: the token and position embedding (the twin's "wte" [vocab,
  // d], "wpe" [seq_len, d]); a pre-LN decoder block with fused causal
  // attention (its twelve parameters in GptBlock's order; `hidden` the
  // MLP's width); the final LayerNorm and the head over the vocabulary
  // ("lnf_g", "lnf_b", then w or the tied wte [vocab, d]).
  std::unique_ptr<Unit> (*gpt_embedding)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                         int64_t vocab, int64_t d, int64_t seq_len);
  std::unique_ptr<Unit> (*gpt_block)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                     int64_t d, int64_t heads, int64_t hidden);
  std::unique_ptr<Unit> (*gpt_head)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                    int64_t vocab, int64_t d);
};

inline constexpr uint32_t kUnitFactoryVersion = 1;
// The module's one exported symbol: extern "C" const UnitFactory* NAME().
#define TESSERA_CUDA_UNITS_ENTRY tessera_cuda_units_v1

// Whether `host` runs this rank on a CUDA device (host ABI 1.5).
bool wants_cuda(const sdk::Host& host) noexcept;

// For a model without CUDA units: throws tessera::Error (unsupported)
// naming `model` when `host` runs this rank on a CUDA device.
void require_cpu(const sdk::Host& host, std::string_view model);

// The module's factory, loaded once per process: cuda/libtessera_cuda_units.so
// beside the calling model plugin, else as the dynamic linker finds it.
// Throws tessera::Error (unsupported) naming `model` and what failed: the
// module is missing (a build without the CUDA Toolkit), cannot be loaded,
// or has another version.
const UnitFactory& load_units(std::string_view model);

}  // namespace tessera::model::cuda
