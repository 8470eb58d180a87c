// The host API table handed to plugins: every field filled, per-thread
// errors, option accessors, logging with an explicit rank, memory tracking.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/device.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/options.hpp"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera {
namespace {

class HostApi : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)take_thread_error();
    init_logging("info");
  }
  void TearDown() override { init_logging("info"); }
  HostContext host_{"backend.hosttest"};
  const tessera_host_api* api_ = host_.api();
};

TEST_F(HostApi, EveryFieldIsFilled) {
  EXPECT_EQ(api_->struct_size, sizeof(tessera_host_api));
  EXPECT_EQ(api_->abi_major, TESSERA_ABI_MAJOR);
  EXPECT_EQ(api_->abi_minor, TESSERA_ABI_MINOR);
  EXPECT_EQ(api_->ctx, &host_);
  EXPECT_NE(api_->log, nullptr);
  EXPECT_NE(api_->log_level, nullptr);
  EXPECT_NE(api_->set_error, nullptr);
  EXPECT_NE(api_->mem_track, nullptr);
  EXPECT_NE(api_->option_bool, nullptr);
  EXPECT_NE(api_->option_int, nullptr);
  EXPECT_NE(api_->option_float, nullptr);
  EXPECT_NE(api_->option_string, nullptr);
  EXPECT_NE(api_->thread_rank, nullptr);
  EXPECT_NE(api_->vec_fill, nullptr);
  EXPECT_NE(api_->vec_scale, nullptr);
  EXPECT_NE(api_->vec_sum_squares, nullptr);
  EXPECT_NE(api_->compute_tf32, nullptr);
  EXPECT_TRUE(sdk::Host(api_).has_vector_passes());
  EXPECT_EQ(host_.logger()->name(), "backend.hosttest");
}

// run.precision = "tf32": f32 data (compute_precision) multiplied in TF32
// (compute_tf32, ABI 1.9), for the run's scope only; a host older than 1.9
// never asks for TF32.
TEST_F(HostApi, ComputeTf32FollowsTheRunsPrecision) {
  const sdk::Host host(api_);
  EXPECT_FALSE(host.compute_tf32());
  {
    const RunDeviceGuard run(ComputeDevice::cpu, ComputePrecision::tf32);
    EXPECT_TRUE(host.compute_tf32());
    EXPECT_EQ(host.compute_precision(), TESSERA_F32);
    tessera_host_api older = *api_;
    older.struct_size = offsetof(tessera_host_api, compute_tf32);
    EXPECT_FALSE(sdk::Host(&older).compute_tf32());
  }
  EXPECT_FALSE(host.compute_tf32());
  const RunDeviceGuard bf16(ComputeDevice::cpu, ComputePrecision::bf16);
  EXPECT_FALSE(host.compute_tf32());
  EXPECT_EQ(host.compute_precision(), TESSERA_BF16);
}

TEST_F(HostApi, ErrorsAreKeptPerThreadAndTakenOnce) {
  api_->set_error(api_->ctx, TESSERA_ERR_TIMEOUT, "rank 3 did not arrive");
  std::string other_thread = "unset";
  std::thread([&] {
    other_thread = take_thread_error();  // nothing was set on this thread
    api_->set_error(api_->ctx, TESSERA_ERR_MISMATCH, "other thread's error");
  }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_EQ(take_thread_error(), "rank 3 did not arrive");
  EXPECT_EQ(take_thread_error(), "");  // cleared
}

TEST_F(HostApi, ThrowIfFailedUsesTheMessageOrTheStatusName) {
  EXPECT_NO_THROW(throw_if_failed(TESSERA_OK, "allreduce"));
  api_->set_error(api_->ctx, TESSERA_ERR_TIMEOUT, "peer 1 timed out after 5 s");
  try {
    throw_if_failed(TESSERA_ERR_TIMEOUT, "allreduce on rank 0");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_TIMEOUT);
    EXPECT_EQ(std::string(e.what()), "allreduce on rank 0: peer 1 timed out after 5 s");
  }
  try {
    throw_if_failed(TESSERA_ERR_PEER_LOST, "barrier");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
    EXPECT_EQ(std::string(e.what()), "barrier: peer lost");
  }
}

