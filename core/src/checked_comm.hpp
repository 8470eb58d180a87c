// Checked communicators: a host-side layer between the callers of a backend
// (the host and the strategy plugin) and the backend's own communicator.
//
// Every operation posted through it gets a number and a fingerprint (op,
// dtype, count, reduction, root) and goes into a small ring of recent
// operations per rank, the flight recorder, printed when an operation fails.
// With verification on, the fingerprint of each collective is compared
// across the group before the backend sees the collective: ranks that
// disagree get an error naming both calls instead of whatever the backend
// does with mismatched buffers. The comparison runs on a second
// communicator of the same ranks (the shadow, split off when the layer is
// made), so it never queues behind the data of earlier non-blocking work.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/backend.h"

namespace tessera::detail {

struct CheckSettings {
  bool verify = true;           // compare collectives across ranks before posting them
  std::string backend;          // the backend's name, for messages
  unsigned recorder_size = 32;  // operations the flight recorder keeps
};

// Whether a backend's table has comm_grow (backend 1.4: it admits processes
// into a running group); the checked table offers it only then.
bool has_grow(const tessera_backend_api& api) noexcept;

// The C table of checked communicators over a backend whose own table is
// `inner` (kept by pointer; it must outlive every communicator). `create`,
// `destroy` and `connect` are not offered: communicators come from wrap().
tessera_backend_api checked_api(const tessera_backend_api& inner);

// Takes over `comm` (rank `rank`'s world communicator just connected) and
// returns the checked handle for use with checked_api's table. Collective:
// splits the shadow communicator off `comm`. On failure `comm` is destroyed
// and the error is the backend's (status returned, message set).
// `label` names the communicator in messages ("world").
tessera_status wrap(const tessera_backend_api& inner, tessera_comm* comm,
                    const CheckSettings& settings, const std::string& label, tessera_comm** out);

// The backend's own communicator under a checked handle (for raw calls).
tessera_comm* inner_comm(tessera_comm* checked) noexcept;

// Runs `args` to completion on the backend's communicator without comparing
// it across ranks (it is still numbered and recorded). For the exchanges
// that decide whether the ranks agree at all, which every rank makes first.
tessera_status post_unverified(tessera_comm* checked, const tessera_coll_args* args);

// The flight recorder of `checked` as text, one line per operation, oldest
// first (see docs/training.md).
std::string flight_recorder(tessera_comm* checked);

}  // namespace tessera::detail
