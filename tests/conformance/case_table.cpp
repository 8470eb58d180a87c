// The list of every conformance case, for drivers that run them all.
#include <array>

#include "cases.hpp"

namespace tessera::conformance {
namespace {

constexpr std::array kCases{
    CaseInfo{"allreduce", &allreduce, 1,
             "every dtype x op x count, in place and out of place, exact results"},
    CaseInfo{"allreduce_large", &allreduce_large, 1, "f32 allreduce of (1<<20)+3 elements"},
    CaseInfo{"reduce", &reduce, 1, "every dtype x op x count x root"},
    CaseInfo{"reduce_scatter", &reduce_scatter, 1, "every dtype x op x count"},
    CaseInfo{"broadcast", &broadcast, 1,
             "every dtype x count x root, in place and with separate buffers"},
    CaseInfo{"allgather", &allgather, 1, "every dtype x count; blocks in rank order"},
    CaseInfo{"gather", &gather, 1, "every dtype x count x root"},
    CaseInfo{"scatter", &scatter, 1, "every dtype x count x root"},
    CaseInfo{"alltoall", &alltoall, 1, "every dtype x count; block j goes to rank j"},
    CaseInfo{"barrier", &barrier, 1,
             "repeated barriers; a barrier cannot complete before the last rank enters"},
    CaseInfo{"send_recv_ring", &send_recv_ring, 2,
             "isend/irecv around a ring, every dtype x count"},
    CaseInfo{"send_recv_ordered", &send_recv_ordered, 2,
             "blocking send then recv between pairs; messages matched in order"},
    CaseInfo{"send_recv_tags", &send_recv_tags, 2,
             "several tags in flight, received in another order than sent"},
    CaseInfo{"nonblocking", &nonblocking, 1,
             "batches of non-blocking collectives waited in order, out of order, by test()"},
    CaseInfo{"blocking_after_nonblocking", &blocking_after_nonblocking, 1,
             "blocking operations issued while non-blocking ones are pending keep their order"},
    CaseInfo{"split", &split, 1,
             "sub-groups by colour and key, opting out, nested split, parent still usable"},
    CaseInfo{"invalid_arguments", &invalid_arguments, 1,
             "bad counts, roots, peers, tags, dtypes, ops are rejected with a naming error"},
    CaseInfo{"timeout", &timeout, 2,
             "a rank that never joins makes the others time out with an error naming it"},
    CaseInfo{"abort_propagation", &abort_propagation, 1,
             "an abort fails pending and later operations of the group with its reason"},
    CaseInfo{"collective_mismatch", &collective_mismatch, 2,
             "checked layer: other op, count, root, dtype named on every rank; group still usable"},
    CaseInfo{"bitwise_agreement", &bitwise_agreement, 1,
             "floating allreduce results are bit-identical on every rank"},
};

}  // namespace

std::span<const CaseInfo> all_cases() noexcept { return kCases; }

}  // namespace tessera::conformance
