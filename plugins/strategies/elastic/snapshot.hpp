// The pieces of training state the elastic strategy keeps in memory: what
// its inner strategy writes when asked for everything it holds, tagged with
// the update number, plus the pieces only one neighbour holds, so that the
// survivors of a lost rank still hold every element between them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/sdk/comm_view.hpp"

namespace tessera::strategies::elastic {

// One slice of one tensor, as tessera_tensor_slice describes it, with its
// values.
struct Piece {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // flat slices
  uint64_t count = 0;
  std::vector<int64_t> box_offset;  // both empty for a flat slice
  std::vector<int64_t> box_extent;
  std::vector<float> data;

  // Identity of the slice (not of the values): equal on two ranks that
  // hold the same part of the same tensor.
  [[nodiscard]] std::string key() const;
};

// The descriptors of `pieces` as bytes (not their values), and back (data
// sized, zeroed).
std::vector<uint8_t> encode_descriptors(const std::vector<const Piece*>& pieces);
std::vector<Piece> decode_descriptors(const uint8_t* bytes, size_t size);

// Keeps what a writer is given as pieces, in `out`. The pieces already
// there are written over in place when the slices come in the same order
// as before (a strategy saves the same slices every step), so a snapshot
// reuses the memory of the one before it instead of allocating anew.
struct PieceCollector {
  std::vector<Piece>* out = nullptr;
  size_t next = 0;  // pieces written so far
  // Drops the pieces of `out` beyond those written.
  void finish() { out->resize(next); }
};
tessera_state_writer collecting_writer(PieceCollector& into, uint32_t flags, int64_t step);

// Full tensors assembled from pieces, read back as any slice.
class Assembled {
 public:
  // Adds a piece (its values into the tensor of its name).
  void add(const Piece& piece);
  // Names of the tensors with elements that no piece covered.
  [[nodiscard]] std::vector<std::string> incomplete() const;
  // A reader over the tensors (valid while this object lives).
  [[nodiscard]] tessera_state_reader reader() const;

 private:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<uint8_t> covered;
  };
  static int32_t has(void* ctx, const char* name);
  static tessera_status read(void* ctx, const tessera_tensor_slice* slice, float* out);
  std::map<std::string, Tensor, std::less<>> tensors_;
};

// Sends `bytes` to `to` and receives the bytes `from` sends the same way
// (their length first), on `comm` with tags `tag` and tag + 1.
std::vector<uint8_t> exchange_bytes(const sdk::Host& host, sdk::CommView& comm,
                                    const std::vector<uint8_t>& bytes, int32_t to, int32_t from,
                                    int32_t tag);

// Every rank's `bytes`, in rank order (lengths first, then the padded
// blocks in one allgather).
std::vector<std::vector<uint8_t>> allgather_bytes(sdk::CommView& comm,
                                                  const std::vector<uint8_t>& bytes);
std::vector<std::vector<float>> allgather_floats(sdk::CommView& comm,
                                                 const std::vector<float>& values);

}  // namespace tessera::strategies::elastic