TEST_F(HostApi, AStaleMessageIsDroppedAfterASuccessfulCall) {
  api_->set_error(api_->ctx, TESSERA_ERR_INTERNAL, "stale");
  throw_if_failed(TESSERA_OK, "first call");
  try {
    throw_if_failed(TESSERA_ERR_UNSUPPORTED, "second call");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "second call: unsupported");
  }
}

TEST_F(HostApi, OptionAccessorsReadByDeclaredType) {
  tessera_options opts;
  opts.values = {
      {"flag", true}, {"count", int64_t{7}}, {"ratio", 0.25}, {"algo", std::string("ring")}};
  int32_t b = 0;
  int64_t i = 0;
  double d = 0;
  const char* s = nullptr;
  EXPECT_EQ(api_->option_bool(api_->ctx, &opts, "flag", &b), TESSERA_OK);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(api_->option_int(api_->ctx, &opts, "count", &i), TESSERA_OK);
  EXPECT_EQ(i, 7);
  EXPECT_EQ(api_->option_float(api_->ctx, &opts, "ratio", &d), TESSERA_OK);
  EXPECT_DOUBLE_EQ(d, 0.25);
  EXPECT_EQ(api_->option_float(api_->ctx, &opts, "count", &d), TESSERA_OK);  // int as float
  EXPECT_DOUBLE_EQ(d, 7.0);
  EXPECT_EQ(api_->option_string(api_->ctx, &opts, "algo", &s), TESSERA_OK);
  EXPECT_STREQ(s, "ring");

  EXPECT_EQ(api_->option_int(api_->ctx, &opts, "ratio", &i), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_bool(api_->ctx, &opts, "count", &b), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_string(api_->ctx, &opts, "flag", &s), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_float(api_->ctx, &opts, "algo", &d), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_int(api_->ctx, &opts, "missing", &i), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_int(api_->ctx, nullptr, "count", &i), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api_->option_int(api_->ctx, &opts, nullptr, &i), TESSERA_ERR_INVALID_ARGUMENT);
}

TEST_F(HostApi, SdkOptionsWorkOnResolvedOptions) {
  const tessera_option_decl decls[] = {{"bucket_mb", TESSERA_OPT_INT, "25", "h"},
                                       {"algo", TESSERA_OPT_STRING, "ring", "h"}};
  const OptionValues values = resolve_options(decls, nullptr, "test");
  const sdk::Options opts(api_, &values);
  EXPECT_EQ(opts.get_int("bucket_mb"), 25);
  EXPECT_DOUBLE_EQ(opts.get_float("bucket_mb"), 25.0);
  EXPECT_EQ(opts.get_string("algo"), "ring");
  EXPECT_THROW((void)opts.get_bool("algo"), Error);
}

TEST_F(HostApi, LogShowsTheExplicitRankElseTheThreadRank) {
  ::testing::internal::CaptureStderr();
  {
    const ThreadRankGuard guard(1);
    api_->log(api_->ctx, TESSERA_LOG_INFO, 3, "explicit rank");
    api_->log(api_->ctx, TESSERA_LOG_WARN, TESSERA_RANK_UNKNOWN, "thread rank");
    EXPECT_EQ(thread_rank(), 1);  // restored after the explicit-rank line
  }
  api_->log(api_->ctx, TESSERA_LOG_DEBUG, 0, "below the level");
  api_->log(api_->ctx, TESSERA_LOG_ERROR, TESSERA_RANK_UNKNOWN, nullptr);
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[backend.hosttest] [rank 3] explicit rank"), std::string::npos) << out;
  EXPECT_NE(out.find("[backend.hosttest] [rank 1] thread rank"), std::string::npos) << out;
  EXPECT_EQ(out.find("below the level"), std::string::npos) << out;
  EXPECT_NE(out.find("[backend.hosttest] [rank -] \n"), std::string::npos) << out;
}

