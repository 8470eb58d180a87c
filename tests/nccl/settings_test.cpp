// Without a GPU: the nccl backend resolves and checks its settings before it
// looks for a device, says "no CUDA device" naming itself when there is
// none, and refuses host buffers unless stage_host is set.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "settings.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_NCCL_TEST_PLUGIN_DIR
#error "TESSERA_NCCL_TEST_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::nccltest {
namespace {

// Sets (or, with std::nullopt, unsets) environment variables for the life of
// the object and restores them afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = ::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      set(name, value);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) set(name, value);
  }

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<Backend> open_nccl(const std::vector<std::string>& options, int world_size = -1) {
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({TESSERA_NCCL_TEST_PLUGIN_DIR}));
  const toml::table table = parse_option_overrides(options);
  BackendSettings settings;
  settings.world_size = world_size;
  settings.timeout = std::chrono::milliseconds(2000);
  return open_backend(registry, "nccl", &table, "test options", settings);
}

Error open_error(const std::vector<std::string>& options, int world_size = -1) {
  return test::thrown_error([&] { auto backend = open_nccl(options, world_size); });
}

using test::expect_mentions;

const std::map<std::string, std::optional<std::string>> kOneRank = {
    {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"TESSERA_RENDEZVOUS_DIR", "/tmp"}};

TEST(NcclSettings, MissingRankVariablesNameThemAndTheLauncher) {
  const ScopedEnv env({{"RANK", std::nullopt}, {"WORLD_SIZE", std::nullopt}});
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl", "WORLD_SIZE", "tessera launch -n N"});
}

TEST(NcclSettings, LocalRankMustBeADeviceNumber) {
  auto vars = kOneRank;
  vars["LOCAL_RANK"] = "gpu0";
  const ScopedEnv env(vars);
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl", "LOCAL_RANK='gpu0'", "CUDA device"});
}

TEST(NcclSettings, UnknownStoreIsNamed) {
  const ScopedEnv env(kOneRank);
  const Error e = open_error({"store=etcd"});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl option store = 'etcd'", "\"file\" or \"redis\""});
}

TEST(NcclSettings, FileStoreNeedsADirectory) {
  auto vars = kOneRank;
  vars["TESSERA_RENDEZVOUS_DIR"] = std::nullopt;
  const ScopedEnv env(vars);
  const Error e = open_error({});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl", "store_dir", "TESSERA_RENDEZVOUS_DIR"});
}

TEST(NcclSettings, WatchdogPeriodIsBounded) {
  const ScopedEnv env(kOneRank);
  const Error e = open_error({"watchdog_ms=0"});
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl option watchdog_ms must be in 1..10000, got 0"});
}

TEST(NcclSettings, ConfiguredWorldSizeMustMatchTheEnvironment) {
  const ScopedEnv env(kOneRank);
  const Error e = open_error({}, 4);
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  expect_mentions(e.what(), {"nccl", "world_size = 4", "WORLD_SIZE=1"});
}

TEST(NcclSettings, WithoutADeviceCreatingFailsSayingSo) {
  if (have_cuda_device()) GTEST_SKIP() << "a CUDA device is present: nothing to refuse";
  const ScopedEnv env(kOneRank);
  const Error e = open_error({"stage_host=true"});
  EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
  expect_mentions(e.what(), {"backend 'nccl'", "nccl: no CUDA device (cudaGetDeviceCount: "});
}

// The buffer checks that run before any CUDA call.
tessera_coll_args allreduce_args(tessera_device_type type, int32_t index) {
  static float data[4] = {};
  tessera_coll_args a{};
  a.struct_size = sizeof(a);
  a.coll = TESSERA_COLL_ALLREDUCE;
  a.send = tessera_buffer{data, 4, TESSERA_F32, tessera_device{type, index}};
  a.recv = a.send;
  a.op = TESSERA_SUM;
  return a;
}

TEST(NcclBuffers, HostBuffersAreRefusedWithoutStaging) {
  const tessera_coll_args a = allreduce_args(TESSERA_DEVICE_CPU, 0);
  const std::string msg =
      test::thrown_error([&] { nccl_backend::check_buffer_devices(a, 1, 4, false, 1); }).what();
  expect_mentions(
      msg, {"nccl: allreduce on rank 1 of 4: send is a host (cpu) buffer", "stage_host = true"});
}

TEST(NcclBuffers, HostBuffersPassWithStaging) {
  const tessera_coll_args a = allreduce_args(TESSERA_DEVICE_CPU, 0);
  EXPECT_NO_THROW(nccl_backend::check_buffer_devices(a, 1, 4, true, 1));
}

TEST(NcclBuffers, BuffersOfAnotherDeviceAreRefused) {
  const tessera_coll_args a = allreduce_args(TESSERA_DEVICE_CUDA, 3);
  const std::string msg =
      test::thrown_error([&] { nccl_backend::check_buffer_devices(a, 0, 2, false, 0); }).what();
  expect_mentions(msg, {"send is on CUDA device 3 but this rank runs on CUDA device 0"});
}

TEST(NcclBuffers, IgnoredBuffersAreNotChecked) {
  // A broadcast's send is read only on the root: a host send elsewhere is fine.
  tessera_coll_args a = allreduce_args(TESSERA_DEVICE_CUDA, 0);
  a.coll = TESSERA_COLL_BROADCAST;
  a.root = 0;
  a.send.device = tessera_device{TESSERA_DEVICE_CPU, 0};
  EXPECT_NO_THROW(nccl_backend::check_buffer_devices(a, 1, 2, false, 0));
}

}  // namespace
}  // namespace tessera::nccltest
