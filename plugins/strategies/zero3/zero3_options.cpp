// Options of the `zero3` strategy (see zero3_options.hpp).
#include "zero3_options.hpp"

#include <string>

#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

Zero3Options Zero3Options::read(const sdk::Options& options) {
  Zero3Options o;
  o.prefetch = options.get_bool("prefetch");
  const std::string dtype = options.get_string("reduce_dtype");
  try {
    o.reduce_dtype = sdk::parse_comm_dtype(dtype, "reduce_dtype");
  } catch (const Error& e) {
    throw Error(e.status(), ::tessera::detail::concat("zero3: ", e.what()));
  }
  return o;
}

}  // namespace tessera::strategies