TEST_F(HostApi, LogLevelFollowsTheLogger) {
  EXPECT_EQ(api_->log_level(api_->ctx), TESSERA_LOG_INFO);
  init_logging("debug");
  EXPECT_EQ(api_->log_level(api_->ctx), TESSERA_LOG_DEBUG);
  init_logging("off");
  const sdk::Host host(api_);
  EXPECT_FALSE(host.enabled(TESSERA_LOG_CRITICAL));
}

TEST_F(HostApi, ThreadRankIsTheLoggingRank) {
  EXPECT_EQ(api_->thread_rank(api_->ctx), TESSERA_RANK_UNKNOWN);
  const ThreadRankGuard guard(4);
  EXPECT_EQ(api_->thread_rank(api_->ctx), 4);
}

TEST_F(HostApi, MemTrackFeedsTheTrackerWithPeaks) {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.reset(4);
  api_->mem_track(api_->ctx, 2, TESSERA_MEM_COMM, 1000);
  api_->mem_track(api_->ctx, 2, TESSERA_MEM_COMM, 500);
  api_->mem_track(api_->ctx, 2, TESSERA_MEM_COMM, -1200);
  {
    const ThreadRankGuard guard(3);  // TESSERA_RANK_UNKNOWN: the thread's rank
    api_->mem_track(api_->ctx, TESSERA_RANK_UNKNOWN, TESSERA_MEM_PARAMS, 64);
  }
  api_->mem_track(api_->ctx, TESSERA_RANK_UNKNOWN, TESSERA_MEM_OTHER, 8);  // no rank: unranked
  const MemoryStats s2 = tracker.stats(2);
  EXPECT_EQ(s2.current[TESSERA_MEM_COMM], 300);
  EXPECT_EQ(s2.peak[TESSERA_MEM_COMM], 1500);
  EXPECT_EQ(tracker.stats(3).current[TESSERA_MEM_PARAMS], 64);
  EXPECT_EQ(tracker.stats(-1).current[TESSERA_MEM_OTHER], 8);
  tracker.reset(1);
}

