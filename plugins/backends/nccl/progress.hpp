// What the ranks of an NCCL group tell each other through the rendezvous
// store while an operation hangs. NCCL itself cannot say which peer never
// came, and ncclCommAbort ends only this process's communicator; so a rank
// whose operation has waited a while writes that it is there, and a rank
// that aborts a group writes why. Another rank that waits then learns who
// never arrived (for its timeout message) and whether the group was
// aborted (failing at once with the aborter's reason). No CUDA here, so it
// is tested without a GPU.
//
// Keys, under the group's key ("<run id>/nccl/c0/w" for a world, then
// "/s<split number>/c<colour>" per split):
//   <group>/at/<seq>/<rank>   rank <rank> is waiting in collective #<seq>
//   <group>/aborted           "rank <r>: <reason>" of the first abort
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/sdk/store.hpp"

namespace tessera::nccl_backend {

class ProgressBoard {
 public:
  // `open` makes the board's own store client, on first use (the board is
  // used from the watchdog's thread and from abort, apart from connect's).
  explicit ProgressBoard(std::function<std::unique_ptr<sdk::Store>()> open)
      : open_(std::move(open)) {}

  // Rank `rank` of `group` is waiting in collective #`seq`.
  void arrived(const std::string& group, int32_t rank, uint64_t seq);
  // The ranks of `group` (of `size`, `self` left out) that have not written
  // that they are waiting in collective #`seq`, ascending.
  std::vector<int32_t> absent(const std::string& group, int32_t size, int32_t self, uint64_t seq);
  // Rank `rank` aborts `group` for `reason`; the first abort is kept.
  void abort(const std::string& group, int32_t rank, const std::string& reason);
  // "rank <r>: <reason>" when a rank aborted `group`.
  std::optional<std::string> aborted(const std::string& group);

  // The store could not be opened or read: why (the board then says
  // nothing: no rank absent, no abort), or "" while it works.
  [[nodiscard]] std::string trouble();

 private:
  // The store, opened on first use; null after it failed.
  sdk::Store* store_locked();

  std::function<std::unique_ptr<sdk::Store>()> open_;
  std::mutex mu_;
  std::unique_ptr<sdk::Store> store_;
  bool opened_ = false;
  std::string trouble_;
};

// " (rank 3 never arrived)" / " (ranks 1, 2 never arrived)", or "" for none.
std::string absent_text(const std::vector<int32_t>& ranks);

}  // namespace tessera::nccl_backend
