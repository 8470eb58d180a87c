#include "buffer.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "tessera/sdk/dtype.hpp"

namespace tessera::conformance {
namespace {

template <typename T>
void store(std::byte* at, T value) noexcept {
  std::memcpy(at, &value, sizeof value);
}

template <typename T>
T load(const std::byte* at) noexcept {
  T value{};
  std::memcpy(&value, at, sizeof value);
  return value;
}

constexpr tessera_device kCpu{TESSERA_DEVICE_CPU, 0};

}  // namespace

TypedBuffer::TypedBuffer(tessera_dtype dtype, uint64_t count)
    : dtype_(dtype), count_(count), element_size_(tessera_dtype_size(dtype)) {
  if (element_size_ == 0) {
    throw std::invalid_argument("TypedBuffer: unknown dtype " + std::to_string(dtype));
  }
  storage_.resize(static_cast<size_t>(count) * element_size_);
}

void TypedBuffer::set(uint64_t index, double value) {
  std::byte* at = storage_.data() + index * element_size_;
  switch (dtype_) {
    case TESSERA_F32:
      store(at, static_cast<float>(value));
      break;
    case TESSERA_F64:
      store(at, value);
      break;
    case TESSERA_F16:
      store(at, to_half(static_cast<float>(value)).bits);
      break;
    case TESSERA_BF16:
      store(at, to_bfloat16(static_cast<float>(value)).bits);
      break;
    case TESSERA_I32:
      store(at, static_cast<int32_t>(value));
      break;
    case TESSERA_I64:
      store(at, static_cast<int64_t>(value));
      break;
    case TESSERA_U8:
      store(at, static_cast<uint8_t>(value));
      break;
    default:
      break;
  }
}

double TypedBuffer::get(uint64_t index) const {
  const std::byte* at = storage_.data() + index * element_size_;
  switch (dtype_) {
    case TESSERA_F32:
      return load<float>(at);
    case TESSERA_F64:
      return load<double>(at);
    case TESSERA_F16:
      return to_float(half{load<uint16_t>(at)});
    case TESSERA_BF16:
      return to_float(bfloat16{load<uint16_t>(at)});
    case TESSERA_I32:
      return load<int32_t>(at);
    case TESSERA_I64:
      return static_cast<double>(load<int64_t>(at));
    case TESSERA_U8:
      return load<uint8_t>(at);
    default:
      return 0.0;
  }
}

void TypedBuffer::fill(double value) {
  if (count_ == 0) return;
  set(0, value);
  for (uint64_t i = 1; i < count_; ++i) {
    std::memcpy(storage_.data() + i * element_size_, storage_.data(), element_size_);
  }
}

std::span<std::byte> TypedBuffer::bytes() noexcept { return storage_; }
std::span<const std::byte> TypedBuffer::bytes() const noexcept { return storage_; }

tessera_buffer TypedBuffer::view() noexcept { return view(0, count_); }

tessera_buffer TypedBuffer::view(uint64_t offset, uint64_t count) noexcept {
  void* data = count == 0 ? nullptr : storage_.data() + offset * element_size_;
  return tessera_buffer{data, count, dtype_, kCpu};
}

tessera_buffer empty_buffer(tessera_dtype dtype) noexcept {
  return tessera_buffer{nullptr, 0, dtype, kCpu};
}

}  // namespace tessera::conformance
