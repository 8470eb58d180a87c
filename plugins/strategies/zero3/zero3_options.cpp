// Options of the `zero3` strategy (see zero3_options.hpp).
#include "zero3_options.hpp"

namespace tessera::strategies {

Zero3Options Zero3Options::read(const sdk::Options& options) {
  Zero3Options o;
  o.prefetch = options.get_bool("prefetch");
  return o;
}

}  // namespace tessera::strategies
