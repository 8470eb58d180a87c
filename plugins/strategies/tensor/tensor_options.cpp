// Options of the `tensor` strategy (see tensor_options.hpp).
#include "tensor_options.hpp"

#include <algorithm>
#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

TensorOptions TensorOptions::read(const sdk::Options& options, int32_t world_size) {
  TensorOptions o;
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "strategy 'tensor' needs at least one rank, but the world size is ", world_size);
  const int64_t size = options.get_int("size");
  TESSERA_CHECK(size >= 0, TESSERA_ERR_INVALID_ARGUMENT, "tensor: size = ", size,
                " must be >= 1 (or 0: the whole world)");
  o.size = size == 0 ? world_size : static_cast<int32_t>(std::min<int64_t>(size, 1 << 30));
  TESSERA_CHECK(world_size % o.size == 0, TESSERA_ERR_INVALID_ARGUMENT, "tensor: size = ", size,
                " does not divide the world size ", world_size,
                " (world = data-parallel replicas x size)");
  const std::string mode = options.get_string("mode");
  TESSERA_CHECK(mode == "tensor" || mode == "sequence", TESSERA_ERR_INVALID_ARGUMENT,
                "tensor: mode = \"", mode, "\" is not one of tensor, sequence");
  o.sequence = mode == "sequence";
  o.checkpoint_every = sdk::read_activation_checkpointing(options, "tensor");
  return o;
}

}  // namespace tessera::strategies
