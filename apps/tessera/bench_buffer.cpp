#include "bench_buffer.hpp"

#include <charconv>
#include <cstring>

#include "cli_error.hpp"
#include "tessera/sdk/dtype.hpp"

namespace tessera::cli {

std::optional<tessera_device_type> parse_bench_device(std::string_view name) {
  if (name == "cpu") return TESSERA_DEVICE_CPU;
  if (name == "cuda") return TESSERA_DEVICE_CUDA;
  return std::nullopt;
}

std::string bench_device_list() { return "cpu, cuda"; }

std::string device_text(const tessera_device& device) {
  if (device.type == TESSERA_DEVICE_CUDA) return "cuda:" + std::to_string(device.index);
  return "cpu";
}

int32_t bench_cuda_ordinal(const char* local_rank) {
  if (local_rank == nullptr) return 0;
  const std::string_view text(local_rank);
  int32_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < 0 ||
      value > 4095) {
    throw UsageError("--device cuda: environment variable LOCAL_RANK='" + std::string(text) +
                     "' is not a device number in 0..4095 (it picks this rank's CUDA device)");
  }
  return value;
}

tessera_device bench_cuda_device(const char* local_rank) {
  const int32_t count = cuda_device_count();
  const int32_t ordinal = bench_cuda_ordinal(local_rank);
  if (ordinal >= count) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "--device cuda: LOCAL_RANK=" + std::to_string(ordinal) + " but this machine has " +
                    std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                    " (start at most one rank per GPU on each machine)");
  }
  return tessera_device{TESSERA_DEVICE_CUDA, ordinal};
}

BenchBuffer::BenchBuffer(const tessera_device& device, uint64_t count, tessera_dtype dtype)
    : host_(count * tessera_dtype_size(dtype)) {
  host_.touch();
  void* data = host_.data();
  if (device.type == TESSERA_DEVICE_CUDA) {
    device_ = CudaMemory(device.index, host_.size());
    device_.upload(host_.data());
    data = device_.data();
  }
  view_ = tessera_buffer{data, count, dtype, device};
}

void BenchBuffer::to_device() {
  if (view_.device.type == TESSERA_DEVICE_CUDA) device_.upload(host_.data());
}

void BenchBuffer::to_host() {
  if (view_.device.type == TESSERA_DEVICE_CUDA) device_.download(host_.data());
}

void allgather_values(Communicator& comm, const tessera_device& device,
                      std::span<const double> local, std::span<double> all) {
  BenchBuffer send(device, local.size(), TESSERA_F64);
  BenchBuffer recv(device, all.size(), TESSERA_F64);
  std::memcpy(send.host(), local.data(), local.size_bytes());
  send.to_device();
  comm.allgather(send.view(), recv.view());
  recv.to_host();
  std::memcpy(all.data(), recv.host(), all.size_bytes());
}

int64_t sum_over_ranks(Communicator& comm, const tessera_device& device, int64_t local) {
  BenchBuffer value(device, 1, TESSERA_I64);
  std::memcpy(value.host(), &local, sizeof local);
  value.to_device();
  comm.allreduce(value.view(), value.view(), TESSERA_SUM);
  value.to_host();
  std::memcpy(&local, value.host(), sizeof local);
  return local;
}

}  // namespace tessera::cli
