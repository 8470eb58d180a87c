// Options of the `zero3` strategy (see zero3_options.hpp).
#include "zero3_options.hpp"

#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

Zero3Options Zero3Options::read(const sdk::Options& options) {
  Zero3Options o;
  o.prefetch = options.get_bool("prefetch");
  o.reduce_dtype = sdk::read_comm_dtype(options, "reduce_dtype", "zero3");
  return o;
}

}  // namespace tessera::strategies
