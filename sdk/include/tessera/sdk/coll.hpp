// Argument checks and small facts about collectives, shared by every
// backend so that all of them reject the same calls with the same messages.
// The buffer conventions are those of tessera/c/backend.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/c/backend.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// True when the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a
// byte; empty ranges overlap nothing. Compares addresses only.
inline bool buffers_overlap(const void* a, uint64_t a_bytes, const void* b,
                            uint64_t b_bytes) noexcept {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);  // NOLINT: address comparison only
  const auto y = reinterpret_cast<uintptr_t>(b);  // NOLINT
  return x < y + b_bytes && y < x + a_bytes;
}

// True for the operations that combine values with a reduce op.
constexpr bool coll_is_reduction(tessera_coll_type c) noexcept {
  return c == TESSERA_COLL_ALLREDUCE || c == TESSERA_COLL_REDUCE ||
         c == TESSERA_COLL_REDUCE_SCATTER;
}

// True for the operations that take a root.
constexpr bool coll_has_root(tessera_coll_type c) noexcept {
  return c == TESSERA_COLL_BROADCAST || c == TESSERA_COLL_REDUCE || c == TESSERA_COLL_GATHER ||
         c == TESSERA_COLL_SCATTER;
}

// True when `rank` reads args.send for this operation (otherwise send is
// ignored and may be anything).
constexpr bool coll_uses_send(tessera_coll_type c, int32_t rank, int32_t root) noexcept {
  switch (c) {
    case TESSERA_COLL_BROADCAST:
    case TESSERA_COLL_SCATTER:
      return rank == root;
    case TESSERA_COLL_BARRIER:
    case TESSERA_COLL_RECV:
      return false;
    default:
      return true;
  }
}

// True when `rank` writes args.recv for this operation.
constexpr bool coll_uses_recv(tessera_coll_type c, int32_t rank, int32_t root) noexcept {
  switch (c) {
    case TESSERA_COLL_REDUCE:
    case TESSERA_COLL_GATHER:
      return rank == root;
    case TESSERA_COLL_BARRIER:
    case TESSERA_COLL_SEND:
      return false;
    default:
      return true;
  }
}

// The per-rank element count n of backend.h's table, which every rank of
// the group must agree on: e.g. send.count for allgather, recv.count for
// reduce_scatter and scatter, send.count / size for alltoall, 0 for barrier.
// Meaningful for arguments that passed validate_coll_args.
constexpr uint64_t coll_block_count(const tessera_coll_args& a, int32_t size) noexcept {
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_REDUCE:
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_GATHER:
    case TESSERA_COLL_SEND:
      return a.send.count;
    case TESSERA_COLL_BROADCAST:
    case TESSERA_COLL_REDUCE_SCATTER:
    case TESSERA_COLL_SCATTER:
    case TESSERA_COLL_RECV:
      return a.recv.count;
    case TESSERA_COLL_ALLTOALL:
      return size > 0 ? a.send.count / static_cast<uint64_t>(size) : 0;
    default:
      return 0;
  }
}

namespace coll_detail {

inline bool device_accepted(tessera_device_type t, uint32_t caps) noexcept {
  if (t == TESSERA_DEVICE_CPU) return (caps & TESSERA_BACKEND_CAP_CPU_BUFFERS) != 0;
  if (t == TESSERA_DEVICE_CUDA) return (caps & TESSERA_BACKEND_CAP_CUDA_BUFFERS) != 0;
  return false;
}

inline const char* device_name(tessera_device_type t) noexcept {
  return t == TESSERA_DEVICE_CPU ? "cpu" : t == TESSERA_DEVICE_CUDA ? "cuda" : "unknown";
}

// Throws INVALID_ARGUMENT with "<coll> on rank r of n: <what>".
template <typename... Args>
[[noreturn]] void fail(const tessera_coll_args& a, int32_t rank, int32_t size, Args&&... what) {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              ::tessera::detail::concat(coll_name(a.coll), " on rank ", rank, " of ", size, ": ",
                                        std::forward<Args>(what)...));
}

// Checks one buffer the operation uses: dtype, device, data for count > 0.
inline void check_buffer(const tessera_coll_args& a, int32_t rank, int32_t size,
                         const tessera_buffer& b, std::string_view which, uint32_t caps) {
  if (b.dtype < 0 || b.dtype >= TESSERA_DTYPE_COUNT) {
    fail(a, rank, size, which, ".dtype ", b.dtype, " is not a known dtype");
  }
  if (!device_accepted(b.device.type, caps)) {
    fail(a, rank, size, which, " is on a ", device_name(b.device.type), " device (type ",
         b.device.type, ") that this backend does not accept");
  }
  if (b.count > 0 && b.data == nullptr) {
    fail(a, rank, size, which, ".data is null with ", which, ".count = ", b.count);
  }
}

