// Verification helpers shared by the conformance cases. Every failure throws
// (tessera::Error when it comes from the backend, std::runtime_error when a
// result is wrong) with a message naming the backend, the rank, the
// operation, dtype, op, count, root/peer/tag where relevant, and for a wrong
// value the index, the expected and the actual value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "buffer.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::conformance {

// One operation (or step) of a case, as shown in failure messages. Fields
// left at -1 are not printed; without a dtype, neither is the count.
struct OpDesc {
  std::string coll;  // e.g. "allreduce(out-of-place)"
  tessera_dtype dtype = -1;
  int op = -1;  // tessera_reduce_op
  uint64_t count = 0;
  int root = -1;
  int peer = -1;
  int tag = -1;

  // "allreduce(out-of-place) dtype=bf16 op=avg count=13 root=2".
  [[nodiscard]] std::string text() const;
};

// "[backend 'inmemory', rank 1 of 4]".
std::string where(const Communicator& comm);

// Throws std::runtime_error("<where> <op>: <problem>").
[[noreturn]] void fail(const Communicator& comm, const OpDesc& op, const std::string& problem);

// Throws std::runtime_error("<where> <case step>: <problem>") for failures
// that are not about one operation's arguments.
[[noreturn]] void fail(const Communicator& comm, std::string_view step, const std::string& problem);

// Rethrows the exception in flight with "<where> <op>: " prepended, keeping
// the status of a tessera::Error.
[[noreturn]] void rethrow_with_context(const Communicator& comm, const OpDesc& op);

// Runs `fn`; any exception it throws is rethrown with the operation's
// context (see rethrow_with_context).
template <typename F>
void guarded(const Communicator& comm, const OpDesc& op, F&& fn) {
  try {
    std::forward<F>(fn)();
  } catch (...) {
    rethrow_with_context(comm, op);
  }
}

// Throws std::runtime_error for a wrong value at `index`; `part` names the
// checked region (e.g. "block 2 (from rank 2)") and may be empty.
[[noreturn]] void fail_value(const Communicator& comm, const OpDesc& op, std::string_view part,
                             uint64_t index, double expected, double got);

// The relative error a result of `op` may carry: zero, except for avg over
// floating dtypes, which the ABI lets a backend compute as a sum of inputs
// scaled by 1/size (NCCL's ncclAvg does): two units in the last place of
// the dtype, relative to max(1, |expected|).
double rounding_tolerance(const OpDesc& op) noexcept;

// Throws (through fail_value) for the first element i in [0, count) where
// got[offset + i] differs from expected(i), an integer or double, by more
// than rounding_tolerance(op) allows.
template <typename Expected>
void expect_values(const Communicator& comm, const OpDesc& op, const TypedBuffer& got,
                   uint64_t offset, uint64_t count, Expected&& expected,
                   std::string_view part = {}) {
  const double tolerance = rounding_tolerance(op);
  for (uint64_t i = 0; i < count; ++i) {
    const auto want = static_cast<double>(expected(i));
    const double have = got.get(offset + i);
    if (have == want) continue;
    if (tolerance == 0.0 || !(std::abs(have - want) <= tolerance * std::max(1.0, std::abs(want)))) {
      fail_value(comm, op, part, offset + i, want, have);
    }
  }
}

// Checks a caught error (or its absence, when both `error` and
// `other_exception` are null) against the expectation of expect_error;
// returns the error's message or throws std::runtime_error.
std::string check_error(const Communicator& comm, const OpDesc& op,
                        std::initializer_list<tessera_status> statuses,
                        std::initializer_list<std::string_view> keywords, const Error* error,
                        const char* other_exception);

// Runs `fn`, which must throw a tessera::Error with one of `statuses` whose
// message contains at least one of `keywords` (compared case-insensitively;
// an empty list accepts any message). Throws std::runtime_error describing
// what happened otherwise. Returns the message.
template <typename F>
std::string expect_error(const Communicator& comm, const OpDesc& op,
                         std::initializer_list<tessera_status> statuses,
                         std::initializer_list<std::string_view> keywords, F&& fn) {
  try {
    std::forward<F>(fn)();
  } catch (const Error& e) {
    return check_error(comm, op, statuses, keywords, &e, nullptr);
  } catch (const std::exception& e) {
    return check_error(comm, op, statuses, keywords, nullptr, e.what());
  }
  return check_error(comm, op, statuses, keywords, nullptr, nullptr);
}

// True if `text` contains `word`, ignoring ASCII case.
bool contains_nocase(std::string_view text, std::string_view word) noexcept;

// True if `text` names rank `rank`: somewhere "rank" or "ranks" is followed
// by a list of numbers (separated by spaces, commas, brackets, colons, '=';
// a closing parenthesis ends the list)
// that contains it, e.g. "waiting for rank 3" or "ranks [1, 3] missing".
bool names_rank(std::string_view text, int rank) noexcept;

}  // namespace tessera::conformance
