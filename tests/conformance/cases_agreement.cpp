// Bitwise agreement: with inputs whose floating-point reduction depends on the
// order of operations, every rank must still end up with bit-identical
// allreduce results (replicated training relies on it). Each rank's result
// bytes are allgathered as u8 and compared with rank 0's; the results must
// also be close to the exact reduction of the rounded inputs.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

constexpr int kAgreementSalt = 100;

// Input of `rank`: noise in [-1, 1) for sum/avg, 1 + noise/8 for prod, so
// products stay near one.
double agreement_input(tessera_reduce_op op, int rank, uint64_t index) noexcept {
  const double noise = noise_value(rank, index, kAgreementSalt + op);
  return op == TESSERA_PROD ? 1.0 + noise / 8.0 : noise;
}

// Exact-as-double reduction of the inputs as stored in `dtype`.
double reference_result(tessera_reduce_op op, tessera_dtype dtype, int size, uint64_t index) {
  TypedBuffer rounded(dtype, 1);
  double acc = op == TESSERA_PROD ? 1.0 : 0.0;
  for (int r = 0; r < size; ++r) {
    rounded.set(0, agreement_input(op, r, index));
    acc = op == TESSERA_PROD ? acc * rounded.get(0) : acc + rounded.get(0);
  }
  return op == TESSERA_AVG ? acc / size : acc;
}

std::string hex_bytes(const std::byte* data, size_t n) {
  std::ostringstream out;
  out << "0x";
  for (size_t k = n; k > 0; --k) {  // little endian: most significant byte last
    out << "0123456789abcdef"[std::to_integer<unsigned>(data[k - 1]) >> 4]
        << "0123456789abcdef"[std::to_integer<unsigned>(data[k - 1]) & 0xfU];
  }
  return out.str();
}

void agree_once(Communicator& comm, tessera_dtype dtype, tessera_reduce_op op, uint64_t n,
                bool in_place) {
  const int size = comm.size();
  const int rank = comm.rank();
  TypedBuffer send(dtype, n);
  fill_with(send, 0, n, [&](uint64_t i) { return agreement_input(op, rank, i); });
  TypedBuffer recv = in_place ? TypedBuffer(dtype, 0) : sentinel_buffer(dtype, n);
  TypedBuffer& result = in_place ? send : recv;
  const OpDesc d{in_place ? "allreduce(in-place, agreement)" : "allreduce(agreement)", dtype, op,
                 n};
  guarded(comm, d, [&] { comm.allreduce(send.view(), result.view(), op); });

  // Close to the exact result: each of the (size - 1) combining steps and
  // the final rounding may add at most a few units of roundoff.
  const double tolerance = 4.0 * size * size * unit_roundoff(dtype);
  for (uint64_t i = 0; i < n; ++i) {
    const double want = reference_result(op, dtype, size, i);
    const double got = result.get(i);
    if (!(std::fabs(got - want) <= tolerance * std::fmax(1.0, std::fabs(want)))) {
      fail_value(comm, d, "beyond tolerance " + std::to_string(tolerance), i, want, got);
    }
  }

  // Bit-identical on every rank.
  const size_t esize = result.element_size();
  const uint64_t nbytes = n * esize;
  TypedBuffer mine(TESSERA_U8, nbytes);
  if (nbytes > 0) std::memcpy(mine.bytes().data(), result.bytes().data(), nbytes);
  TypedBuffer all(TESSERA_U8, nbytes * static_cast<uint64_t>(size));
  const OpDesc gd{"allgather of allreduce result bytes", TESSERA_U8, -1, nbytes};
  guarded(comm, gd, [&] { comm.allgather(mine.view(), all.view()); });
  const std::byte* base = all.bytes().data();
  for (int r = 1; r < size; ++r) {
    const std::byte* other = base + static_cast<uint64_t>(r) * nbytes;
    for (uint64_t i = 0; i < n; ++i) {
      if (std::memcmp(base + i * esize, other + i * esize, esize) != 0) {
        fail(comm, d,
             "rank " + std::to_string(r) + " disagrees with rank 0 at index " + std::to_string(i) +
                 ": rank 0 holds " + hex_bytes(base + i * esize, esize) + ", rank " +
                 std::to_string(r) + " holds " + hex_bytes(other + i * esize, esize));
      }
    }
  }
}

}  // namespace

void bitwise_agreement(Communicator& comm, const CaseParams& p) {
  constexpr tessera_dtype kFloating[] = {TESSERA_F32, TESSERA_F64, TESSERA_F16, TESSERA_BF16};
  constexpr tessera_reduce_op kOps[] = {TESSERA_SUM, TESSERA_AVG, TESSERA_PROD};
  size_t k = 0;
  for (const auto dtype : kFloating) {
    for (const auto op : kOps) {
      agree_once(comm, dtype, op, count_for(p, k), false);
      agree_once(comm, dtype, op, count_for(p, k + 3), true);
      ++k;
    }
  }
}

}  // namespace tessera::conformance
