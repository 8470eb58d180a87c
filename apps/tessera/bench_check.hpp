// The correctness pass of the collective benchmark: a known input pattern
// per rank and element, and a count of received elements that differ from a
// reference computed on the host.
//
// Inputs are small integers so that sums and products are exact in every
// dtype (f16/bf16 included); only avg of floating types is compared with a
// tolerance (a relative error of a few units in the last place of the type).
#pragma once

#include <cstdint>
#include <vector>

#include "bench_ops.hpp"

namespace tessera::cli {

// What one rank ran: op, element type, reduction, group size and buffers.
struct CheckCase {
  tessera_coll_type op = TESSERA_COLL_ALLREDUCE;
  tessera_dtype dtype = TESSERA_F32;
  tessera_reduce_op redop = TESSERA_SUM;
  int ranks = 1;
  OpLayout layout;
};

// Reference values of one case, shared by all ranks (read-only after
// construction, so safe to use from every rank thread).
class CheckReference {
 public:
  explicit CheckReference(const CheckCase& c);

  // Writes rank `rank`'s input into `send` (layout.send_count elements of
  // the case's dtype).
  void fill_input(int rank, void* send) const;

  // Writes a value that no correct result of this benchmark holds (-1, or
  // 255 for u8) into `count` elements at `data`.
  void fill_sentinel(void* data, uint64_t count) const;

  // Number of elements of rank `rank`'s result that differ from the
  // reference: `result` is the receive buffer (the single buffer for
  // in-place ops). Ranks whose result is undefined (non-root ranks of reduce
  // and gather) check nothing and return 0.
  [[nodiscard]] uint64_t count_wrong(int rank, const void* result) const;

  // Input element `index` of rank `rank`'s send buffer.
  [[nodiscard]] double input(int rank, uint64_t index) const noexcept;

 private:
  // Expected value of result element `k` on `rank`.
  [[nodiscard]] double expected(int rank, uint64_t k) const noexcept;
  CheckCase case_;
  std::vector<double> reduced_;  // reduction over ranks of input(., j), by j mod period
};

}  // namespace tessera::cli
