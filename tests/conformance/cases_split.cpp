// Sub-groups: splitting by colour (even/odd ranks), ordering by key (reversed
// order), opting out with colour -1, splitting a sub-group again, and using
// the parent while and after sub-groups exist. Collectives on a sub-group
// carry world ranks as payload, so membership and order are both verified.
#include <memory>
#include <string>
#include <vector>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// Checks the sub-group's rank and size, then that an allgather of world ranks
// yields `members` (world ranks in sub-group order) and that an allreduce
// sums them.
void verify_group(Communicator& world, Communicator& sub, const std::vector<int>& members,
                  const std::string& step) {
  const std::string what = step + " (world rank " + std::to_string(world.rank()) + ")";
  const int expected_size = static_cast<int>(members.size());
  int expected_rank = -1;
  for (int k = 0; k < expected_size; ++k) {
    if (members[static_cast<size_t>(k)] == world.rank()) expected_rank = k;
  }
  if (sub.size() != expected_size || sub.rank() != expected_rank) {
    fail(world, what,
         "expected rank " + std::to_string(expected_rank) + " of " + std::to_string(expected_size) +
             ", got rank " + std::to_string(sub.rank()) + " of " + std::to_string(sub.size()));
  }
  TypedBuffer mine(TESSERA_I64, 1);
  mine.set(0, world.rank());
  TypedBuffer all = sentinel_buffer(TESSERA_I64, members.size());
  const OpDesc gd{what + ": allgather of world ranks", TESSERA_I64, -1, 1};
  guarded(sub, gd, [&] { sub.allgather(mine.view(), all.view()); });
  expect_values(sub, gd, all, 0, members.size(), [&](uint64_t i) { return members[i]; });

  TypedBuffer sum(TESSERA_I64, 1);
  sum.set(0, world.rank());
  int64_t expected_sum = 0;
  for (const int m : members) expected_sum += m;
  const OpDesc sd{what + ": allreduce of world ranks", TESSERA_I64, TESSERA_SUM, 1};
  guarded(sub, sd, [&] { sub.allreduce(sum.view(), sum.view(), TESSERA_SUM); });
  expect_values(sub, sd, sum, 0, 1, [&](uint64_t) { return expected_sum; });
}

// An allreduce on the parent, to show it still works.
void verify_parent(Communicator& world, const std::string& when) {
  const int size = world.size();
  TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_I32, size, world.rank(), 13);
  const OpDesc d{"allreduce on the parent " + when, TESSERA_I32, TESSERA_SUM, 13};
  guarded(world, d, [&] { world.allreduce(buf.view(), buf.view(), TESSERA_SUM); });
  expect_values(world, d, buf, 0, 13,
                [&](uint64_t i) { return reduction_expected(TESSERA_SUM, TESSERA_I32, size, i); });
}

std::unique_ptr<Communicator> do_split(Communicator& comm, int color, int key,
                                       const std::string& what) {
  std::unique_ptr<Communicator> sub;
  guarded(comm,
          OpDesc{what + " (color " + std::to_string(color) + ", key " + std::to_string(key) + ")"},
          [&] { sub = comm.split(color, key); });
  if (color >= 0 && !sub)
    fail(comm, what, "got no communicator for color " + std::to_string(color));
  if (color < 0 && sub) fail(comm, what, "got a communicator although color was negative");
  return sub;
}

}  // namespace

void split(Communicator& comm, const CaseParams& /*p*/) {
  const int size = comm.size();
  const int rank = comm.rank();

  // Even and odd ranks, in world order.
  auto parity = do_split(comm, rank % 2, rank, "split(even/odd)");
  std::vector<int> same_parity;
  for (int r = rank % 2; r < size; r += 2) same_parity.push_back(r);
  verify_group(comm, *parity, same_parity, "split(even/odd)");
  verify_parent(comm, "while the even/odd groups exist");

  // Everyone in one group, ordered by a key that reverses the world order.
  auto reversed = do_split(comm, 0, size - 1 - rank, "split(reversed)");
  std::vector<int> reversed_order;
  for (int r = size - 1; r >= 0; --r) reversed_order.push_back(r);
  verify_group(comm, *reversed, reversed_order, "split(reversed)");

  // Groups are independent: the even group runs one more operation than the
  // odd group, interleaved with operations on the parent.
  if (rank % 2 == 0) verify_group(comm, *parity, same_parity, "split(even/odd) again");
  verify_parent(comm, "between sub-group operations");
  verify_group(comm, *reversed, reversed_order, "split(reversed) again");

  // A sub-group split again: each parity group reversed by key.
  auto nested = do_split(*parity, 0, parity->size() - 1 - parity->rank(), "split(nested)");
  const std::vector<int> nested_order(same_parity.rbegin(), same_parity.rend());
  verify_group(comm, *nested, nested_order, "split(nested)");

  // The last rank opts out with colour -1; the others keep their order.
  auto opt_out = do_split(comm, rank == size - 1 ? -1 : 5, 0, "split(last rank opts out)");
  if (opt_out) {
    std::vector<int> members;
    for (int r = 0; r < size - 1; ++r) members.push_back(r);
    verify_group(comm, *opt_out, members, "split(last rank opts out)");
  }

  nested.reset();
  parity.reset();
  reversed.reset();
  opt_out.reset();
  verify_parent(comm, "after the sub-groups were destroyed");
  guarded(comm, OpDesc{"barrier after split"}, [&] { comm.barrier(); });
}

}  // namespace tessera::conformance
