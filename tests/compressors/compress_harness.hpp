// Test harness of the compressor plugins: loads them from the build's plugin
// directory through the registry and the host's CompressorPlugin, and
// simulates the ranks of a reduction in one process (see compress_harness.cpp
// for how each kind's reduction is played).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/c/compressor.h"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/compressor_host.hpp"
#include "tessera/sdk/compressor.hpp"

namespace tessera::test {

// The registry over the build's plugin directory (scanned once).
const PluginRegistry& compressor_registry();

// Compressor `name` with `options_toml` (the [compression.options] table as
// TOML text), one instance per rank. Throws tessera::Error when the options
// are refused (by the host's checks or by the plugin's create).
class Compressors {
 public:
  Compressors(const std::string& name, const std::string& options_toml, int ranks = 1);
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(instances_.size()); }
  [[nodiscard]] const tessera_compressor_api* api() const noexcept { return plugin_->api(); }
  [[nodiscard]] tessera_compressor* rank(int r) const { return instances_.at(r)->get(); }
  [[nodiscard]] tessera_compress_kind kind() const { return api()->kind(rank(0)); }
  [[nodiscard]] tessera_dtype wire_dtype() const { return api()->wire_dtype(rank(0)); }

 private:
  std::unique_ptr<train::CompressorPlugin> plugin_;
  std::vector<std::unique_ptr<train::CompressorPlugin::Instance>> instances_;
};

// A bucket description: `elements` values reduced over `world` ranks.
sdk::CompressBucket make_bucket(uint64_t elements, int32_t world, int32_t rank, int32_t index = 0,
                                std::vector<sdk::CompressTensor> tensors = {});

// One bucket state of one rank's compressor, called through the C table;
// a failed call throws tessera::Error with the plugin's message.
class State {
 public:
  State(const Compressors& c, int rank, const sdk::CompressBucket& bucket);
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  State(State&& o) noexcept;
  State& operator=(State&&) = delete;
  ~State();

  [[nodiscard]] uint64_t encoded_bytes() const;
  [[nodiscard]] std::vector<unsigned char> encode(std::span<const float> grads);
  // Elements [offset, offset + count) of the decoded sum of `encodings`.
  [[nodiscard]] std::vector<float> decode(std::span<const unsigned char> in, int32_t encodings,
                                          uint64_t offset, uint64_t count);
  void reduce(std::span<float> grads, const tessera_compress_comm& comm);

 private:
  const tessera_compressor_api* api_;
  tessera_compress_state* s_ = nullptr;
};

// One state per rank for the same bucket layout (rank r's bucket has rank r).
std::vector<State> make_states(const Compressors& c, uint64_t elements, int32_t index = 0,
                               const std::vector<sdk::CompressTensor>& tensors = {});

// A SUMMABLE round: every rank encodes its gradients; the encodings are
// summed element by element in f32 (rank order) and the sum is rounded back
// to the wire dtype, as a backend that accumulates 16-bit values in f32
// does; rank 0 decodes the summed encoding. Returns the decoded sum.
std::vector<float> summable_round(std::vector<State>& states,
                                  const std::vector<std::vector<float>>& grads, tessera_dtype wire);

// A GATHER round: every rank encodes; the encodings are concatenated in rank
// order and every rank decodes the whole bucket from them (the test fails
// unless all ranks decode the same). Returns rank 0's decoded sum;
// `encodings`, when given, receives the concatenated encodings.
std::vector<float> gather_round(std::vector<State>& states,
                                const std::vector<std::vector<float>>& grads,
                                std::vector<unsigned char>* encodings = nullptr);

// What the communicator of a COLLECTIVE round carried.
struct CommLog {
  std::vector<uint64_t> allreduce_counts;  // elements of each allreduce (rank 0's calls)
  uint64_t allgathers = 0;
};

// A COLLECTIVE round: one thread per rank calls `reduce` on its state with
// its gradients (replaced by the result) and a communicator whose
// allreduce sums in rank order (the same bits on every rank) through a
// barrier with a timeout (a missing rank fails the call instead of
// hanging). Throws the first rank's error.
CommLog collective_round(std::vector<State>& states, std::vector<std::vector<float>>& grads);

// Bytes currently reported as TESSERA_MEM_COMM for the calling thread
// (which has no rank: the tracker's unranked slot).
int64_t comm_bytes_tracked();

}  // namespace tessera::test
