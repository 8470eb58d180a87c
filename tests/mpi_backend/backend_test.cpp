// Creating and connecting the mpi backend: option checks, the world size
// agreement with mpirun, the rank passed to connect, and refusals of blocks
// MPI cannot express.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "mpi_session.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpitest {
namespace {

// Runs `fn`, which must throw tessera::Error with `status`; returns its text.
template <typename F>
std::string error_of(tessera_status status, F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return {};
}

TEST(MpiBackendOptions, OutOfRangeValuesAreRejectedNamingTheOption) {
  for (const char* bad : {"spin_us=-1", "max_sleep_us=10", "service_poll_ms=0", "stall_query_ms=-5",
                          "chunk_elements=0", "yield_us=-1", "finalize_wait_ms=604800001",
                          "init_timeout_ms=604800001"}) {
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    const std::string message = error_of(TESSERA_ERR_INVALID_ARGUMENT, [&] { open_mpi({bad}); });
    EXPECT_NE(message.find(key), std::string::npos) << bad << ": " << message;
  }
}

TEST(MpiBackendCreate, WorldSizeMustMatchWhatMpirunStarted) {
  const int size = world().size();
  const std::string message = error_of(TESSERA_ERR_INVALID_ARGUMENT,
                                       [&] { open_mpi({}, std::chrono::seconds(10), size + 1); });
  EXPECT_NE(message.find("world_size is " + std::to_string(size + 1)), std::string::npos)
      << message;
  EXPECT_NE(message.find("started " + std::to_string(size)), std::string::npos) << message;
}

TEST(MpiBackendCreate, ConnectRefusesARankOtherThanMpis) {
  auto backend = open_mpi({});
  const int other = world().rank() + 1;
  const std::string message =
      error_of(TESSERA_ERR_INVALID_ARGUMENT, [&] { backend->connect(other); });
  EXPECT_NE(message.find("rank " + std::to_string(other) + " was asked for"), std::string::npos)
      << message;
}

TEST(MpiBackendCreate, SecondBackendGetsItsOwnWorld) {
  auto backend = open_mpi({});
  auto comm = backend->connect(world().rank());
  EXPECT_EQ(comm->rank(), world().rank());
  EXPECT_EQ(comm->size(), world().size());
  std::vector<int64_t> v{comm->rank() + 1};
  comm->allreduce(std::span<int64_t>(v));
  EXPECT_EQ(v[0], int64_t{comm->size()} * (comm->size() + 1) / 2);
}

TEST(MpiLimits, BlocksAboveIntMaxAreRefusedBeforeMpiSeesThem) {
  Communicator& comm = world();
  const auto p = static_cast<uint64_t>(comm.size());
  const uint64_t n = uint64_t{INT_MAX} + 1;
  // Buffers far smaller than the counts claim: the plugin must refuse
  // before reading or writing a byte.
  std::vector<uint8_t> small_send(8);
  std::vector<uint8_t> small_recv(8);
  const tessera_buffer send{small_send.data(), n, TESSERA_U8,
                            tessera_device{TESSERA_DEVICE_CPU, 0}};
  const tessera_buffer recv{small_recv.data(), n * p, TESSERA_U8,
                            tessera_device{TESSERA_DEVICE_CPU, 0}};
  const std::string message =
      error_of(TESSERA_ERR_UNSUPPORTED, [&] { comm.allgather(send, recv); });
  EXPECT_NE(message.find(std::to_string(INT_MAX)), std::string::npos) << message;
  // The world still works: nothing was started.
  std::vector<int32_t> v{1};
  comm.allreduce(std::span<int32_t>(v));
  EXPECT_EQ(v[0], comm.size());
}

}  // namespace
}  // namespace tessera::mpitest
