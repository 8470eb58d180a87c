// Opening the mpi backend from the build tree for the tests, and the world
// communicator they share.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/comm.hpp"

namespace tessera::mpitest {

// A new mpi backend with the given "key=value" options (finalize = false is
// added, so MPI keeps running for the world backend), operation timeout and
// world size (-1: whatever mpirun started). Throws what the plugin throws.
std::unique_ptr<Backend> open_mpi(std::vector<std::string> options,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                  int world_size = -1);

// The world communicator of a backend kept for the whole run (created on
// first use, with finalize = true so that close_world() finalizes MPI).
Communicator& world();

// Destroys the world communicator and its backend (finalizing MPI if the
// plugin started it). Call once, at the end of main().
void close_world();

}  // namespace tessera::mpitest
