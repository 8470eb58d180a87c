// Options of the `zero2` strategy (see zero2_options.hpp).
#include "zero2_options.hpp"

#include "tessera/sdk/comm_dtype.hpp"

namespace tessera::strategies {

Zero2Options Zero2Options::read(const sdk::Options& options) {
  Zero2Options o;
  o.overlap = options.get_bool("overlap");
  o.reduce_dtype = sdk::parse_comm_dtype(options.get_string("reduce_dtype"), "reduce_dtype");
  return o;
}

}  // namespace tessera::strategies
