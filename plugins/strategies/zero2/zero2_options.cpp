// Options of the `zero2` strategy (see zero2_options.hpp).
#include "zero2_options.hpp"

#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

Zero2Options Zero2Options::read(const sdk::Options& options) {
  Zero2Options o;
  o.overlap = options.get_bool("overlap");
  o.reduce_dtype = sdk::read_comm_dtype(options, "reduce_dtype");
  return o;
}

}  // namespace tessera::strategies
