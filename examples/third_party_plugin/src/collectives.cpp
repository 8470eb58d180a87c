#include "collectives.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include <tessera/sdk/coll.hpp>
#include <tessera/sdk/dtype.hpp>
#include <tessera/sdk/error.hpp>
#include <tessera/sdk/reduce.hpp>

namespace example_threads {
namespace {

namespace sdk = tessera::sdk;
using tessera::Error;

// The dtype of the buffer `rank` uses (send and recv agree when both are).
tessera_dtype call_dtype(const tessera_coll_args& a, int32_t rank) {
  return sdk::coll_uses_send(a.coll, rank, a.root) ? a.send.dtype : a.recv.dtype;
}

// "allreduce(f32, n=16, op=sum)", "broadcast(i32, n=4, root=1)", "comm_split".
std::string describe_call(const tessera_coll_args& a, int32_t rank, int32_t size) {
  if (a.coll == kSplitCall) return "comm_split";
  if (a.coll == TESSERA_COLL_BARRIER) return "barrier";
  std::string out = std::string(tessera::coll_name(a.coll)) + "(" +
                    std::string(tessera::dtype_name(call_dtype(a, rank))) +
                    ", n=" + std::to_string(sdk::coll_block_count(a, size));
  if (sdk::coll_is_reduction(a.coll)) out += ", op=" + std::string(tessera::reduce_op_name(a.op));
  if (sdk::coll_has_root(a.coll)) out += ", root=" + std::to_string(a.root);
  return out + ")";
}

// True when ranks r and q made the same call. Without check_calls only the
// kind of operation is compared.
bool same_call(const tessera_coll_args& x, int32_t r, const tessera_coll_args& y, int32_t q,
               int32_t size, bool check_calls) {
  if (x.coll != y.coll) return false;
  if (!check_calls || x.coll == kSplitCall || x.coll == TESSERA_COLL_BARRIER) return true;
  if (call_dtype(x, r) != call_dtype(y, q)) return false;
  if (sdk::coll_block_count(x, size) != sdk::coll_block_count(y, size)) return false;
  if (sdk::coll_is_reduction(x.coll) && x.op != y.op) return false;
  return !sdk::coll_has_root(x.coll) || x.root == y.root;
}

// Builds the groups of a comm_split from every rank's colour and key.
void build_split_groups(std::vector<Slot>& slots) {
  std::map<int32_t, std::vector<int32_t>> members;  // colour -> ranks, ascending
  for (size_t r = 0; r < slots.size(); ++r) {
    slots[r].child = nullptr;
    slots[r].child_rank = -1;
    if (slots[r].color >= 0) members[slots[r].color].push_back(static_cast<int32_t>(r));
  }
  for (auto& [color, ranks] : members) {
    std::stable_sort(ranks.begin(), ranks.end(), [&](int32_t a, int32_t b) {
      return slots[static_cast<size_t>(a)].key < slots[static_cast<size_t>(b)].key;
    });
    auto group = std::make_shared<Group>(static_cast<int32_t>(ranks.size()));
    for (size_t i = 0; i < ranks.size(); ++i) {
      Slot& slot = slots[static_cast<size_t>(ranks[i])];
      slot.child = group;
      slot.child_rank = static_cast<int32_t>(i);
    }
  }
}

// The settle hook: checks that every rank made the same call as rank 0 and,
// for comm_split, creates the new groups.
SettleHook make_settle(bool check_calls) {
  return [check_calls](std::vector<Slot>& slots) -> std::string {
    const auto size = static_cast<int32_t>(slots.size());
    for (int32_t q = 1; q < size; ++q) {
      const auto& x = slots[0].args;
      const auto& y = slots[static_cast<size_t>(q)].args;
      if (!same_call(x, 0, y, q, size, check_calls)) {
        return "ranks disagree: rank 0 called " + describe_call(x, 0, size) + " but rank " +
               std::to_string(q) + " called " + describe_call(y, q, size);
      }
    }
    if (slots[0].args.coll == kSplitCall) build_split_groups(slots);
    return {};
  };
}

// Meets the other ranks at the first barrier of an operation; throws
// MISMATCH when they did not all make the same call.
void meet(const RankContext& ctx, const std::string& what, const Deadline& deadline) {
  const SettleHook settle = make_settle(ctx.check_calls);
  const std::string verdict =
      ctx.group->arrive_and_wait(ctx.rank, what, deadline, /*abortable=*/true, &settle);
  if (!verdict.empty()) throw Error(TESSERA_ERR_MISMATCH, what + ": " + verdict);
}

// Computes this rank's result of collective `a` into `out`, reading the
// buffers every rank published. `sources` has one entry per rank.
void compute(Group& g, int32_t rank, const tessera_coll_args& a, unsigned char* out,
             std::vector<const void*>& sources) {
  const int32_t size = g.size();
  const uint64_t n = sdk::coll_block_count(a, size);
  const size_t block = static_cast<size_t>(n) * tessera_dtype_size(call_dtype(a, rank));
  if (out == nullptr || block == 0) return;
  const auto send_of = [&](int32_t q) {
    return static_cast<const unsigned char*>(g.slot(q).args.send.data);
  };
  const auto offset = static_cast<size_t>(rank) * block;
  switch (a.coll) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_REDUCE:
    case TESSERA_COLL_REDUCE_SCATTER: {
      const size_t skip = a.coll == TESSERA_COLL_REDUCE_SCATTER ? offset : 0;
      for (int32_t q = 0; q < size; ++q) sources[static_cast<size_t>(q)] = send_of(q) + skip;
      sdk::reduce_sources(out, sources.data(), sources.size(), n, a.send.dtype, a.op);
      return;
    }
    case TESSERA_COLL_BROADCAST:
      std::memcpy(out, send_of(a.root), block);
      return;
    case TESSERA_COLL_SCATTER:
      std::memcpy(out, send_of(a.root) + offset, block);
      return;
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_GATHER:
      for (int32_t q = 0; q < size; ++q) {
        std::memcpy(out + static_cast<size_t>(q) * block, send_of(q), block);
      }
      return;
    case TESSERA_COLL_ALLTOALL:
      for (int32_t q = 0; q < size; ++q) {
        std::memcpy(out + static_cast<size_t>(q) * block, send_of(q) + offset, block);
      }
      return;
    default:
      throw Error(TESSERA_ERR_INTERNAL, "compute: not a data collective");
  }
}

// Scratch memory reported to the host's accounting while it lives.
class TrackedScratch {
 public:
  TrackedScratch(const RankContext& ctx, size_t bytes) : ctx_(ctx), bytes_(bytes) {
    if (bytes_ > 0) track(static_cast<int64_t>(bytes_));
  }
  TrackedScratch(const TrackedScratch&) = delete;
  TrackedScratch& operator=(const TrackedScratch&) = delete;
  ~TrackedScratch() {
    if (bytes_ > 0) track(-static_cast<int64_t>(bytes_));
  }
  unsigned char* data() noexcept { return data_.empty() ? nullptr : data_.data(); }

