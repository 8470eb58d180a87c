// Test main for the mpi backend tests: every rank (one process each, under
// mpirun, or a single process alone) runs the same tests in the same order;
// MPI is finalized after the last one.
#include <gtest/gtest.h>

#include "mpi_session.hpp"
#include "tessera/core/logging.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tessera::init_logging("error");
  tessera::mpitest::world();  // starts MPI before any test
  const int result = RUN_ALL_TESTS();
  tessera::mpitest::close_world();
  return result;
}
