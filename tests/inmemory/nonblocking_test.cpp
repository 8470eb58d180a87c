// Non-blocking operations: posting order, waiting in and out of order,
// test() polling, blocking calls after non-blocking ones, wait timeouts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace tessera::test {
namespace {

using ::testing::HasSubstr;

TEST(NonBlocking, OperationsTakeEffectInPostingOrder) {
  BackendConfig config;
  config.world_size = 3;
  run_ok(config, [](Comm& comm) {
    const int32_t p = comm.size();
    // Chain on one buffer: sum, then max, then a blocking sum. Only the
    // posting order gives the expected values.
    std::vector<int32_t> x(1001, comm.rank() + 1);
    std::vector<int32_t> gathered(3 * static_cast<size_t>(p), -1);
    std::vector<int32_t> mine = {comm.rank(), comm.rank(), comm.rank()};
    Work w1 = comm.start(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));  // 6
    Work w2 = comm.start(args(TESSERA_COLL_ALLGATHER, buf(mine), buf(gathered)));
    Work w3 = comm.start(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x), TESSERA_PROD));  // 216
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));                            // 648
    // Out of order on purpose.
    w3.wait();
    w1.wait();
    while (!w2.test()) std::this_thread::yield();
    for (const int32_t v : x) {
      if (v != 648) throw std::runtime_error("non-blocking chain gave " + std::to_string(v));
    }
    for (int32_t r = 0; r < p; ++r) {
      if (gathered[static_cast<size_t>(r) * 3] != r) throw std::runtime_error("bad allgather");
    }
  });
}

TEST(NonBlocking, ManyInFlightThenWaitAll) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    constexpr int kOps = 16;
    std::vector<std::vector<float>> data(kOps, std::vector<float>(257));
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) {
      std::fill(data[i].begin(), data[i].end(), static_cast<float>(i + comm.rank()));
      works.push_back(comm.start(args(TESSERA_COLL_ALLREDUCE, buf(data[i]), buf(data[i]))));
    }
    for (int i = kOps - 1; i >= 0; --i) works[static_cast<size_t>(i)].wait();
    for (int i = 0; i < kOps; ++i) {
      const float want = static_cast<float>(4 * i + 6);
      if (data[i][256] != want) throw std::runtime_error("wrong result of op " + std::to_string(i));
    }
  });
}

TEST(NonBlocking, WaitWithTimeoutLeavesTheOperationRunning) {
  BackendConfig config;
  config.world_size = 2;
  std::atomic<bool> first_wait_done{false};
  std::string timeout_message;
  run_ok(config, [&](Comm& comm) {
    std::vector<float> x(10, 1.0F);
    if (comm.rank() == 0) {
      Work w = comm.start(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
      try {
        w.wait(20);
        throw std::runtime_error("wait(20) returned although rank 1 had not arrived");
      } catch (const Error& e) {
        if (e.status() != TESSERA_ERR_TIMEOUT) throw;
        timeout_message = e.what();
      }
      first_wait_done = true;
      w.wait();
    } else {
      while (!first_wait_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      comm.run(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
    }
    if (x[0] != 2.0F) throw std::runtime_error("allreduce after a wait timeout is wrong");
  });
  EXPECT_THAT(timeout_message, HasSubstr("still running after 20 ms"));
}

TEST(NonBlocking, SplitWaitsForQueuedOperations) {
  BackendConfig config;
  config.world_size = 4;
  run_ok(config, [](Comm& comm) {
    std::vector<int32_t> x(100, 1);
    Work w = comm.start(args(TESSERA_COLL_ALLREDUCE, buf(x), buf(x)));
    auto sub = comm.split(comm.rank() / 2, comm.rank());
    w.wait();
    std::vector<int32_t> y(3, comm.rank());
    sub->run(args(TESSERA_COLL_ALLREDUCE, buf(y), buf(y)));
    const int32_t want = comm.rank() < 2 ? 1 : 5;
    if (x[0] != 4 || y[0] != want) throw std::runtime_error("split after non-blocking op broke");
  });
}

}  // namespace
}  // namespace tessera::test