// ABI 1.7: on a CPU run (and for any host memory) the passes are the SDK's
// CPU loops, bit for bit.
TEST_F(HostApi, VectorPassesWorkOnHostMemoryAsTheSdkLoops) {
  std::vector<float> x(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0F;
  double total = -1.0;
  ASSERT_EQ(api_->vec_sum_squares(api_->ctx, x.data(), x.size(), &total), TESSERA_OK);
  const double expected = sdk::sum_squares(x);
  EXPECT_EQ(std::memcmp(&total, &expected, sizeof(double)), 0) << total << " vs " << expected;

  std::vector<float> scaled = x;
  ASSERT_EQ(api_->vec_scale(api_->ctx, scaled.data(), scaled.size(), 0.25F), TESSERA_OK);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(scaled[i], x[i] * 0.25F) << "element " << i;

  ASSERT_EQ(api_->vec_fill(api_->ctx, scaled.data(), scaled.size(), 7.5F), TESSERA_OK);
  for (const float v : scaled) ASSERT_EQ(v, 7.5F);

  // Nothing to do: no buffer needed.
  EXPECT_EQ(api_->vec_fill(api_->ctx, nullptr, 0, 1.0F), TESSERA_OK);
  EXPECT_EQ(api_->vec_sum_squares(api_->ctx, nullptr, 0, &total), TESSERA_OK);
  EXPECT_EQ(total, 0.0);
}

TEST_F(HostApi, VectorPassesRefuseNullBuffersNamingTheCall) {
  EXPECT_EQ(api_->vec_fill(api_->ctx, nullptr, 3, 0.0F), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(api_->last_error(api_->ctx))
                .rfind("vec_fill of 3 elements: the buffer is NULL", 0),
            0U)
      << api_->last_error(api_->ctx);
  EXPECT_EQ(api_->vec_scale(api_->ctx, nullptr, 2, 2.0F), TESSERA_ERR_INVALID_ARGUMENT);
  float one = 1.0F;
  EXPECT_EQ(api_->vec_sum_squares(api_->ctx, &one, 1, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(api_->last_error(api_->ctx))
                .rfind("vec_sum_squares of 1 elements: the output is NULL", 0),
            0U)
      << api_->last_error(api_->ctx);
}

// The SDK's Host sends the passes to the host only on a device run; on a
// CPU run, and with a host older than ABI 1.7, it runs its own loops.
struct CountingHost {
  static tessera_status fill(void* ctx, float* x, uint64_t count, float value) {
    ++static_cast<CountingHost*>(ctx)->calls;
    for (uint64_t i = 0; i < count; ++i) x[i] = value;
    return TESSERA_OK;
  }
  static tessera_status scale(void* ctx, float* x, uint64_t count, float factor) {
    ++static_cast<CountingHost*>(ctx)->calls;
    for (uint64_t i = 0; i < count; ++i) x[i] *= factor;
    return TESSERA_OK;
  }
  static tessera_status sum(void* ctx, const float* x, uint64_t count, double* out) {
    ++static_cast<CountingHost*>(ctx)->calls;
    *out = sdk::sum_squares(std::span<const float>(x, count));
    return TESSERA_OK;
  }
  static tessera_status failing_sum(void* ctx, const float* /*x*/, uint64_t /*count*/,
                                    double* /*out*/) {
    ++static_cast<CountingHost*>(ctx)->calls;
    return TESSERA_ERR_INTERNAL;
  }
  static void device(void* ctx, tessera_device* out) {
    *out = tessera_device{
        static_cast<CountingHost*>(ctx)->cuda ? TESSERA_DEVICE_CUDA : TESSERA_DEVICE_CPU, 0};
  }

  explicit CountingHost(const tessera_host_api* base) : api(*base) {
    api.ctx = this;
    api.compute_device = &device;
    api.vec_fill = &fill;
    api.vec_scale = &scale;
    api.vec_sum_squares = &sum;
  }
  tessera_host_api api;
  bool cuda = true;
  int calls = 0;
};

TEST_F(HostApi, SdkHostSendsThePassesToTheHostOnlyOnADeviceRun) {
  CountingHost counting(api_);
  const sdk::Host host(&counting.api);
  std::vector<float> x = {1.0F, 2.0F, 3.0F};
  host.scale(x, 2.0F);
  host.scale(x, 1.0F);  // nothing to do: no call
  EXPECT_EQ(host.sum_squares(x), 56.0);
  host.fill(x, 0.0F);
  EXPECT_EQ(x, std::vector<float>(3, 0.0F));
  EXPECT_EQ(counting.calls, 3);

  counting.cuda = false;  // a CPU run: the SDK's own loops
  x = {1.0F, 2.0F};
  host.scale(x, 3.0F);
  EXPECT_EQ(host.sum_squares(x), 45.0);
  EXPECT_EQ(counting.calls, 3);

  counting.cuda = true;  // a host of ABI 1.6: too small a table for the passes
  counting.api.struct_size = offsetof(tessera_host_api, vec_fill);
  EXPECT_FALSE(host.has_vector_passes());
  EXPECT_EQ(host.sum_squares(x), 45.0);
  EXPECT_EQ(counting.calls, 3);
}

TEST_F(HostApi, SdkHostThrowsTheHostsErrorForAFailedPass) {
  CountingHost counting(api_);
  counting.api.vec_sum_squares = &CountingHost::failing_sum;
  set_host_call_error(
      "vec_sum_squares of 2 elements: sum of squares on CUDA: cudaErrorLaunchFailure");
  const std::vector<float> x = {1.0F, 2.0F};
  try {
    (void)sdk::Host(&counting.api).sum_squares(x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INTERNAL);
    EXPECT_NE(std::string(e.what()).find("host vec_sum_squares: vec_sum_squares of 2 elements: "
                                         "sum of squares on CUDA"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera
