#include "group.hpp"

#include <algorithm>
#include <chrono>

#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

std::string_view call_name(int32_t coll) noexcept {
  return coll == kCollSplit ? std::string_view("split") : coll_name(coll);
}

std::string describe(const Call& c) {
  std::string s = detail::concat(call_name(c.coll), "(");
  if (c.coll == kCollSplit) return s + ")";
  if (c.coll != TESSERA_COLL_BARRIER) {
    s += detail::concat("count=", c.count, ", dtype=", dtype_name(c.dtype));
  }
  if (sdk::coll_is_reduction(c.coll)) s += detail::concat(", op=", reduce_op_name(c.op));
  if (sdk::coll_has_root(c.coll)) s += detail::concat(", root=", c.root);
  return s + ")";
}

bool calls_agree(const Call& a, const Call& b) noexcept {
  if (a.coll != b.coll) return false;
  if (a.coll == kCollSplit || a.coll == TESSERA_COLL_BARRIER) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  if (sdk::coll_is_reduction(a.coll) && a.op != b.op) return false;
  if (sdk::coll_has_root(a.coll) && a.root != b.root) return false;
  return true;
}

Group::Group(std::shared_ptr<const Engine> engine, std::vector<int32_t> world_ranks)
    : engine_(std::move(engine)),
      world_ranks_(std::move(world_ranks)),
      size_(static_cast<int32_t>(world_ranks_.size())),
      slots_(world_ranks_.size()),
      arrivals_(static_cast<uint64_t>(world_ranks_.size())) {
  TESSERA_CHECK(size_ >= 1 && static_cast<uint64_t>(size_) <= kCountMask,
                TESSERA_ERR_INVALID_ARGUMENT, "inmemory: unsupported group size ", size_);
  mailboxes_.reserve(world_ranks_.size());
  for (int32_t r = 0; r < size_; ++r)
    mailboxes_.push_back(std::make_unique<Mailbox>(engine_->host));
}

std::string Group::rank_label(int32_t rank) const {
  const int32_t world = world_rank(rank);
  if (world == rank) return detail::concat("rank ", rank);
  return detail::concat("rank ", rank, " (world rank ", world, ")");
}

bool Group::committed(uint64_t seq) const noexcept {
  const uint64_t w = arrivals_.load(std::memory_order_acquire);
  return (w >> kCountBits) == seq && (w & kCountMask) == static_cast<uint64_t>(size_);
}

bool Group::withdraw(uint64_t seq) {
  uint64_t w = arrivals_.load(std::memory_order_acquire);
  for (;;) {
    if ((w >> kCountBits) != seq || (w & kCountMask) == static_cast<uint64_t>(size_)) return false;
    if (arrivals_.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
      return true;
    }
  }
}

std::string Group::missing_ranks(uint64_t seq) const {
  std::vector<int32_t> missing;
  for (int32_t r = 0; r < size_; ++r) {
    if (slots_[r].arrived.load(std::memory_order_acquire) < seq) missing.push_back(r);
  }
  if (missing.empty()) return "every rank arrived but the operation did not commit in time";
  std::string s = missing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(missing[i]);
    if (world_rank(missing[i]) != missing[i]) {
      s += detail::concat(" (world rank ", world_rank(missing[i]), ")");
    }
  }
  return s + " never arrived";
}

void Group::join(int32_t rank, uint64_t seq, const Call& call, Deadline deadline,
                 int64_t timeout_ms) {
  Slot& slot = slots_[rank];
  slot.call = call;
  slot.arrived.store(seq, std::memory_order_release);
  // Every rank left the previous operation, so nobody claims blocks now; the
  // arrival CAS below publishes the reset before the operation can commit.
  next_block_.store(0, std::memory_order_relaxed);
  const auto p = static_cast<uint64_t>(size_);
  uint64_t w = arrivals_.load(std::memory_order_acquire);
  uint64_t next = 0;
  for (;;) {
    const uint64_t ws = w >> kCountBits;
    const uint64_t wc = w & kCountMask;
    if (ws == seq && wc < p) {
      next = w + 1;
    } else if (ws + 1 == seq && wc == p) {
      next = (seq << kCountBits) | 1U;
    } else {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(call_name(call.coll), " #", seq, " on ", rank_label(rank),
                                 ": operation numbers out of step (group is at #", ws, ")"));
    }
    if (arrivals_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
      break;
    }
  }
  if ((next & kCountMask) == p) {
    signal_.notify();
    return;
  }
  signal_.wait([&] { return committed(seq) || fault_.is_set(); }, deadline, spin());
  if (committed(seq) || !withdraw(seq)) return;  // committed: take part in it
  const std::string what = detail::concat(call_name(call.coll), " #", seq, " on ", rank_label(rank),
                                          " of group of ", size_);
  if (!fault_.is_set()) {
    std::string reason =
        detail::concat(call_name(call.coll), " #", seq, " on group of ", size_, " timed out after ",
                       timeout_ms, " ms: ", missing_ranks(seq));
    if (fail(TESSERA_ERR_TIMEOUT, reason)) throw Error(TESSERA_ERR_TIMEOUT, reason);
  }
  fault_.throw_lost(what);
}

