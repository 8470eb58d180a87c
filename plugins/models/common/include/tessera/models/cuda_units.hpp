// CUDA units of the in-tree models (run.device = "cuda"). They live in a
// module of their own, libtessera_cuda_units.so in the "cuda" directory
// beside the model plugins, which links the CUDA runtime, cuBLAS and
// cuBLASLt: a model plugin loads it only on a CUDA run, so the plugins
// still load on machines without CUDA libraries.
//
// A CUDA unit wraps the CPU unit it replaces (its "twin"): the same name,
// parameters, cost and initialisation, so checkpoints move between devices
// unchanged. It computes on device or managed memory where the caller's
// buffers are such (the host's mem_alloc on a CUDA run), and through
// device copies where they are ordinary host memory. Every unit splits its
// backward pass (TESSERA_UNIT_SPLIT_BACKWARD) and splits over a
// tensor-parallel group as its twin does, in tensor and sequence mode.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tessera/c/host.h"
#include "tessera/models/unit.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::model::cuda {

// A llama decoder block's shape (LlamaConfig's, which the CUDA module does
// not link).
struct LlamaShape {
  int64_t d_model;
  int64_t heads;
  int64_t kv_heads;  // divides heads
  int64_t ffn;
  int64_t seq_len;
  double rope_theta;
  double norm_eps;
  bool kv_replicated;  // the key/value heads whole on every rank of a tensor group
};

// The activation of a dense unit.
enum class UnitActivation : int32_t { none = 0, relu = 1, gelu = 2 };

// What the module hands out; a module of another version is refused.
struct UnitFactory {
  uint32_t version;
  // y = act(x·w + b) over the twin's parameters "w" [in, out] and "b" [out]
  // (version 3: under a tensor-parallel group, a column layer or a row
  // layer as the split of the twin's "w" says, a column layer that gathers
  // its output with `gather_output`).
  std::unique_ptr<Unit> (*dense)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                 int64_t in, int64_t out, UnitActivation act, bool gather_output);
  // Softmax cross-entropy over x·w + b, the twin's "w" [in, classes], "b"
  // (classes-parallel under a group that divides the classes).
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
  // llama's units (version 2): the token embedding (the twin's "wte"
  // [vocab, d]); a pre-RMSNorm block with rotary positions, grouped-query
  // fused causal attention and a SwiGLU MLP (its nine parameters in
  // LlamaBlock's order); the final RMSNorm and the untied head ("norm_g",
  // "w" [d, vocab]).
  std::unique_ptr<Unit> (*llama_embedding)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                           int64_t vocab, int64_t d, int64_t seq_len);
  std::unique_ptr<Unit> (*llama_block)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                       const LlamaShape& shape);
  std::unique_ptr<Unit> (*llama_head)(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                      int64_t vocab, int64_t d, double norm_eps);
};

inline constexpr uint32_t kUnitFactoryVersion = 3;
// The module's one exported symbol: extern "C" const UnitFactory* NAME().
#define TESSERA_CUDA_UNITS_ENTRY tessera_cuda_units_v3

// Whether `host` runs this rank on a CUDA device (host ABI 1.5).
bool wants_cuda(const sdk::Host& host) noexcept;

// The module's factory, loaded once per process: cuda/libtessera_cuda_units.so
// beside the calling model plugin, else as the dynamic linker finds it.
// Throws tessera::Error (unsupported) naming `model` and what failed: the
// module is missing (a build without the CUDA Toolkit), cannot be loaded,
// or has another version.
const UnitFactory& load_units(std::string_view model);

}  // namespace tessera::model::cuda