// Checks `got` == `want`; `rule` explains where `want` comes from.
inline void check_count(const tessera_coll_args& a, int32_t rank, int32_t size,
                        std::string_view which, uint64_t got, uint64_t want,
                        std::string_view rule) {
  if (got != want) {
    fail(a, rank, size, which, ".count must be ", rule, " = ", want, ", got ", got);
  }
}

// n * size, failing instead of overflowing.
inline uint64_t times_size(const tessera_coll_args& a, int32_t rank, int32_t size, uint64_t n) {
  const auto p = static_cast<uint64_t>(size);
  if (n > UINT64_MAX / p) fail(a, rank, size, "count ", n, " times group size overflows");
  return n * p;
}

}  // namespace coll_detail

// Checks `args` for the caller `rank` of a group of `size` against the
// conventions of tessera/c/backend.h. `accepted_device_caps` is the mask of
// TESSERA_BACKEND_CAP_CPU_BUFFERS / _CUDA_BUFFERS the backend supports.
// Buffers the operation ignores on this rank are not checked. Throws
// Error(TESSERA_ERR_INVALID_ARGUMENT) naming the collective, the rank and the
// problem: unknown collective, dtype or op; send/recv dtype or device type
// differ; a count that does not fit the collective; null data with count > 0;
// root or peer out of range; peer == rank; negative tag; a device type the
// backend does not accept.
inline void validate_coll_args(const tessera_coll_args& args, int32_t rank, int32_t size,
                               uint32_t accepted_device_caps) {
  using coll_detail::fail;
  const tessera_coll_args& a = args;
  if (a.coll < 0 || a.coll >= TESSERA_COLL_TYPE_COUNT) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat("unknown collective type ", a.coll, " on rank ", rank));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    fail(a, rank, size, "rank is outside the group");
  }
  if (coll_has_root(a.coll) && (a.root < 0 || a.root >= size)) {
    fail(a, rank, size, "root ", a.root, " is out of range [0, ", size, ")");
  }
  if (a.coll == TESSERA_COLL_SEND || a.coll == TESSERA_COLL_RECV) {
    if (a.peer < 0 || a.peer >= size) {
      fail(a, rank, size, "peer ", a.peer, " is out of range [0, ", size, ")");
    }
    if (a.peer == rank) fail(a, rank, size, "peer ", a.peer, " is the calling rank itself");
    if (a.tag < 0) fail(a, rank, size, "tag ", a.tag, " is negative");
  }
  if (coll_is_reduction(a.coll) && (a.op < 0 || a.op >= TESSERA_REDUCE_OP_COUNT)) {
    fail(a, rank, size, "reduce op ", a.op, " is not a known op");
  }
  const bool use_send = coll_uses_send(a.coll, rank, a.root);
  const bool use_recv = coll_uses_recv(a.coll, rank, a.root);
  if (use_send) coll_detail::check_buffer(a, rank, size, a.send, "send", accepted_device_caps);
  if (use_recv) coll_detail::check_buffer(a, rank, size, a.recv, "recv", accepted_device_caps);
  if (use_send && use_recv) {
    if (a.send.dtype != a.recv.dtype) {
      fail(a, rank, size, "send dtype ", dtype_name(a.send.dtype), " differs from recv dtype ",
           dtype_name(a.recv.dtype));
    }
    if (a.send.device.type != a.recv.device.type) {
      fail(a, rank, size, "send is on a ", coll_detail::device_name(a.send.device.type),
           " device but recv on a ", coll_detail::device_name(a.recv.device.type), " device");
    }
  }
  const uint64_t s = a.send.count;
  const uint64_t r = a.recv.count;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_BROADCAST:
      if (use_send) coll_detail::check_count(a, rank, size, "recv", r, s, "send.count");
      break;
    case TESSERA_COLL_REDUCE:
      if (use_recv) coll_detail::check_count(a, rank, size, "recv", r, s, "send.count");
      break;
    case TESSERA_COLL_ALLGATHER:
      coll_detail::check_count(a, rank, size, "recv", r, coll_detail::times_size(a, rank, size, s),
                               "send.count * group size");
      break;
    case TESSERA_COLL_GATHER:
      if (use_recv) {
        coll_detail::check_count(a, rank, size, "recv", r,
                                 coll_detail::times_size(a, rank, size, s),
                                 "send.count * group size");
      }
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
      coll_detail::check_count(a, rank, size, "send", s, coll_detail::times_size(a, rank, size, r),
                               "recv.count * group size");
      break;
    case TESSERA_COLL_SCATTER:
      if (use_send) {
        coll_detail::check_count(a, rank, size, "send", s,
                                 coll_detail::times_size(a, rank, size, r),
                                 "recv.count * group size");
      }
      break;
    case TESSERA_COLL_ALLTOALL:
      coll_detail::check_count(a, rank, size, "recv", r, s, "send.count");
      if (s % static_cast<uint64_t>(size) != 0) {
        fail(a, rank, size, "send.count ", s, " is not a multiple of the group size ", size);
      }
      break;
    default:
      break;
  }
}

}  // namespace tessera::sdk