std::string Group::check_agreement(uint64_t seq) const {
  // The call most ranks made (the lowest rank's on a tie) is the reference.
  int32_t ref = 0;
  int32_t best = 0;
  for (int32_t i = 0; i < size_; ++i) {
    int32_t n = 0;
    for (int32_t j = 0; j < size_; ++j) n += calls_agree(slots_[i].call, slots_[j].call) ? 1 : 0;
    if (n > best) {
      best = n;
      ref = i;
    }
  }
  if (best == size_) return std::string();
  int32_t odd = -1;
  for (int32_t j = 0; j < size_ && odd < 0; ++j) {
    if (!calls_agree(slots_[ref].call, slots_[j].call)) odd = j;
  }
  const int32_t others = size_ - best - 1;
  std::string msg =
      detail::concat("collective mismatch at operation #", seq, " of group of ", size_, ": ",
                     rank_label(ref), " called ", describe(slots_[ref].call), " but ",
                     rank_label(odd), " called ", describe(slots_[odd].call));
  if (others > 0) msg += detail::concat(" (and ", others, " more rank(s) differ)");
  return msg;
}

void Group::leave(int32_t rank, uint64_t seq) {
  slots_[rank].done.store(seq, std::memory_order_release);
  signal_.notify();
  signal_.wait(
      [&] {
        for (const Slot& s : slots_) {
          if (s.done.load(std::memory_order_acquire) < seq) return false;
        }
        return true;
      },
      Deadline::max(), spin());
}

bool Group::fail(tessera_status status, std::string reason) {
  if (!fault_.set(status, std::move(reason))) return false;
  signal_.notify();
  const std::string message = detail::concat("the group is broken: ", fault_.reason());
  for (auto& m : mailboxes_) m->fail_posted(TESSERA_ERR_PEER_LOST, message);
  std::string members;
  for (int32_t r = 0; r < size_; ++r) {
    members += detail::concat(r == 0 ? "" : ", ", world_ranks_[r]);
  }
  engine_->host.log(TESSERA_LOG_WARN, TESSERA_RANK_UNKNOWN, "inmemory: group of world ranks ",
                    members, " broken: ", fault_.reason());
  return true;
}

void Group::abort(int32_t rank, std::string_view reason) {
  const std::string why = detail::concat(rank_label(rank), " aborted: ", reason);
  engine_->host.log(TESSERA_LOG_DEBUG, world_rank(rank), "inmemory: ", why);
  fail_tree(why);
}

void Group::fail_tree(const std::string& why) {
  fail(TESSERA_ERR_PEER_LOST, why);
  std::vector<std::shared_ptr<Group>> children;
  {
    const std::lock_guard<std::mutex> lock(split_mu_);
    for (const auto& weak : children_) {
      if (auto c = weak.lock()) children.push_back(std::move(c));
    }
  }
  for (const auto& c : children) c->fail_tree(why);
}

std::shared_ptr<Group> Group::split_child(uint64_t seq, int32_t color,
                                          const std::vector<int32_t>& world_ranks) {
  const std::lock_guard<std::mutex> lock(split_mu_);
  auto [it, fresh] = pending_children_.try_emplace({seq, color});
  if (fresh) {
    it->second.group = std::make_shared<Group>(engine_, world_ranks);
    it->second.left = world_ranks.size();
    std::erase_if(children_, [](const auto& weak) { return weak.expired(); });
    children_.push_back(it->second.group);
  }
  std::shared_ptr<Group> g = it->second.group;
  if (--it->second.left == 0) pending_children_.erase(it);
  return g;
}

std::pair<std::shared_ptr<Group>, int32_t> Group::shrink(int32_t rank, int64_t grace_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  const auto list = [](const std::vector<int32_t>& ranks) {
    std::string text;
    for (const int32_t r : ranks) text += detail::concat(text.empty() ? "" : ", ", r);
    return text;
  };
  std::unique_lock<std::mutex> lock(shrink_.mu);
  if (shrink_.called.empty()) shrink_.called.assign(static_cast<size_t>(size_), false);
  TESSERA_CHECK(!shrink_.called[static_cast<size_t>(rank)], TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory comm_shrink: ", rank_label(rank),
                " called it twice on one communicator (call it at most once per communicator)");
  shrink_.called[static_cast<size_t>(rank)] = true;
  ++shrink_.callers;
  shrink_.cv.notify_all();
  if (!shrink_.decided) {
    shrink_.cv.wait_until(lock, deadline,
                          [&] { return shrink_.decided || shrink_.callers == size_; });
  }
  if (!shrink_.decided) {
    std::vector<int32_t> world;
    std::vector<int32_t> missing;  // world ranks
    for (int32_t r = 0; r < size_; ++r) {
      if (shrink_.called[static_cast<size_t>(r)]) {
        shrink_.members.push_back(r);
        world.push_back(world_rank(r));
      } else {
        missing.push_back(world_rank(r));
      }
    }
    shrink_.group = std::make_shared<Group>(engine_, std::move(world));
    shrink_.decided = true;
    shrink_.cv.notify_all();
    engine_->host.log(TESSERA_LOG_INFO, world_rank(rank), "inmemory: group of world ranks ",
                      list(world_ranks_), " re-formed by ", rank_label(rank), " as ranks ",
                      list(shrink_.members), " of it",
                      missing.empty() ? std::string()
                                      : detail::concat(", without world rank(s) ", list(missing)));
  }
  const auto& members = shrink_.members;
  const auto at = std::find(members.begin(), members.end(), rank);
  if (at == members.end()) {
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("inmemory: ", rank_label(rank),
                               " arrived after the survivors of its group of ", size_,
                               " had agreed on ranks [", list(members),
                               "] of it; it is left out of the re-formed group (a survivor "
                               "waits for the others only for the grace after its own call)"));
  }
  return {shrink_.group, static_cast<int32_t>(at - members.begin())};
}

}  // namespace tessera::inmemory
