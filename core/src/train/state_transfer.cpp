#include "tessera/core/train/state_transfer.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

constexpr int kStateTag = 7301;  // p2p tag of the checkpoint gather

class ByteWriter {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  void put_raw(const void* data, size_t size) {
    const size_t at = bytes_.size();
    bytes_.resize(at + size);
    if (size != 0) std::memcpy(bytes_.data() + at, data, size);
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <typename T>
  T get(const char* what) {
    T value;
    get_raw(&value, sizeof(T), what);
    return value;
  }
  void get_raw(void* out, size_t size, const char* what) {
    if (size > bytes_.size() - at_) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  std::string("saved state: truncated while reading ") + what + " (byte " +
                      std::to_string(at_) + " of " + std::to_string(bytes_.size()) + ")");
    }
    if (size != 0) std::memcpy(out, bytes_.data() + at_, size);
    at_ += size;
  }
  // An element count that the remaining bytes can hold at `unit` bytes each.
  uint64_t count(size_t unit, const char* what) {
    const auto n = get<uint64_t>(what);
    if (unit != 0 && n > (bytes_.size() - at_) / unit) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT, std::string("saved state: ") + what + " of " +
                                                    std::to_string(n) +
                                                    " exceeds the bytes that follow");
    }
    return n;
  }
  [[nodiscard]] bool done() const noexcept { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<std::byte> serialize_state(const CollectedState& state) {
  ByteWriter w;
  w.put<uint64_t>(state.tensors.size());
  for (const auto& [name, tensor] : state.tensors) {
    w.put<uint64_t>(name.size());
    w.put_raw(name.data(), name.size());
    w.put<uint64_t>(tensor.shape.size());
    for (const int64_t d : tensor.shape) w.put<int64_t>(d);
    w.put<uint64_t>(tensor.pieces.size());
    for (const auto& piece : tensor.pieces) {
      w.put<uint64_t>(piece.offset);
      // A box piece: 1, then per dimension its offset and extent; flat: 0.
      w.put<uint64_t>(piece.box ? 1 : 0);
      if (piece.box) {
        for (size_t d = 0; d < piece.box->ndim(); ++d) {
          w.put<uint64_t>(piece.box->offset[d]);
          w.put<uint64_t>(piece.box->extent[d]);
        }
      }
      w.put<uint64_t>(piece.values.size());
      w.put_raw(piece.values.data(), piece.values.size() * sizeof(float));
    }
  }
  return w.take();
}

CollectedState deserialize_state(std::span<const std::byte> bytes) {
  ByteReader r(bytes);
  CollectedState state;
  const uint64_t tensors = r.count(1, "the tensor count");
  for (uint64_t t = 0; t < tensors; ++t) {
    std::string name(r.count(1, "a tensor name length"), '\0');
    r.get_raw(name.data(), name.size(), "a tensor name");
    CollectedState::Tensor tensor;
    tensor.shape.resize(r.count(sizeof(int64_t), "a tensor rank"));
    uint64_t numel = 1;
    for (auto& d : tensor.shape) {
      d = r.get<int64_t>("a tensor dimension");
      if (d < 0) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    "saved state: tensor '" + name + "' has a negative dimension");
      }
      numel *= static_cast<uint64_t>(d);
    }
    tensor.pieces.resize(r.count(3 * sizeof(uint64_t), "a piece count"));
    const std::vector<uint64_t> dims(tensor.shape.begin(), tensor.shape.end());
    for (auto& piece : tensor.pieces) {
      piece.offset = r.get<uint64_t>("a piece offset");
      const auto kind = r.get<uint64_t>("a piece kind");
      if (kind > 1) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT, "saved state: a piece of tensor '" + name +
                                                      "' has unknown kind " + std::to_string(kind));
      }
      if (kind == 1) {
        TensorBox box;
        for (size_t d = 0; d < dims.size(); ++d) {
          box.offset.push_back(r.get<uint64_t>("a box offset"));
          box.extent.push_back(r.get<uint64_t>("a box extent"));
        }
        const std::string problem = box_problem(box, dims);
        if (!problem.empty()) {
          throw Error(
              TESSERA_ERR_INVALID_ARGUMENT,
              tessera::detail::concat("saved state: a piece of tensor '", name, "': ", problem));
        }
        piece.box = std::move(box);
      }
      piece.values.resize(r.count(sizeof(float), "a piece length"));
      if (piece.box && piece.values.size() != piece.box->numel()) {
        throw Error(
            TESSERA_ERR_INVALID_ARGUMENT,
            tessera::detail::concat("saved state: a piece of tensor '", name, "' with box ",
                                    box_text(*piece.box), " has ", piece.values.size(), " values"));
      }
      if (!piece.box && (piece.offset > numel || piece.values.size() > numel - piece.offset)) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    "saved state: a piece of tensor '" + name + "' at offset " +
                        std::to_string(piece.offset) + " with " +
                        std::to_string(piece.values.size()) + " values lies outside its " +
                        std::to_string(numel) + " elements");
      }
      r.get_raw(piece.values.data(), piece.values.size() * sizeof(float), "piece values");
    }
    if (!state.tensors.emplace(std::move(name), std::move(tensor)).second) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT, "saved state: a tensor name appears twice");
    }
  }
  if (!r.done()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, "saved state: bytes left after the last tensor");
  }
  return state;
}

SharedMemoryGather::SharedMemoryGather(int world_size)
    : slots_(static_cast<size_t>(world_size < 1 ? 1 : world_size)) {}

std::optional<CollectedState> SharedMemoryGather::gather(Communicator& comm, CollectedState state) {
  // A world re-formed after losing ranks (elastic) is smaller.
  TESSERA_CHECK(comm.size() <= static_cast<int>(slots_.size()), TESSERA_ERR_INVALID_ARGUMENT,
                "state gather: built for ", slots_.size(), " ranks, used by ", comm.size());
  {
    const std::lock_guard lock(mu_);
    slots_[static_cast<size_t>(comm.rank())] = std::move(state);
  }
  comm.barrier();  // every slot is filled
  if (comm.rank() != 0) return std::nullopt;
  const std::lock_guard lock(mu_);
  CollectedState merged = std::move(slots_[0]);
  for (size_t r = 1; r < static_cast<size_t>(comm.size()); ++r) merged.merge(std::move(slots_[r]));
  for (auto& slot : slots_) slot = CollectedState{};
  return merged;
}

std::optional<CollectedState> MessageGather::gather(Communicator& comm, CollectedState state) {
  if (comm.rank() != 0) {
    std::vector<std::byte> bytes = serialize_state(state);
    int64_t size = static_cast<int64_t>(bytes.size());
    comm.send(cpu_buffer(std::span<int64_t>(&size, 1)), 0, kStateTag);
    comm.send(cpu_buffer(bytes.data(), bytes.size(), TESSERA_U8), 0, kStateTag);
    return std::nullopt;
  }
  CollectedState merged = std::move(state);
  for (int peer = 1; peer < comm.size(); ++peer) {
    int64_t size = 0;
    comm.recv(cpu_buffer(std::span<int64_t>(&size, 1)), peer, kStateTag);
    TESSERA_CHECK(size >= 0, TESSERA_ERR_INVALID_ARGUMENT, "state gather: rank ", peer,
                  " announced a negative size ", size);
    std::vector<std::byte> bytes(static_cast<size_t>(size));
    comm.recv(cpu_buffer(bytes.data(), bytes.size(), TESSERA_U8), peer, kStateTag);
    merged.merge(deserialize_state(bytes));
  }
  return merged;
}

}  // namespace tessera::train