 private:
  void track(int64_t delta) const {
    ctx_.host.track_memory(ctx_.world_rank, TESSERA_MEM_COMM, delta);
  }

  const RankContext& ctx_;
  size_t bytes_;
  std::vector<unsigned char> data_ = std::vector<unsigned char>(bytes_);
};

}  // namespace

void run_collective(const RankContext& ctx, const tessera_coll_args& a, const std::string& what) {
  const Deadline deadline = ctx.deadline(a.timeout_ms);
  ctx.host.log(TESSERA_LOG_TRACE, ctx.world_rank, what, ": ",
               describe_call(a, ctx.rank, ctx.group->size()));
  Group& g = *ctx.group;
  if (a.coll == TESSERA_COLL_BARRIER) {
    g.slot(ctx.rank).args = a;
    meet(ctx, what, deadline);
    return;
  }
  // Everything that can fail happens before the first barrier or after the
  // second, so a rank that passed the first always reaches the second.
  const bool writes = sdk::coll_uses_recv(a.coll, ctx.rank, a.root);
  TrackedScratch scratch(ctx, writes ? a.recv.count * tessera_dtype_size(a.recv.dtype) : 0);
  std::vector<const void*> sources(static_cast<size_t>(g.size()));
  g.slot(ctx.rank).args = a;
  meet(ctx, what, deadline);
  // A failure is carried as status and message, not as std::exception_ptr
  // (not safe when the plugin's C++ runtime differs from the host's).
  tessera_status failed = TESSERA_OK;
  std::string why;
  try {
    compute(g, ctx.rank, a, scratch.data(), sources);
  } catch (const Error& e) {
    failed = e.status();
    why = e.what();
  }
  g.arrive_and_wait(ctx.rank, what, Deadline{}, /*abortable=*/false, nullptr);
  if (failed != TESSERA_OK) throw Error(failed, what + ": " + why);
  if (scratch.data() != nullptr) {
    std::memcpy(a.recv.data, scratch.data(), a.recv.count * tessera_dtype_size(a.recv.dtype));
  }
}

std::pair<std::shared_ptr<Group>, int32_t> run_split(const RankContext& ctx, int32_t color,
                                                     int32_t key, const std::string& what) {
  Slot& mine = ctx.group->slot(ctx.rank);
  mine.args = tessera_coll_args{};
  mine.args.coll = kSplitCall;
  mine.color = color;
  mine.key = key;
  meet(ctx, what, ctx.deadline(0));
  // Only this rank reads its own slot from here on, so no second barrier.
  return {std::move(mine.child), mine.child_rank};
}

}  // namespace example_threads
