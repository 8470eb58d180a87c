// Small helpers shared by the case files: the dtype and op lists, buffer
// filling, and building raw operation arguments.
#pragma once

#include <array>
#include <cstdint>

#include "buffer.hpp"
#include "cases.hpp"
#include "reference.hpp"
#include "tessera/c/backend.h"

namespace tessera::conformance {

inline constexpr std::array<tessera_dtype, 7> kAllDtypes{
    TESSERA_F32, TESSERA_F64, TESSERA_F16, TESSERA_BF16, TESSERA_I32, TESSERA_I64, TESSERA_U8};

inline constexpr std::array<tessera_reduce_op, 5> kAllOps{TESSERA_SUM, TESSERA_AVG, TESSERA_MIN,
                                                          TESSERA_MAX, TESSERA_PROD};

// Sweeps. Running every dtype x op x count x root combination would take
// thousands of collectives per case, far too slow with four ranks sharing two
// cores; instead a case enumerates its configurations with an index k and
// takes the count (and root) from k, so every dtype, op, count and root is
// exercised and consecutive configurations differ in all of them.

// The count of the k-th configuration: cycles through params.counts.
inline uint64_t count_for(const CaseParams& p, size_t k) noexcept {
  return p.counts.empty() ? 0 : p.counts[k % p.counts.size()];
}

// Calls f(dtype, op, k) for every dtype x op, k counting from 0.
template <typename F>
void for_each_dtype_op(F&& f) {
  size_t k = 0;
  for (const auto dtype : kAllDtypes) {
    for (const auto op : kAllOps) f(dtype, op, k++);
  }
}

// Calls f(dtype, count, k) for 2 * 7 configurations: every dtype twice, with
// the counts cycling so that each count meets at least two dtypes.
template <typename F>
void for_each_dtype_count(const CaseParams& p, F&& f) {
  const size_t n = kAllDtypes.size();
  for (size_t k = 0; k < 2 * n; ++k) f(kAllDtypes[k % n], count_for(p, k + k / n), k);
}

// Sets buf[offset + i] = value(i) for i in [0, count).
template <typename Value>
void fill_with(TypedBuffer& buf, uint64_t offset, uint64_t count, Value&& value) {
  for (uint64_t i = 0; i < count; ++i) buf.set(offset + i, static_cast<double>(value(i)));
}

// A buffer of `count` elements holding `rank`'s reduction input for `op`,
// element i being the input at global index first_index + i.
inline TypedBuffer reduction_buffer(tessera_reduce_op op, tessera_dtype dtype, int size, int rank,
                                    uint64_t count, uint64_t first_index = 0) {
  TypedBuffer buf(dtype, count);
  fill_with(buf, 0, count,
            [&](uint64_t i) { return reduction_input(op, dtype, size, rank, first_index + i); });
  return buf;
}

// A buffer of `count` elements holding data_value(source, i, salt).
inline TypedBuffer data_buffer(tessera_dtype dtype, uint64_t count, int source, int salt) {
  TypedBuffer buf(dtype, count);
  fill_with(buf, 0, count, [&](uint64_t i) { return data_value(source, i, salt); });
  return buf;
}

// A buffer of `count` elements all equal to kSentinel.
inline TypedBuffer sentinel_buffer(tessera_dtype dtype, uint64_t count) {
  TypedBuffer buf(dtype, count);
  buf.fill(static_cast<double>(kSentinel));
  return buf;
}

// Raw arguments for `coll` with the given buffers; every other field zero
// (timeout 0: the communicator's default).
inline tessera_coll_args make_args(tessera_coll_type coll, const tessera_buffer& send,
                                   const tessera_buffer& recv) noexcept {
  tessera_coll_args args{};
  args.struct_size = sizeof args;
  args.coll = coll;
  args.send = send;
  args.recv = recv;
  return args;
}

}  // namespace tessera::conformance
