// Strategy-side view of checkpoint state transfer (tessera_state_reader and
// tessera_state_writer, c/strategy.h): checkpoint names and slice reads and
// writes, as flat element ranges or as N-d boxes (e.g. a column shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/c/strategy.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Checkpoint name of a parameter and of one of its optimizer slots.
inline std::string param_key(const std::string& full_name) { return full_name; }
inline std::string optim_key(const std::string& full_name, const std::string& slot) {
  return "optim." + full_name + "." + slot;
}

// A flat slice description borrowing `name` and `shape`.
inline tessera_tensor_slice make_slice(const std::string& name, std::span<const int64_t> shape,
                                       uint64_t offset, uint64_t count) noexcept {
  tessera_tensor_slice s{};
  s.struct_size = sizeof s;
  s.ndim = static_cast<int32_t>(shape.size());
  s.name = name.c_str();
  s.shape = shape.data();
  s.offset = offset;
  s.count = count;
  return s;
}

// Elements of a box with these extents (1 for a box without dimensions).
// Throws tessera::Error (invalid argument) for a negative extent.
inline uint64_t box_numel(std::span<const int64_t> box_extent) {
  uint64_t n = 1;
  for (const int64_t e : box_extent) {
    TESSERA_CHECK(e >= 0, TESSERA_ERR_INVALID_ARGUMENT, "box extent ", e, " is negative");
    n *= static_cast<uint64_t>(e);
  }
  return n;
}

// A box slice description borrowing `name`, `shape` and the box (one offset
// and one extent per dimension of `shape`): offset 0, count the box's
// elements. Throws tessera::Error (invalid argument) when the box has
// another number of dimensions than `shape` or a negative extent (the host
// checks that it lies inside the tensor).
inline tessera_tensor_slice make_box_slice(const std::string& name, std::span<const int64_t> shape,
                                           std::span<const int64_t> box_offset,
                                           std::span<const int64_t> box_extent) {
  TESSERA_CHECK(box_offset.size() == shape.size() && box_extent.size() == shape.size(),
                TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "': a box of ", box_offset.size(),
                " offsets and ", box_extent.size(), " extents for a tensor of ", shape.size(),
                " dimensions");
  // A 0-d box has no entries, but its pointers must not be NULL (that would
  // make it a flat slice; the same element either way).
  static constexpr int64_t kNoDims[1] = {0};
  tessera_tensor_slice s = make_slice(name, shape, 0, box_numel(box_extent));
  s.box_offset = box_offset.empty() ? kNoDims : box_offset.data();
  s.box_extent = box_extent.empty() ? kNoDims : box_extent.data();
  return s;
}

class StateReader {
 public:
  StateReader(const Host& host, const tessera_state_reader* r) : host_(host), r_(r) {}
  // The C reader, e.g. to hand to another strategy plugin (elastic).
  [[nodiscard]] const tessera_state_reader& raw() const noexcept { return *r_; }
  [[nodiscard]] bool has(const std::string& name) const {
    return r_->has(r_->ctx, name.c_str()) != 0;
  }
  // Elements [offset, offset + out.size()) of tensor `name` of full `shape`.
  void read(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
            std::span<float> out) const {
    const auto s = make_slice(name, shape, offset, out.size());
    detail::check_host_call(host_, r_->read(r_->ctx, &s, out.data()), "state read");
  }
  // The box of tensor `name` of full `shape` that holds the indices
  // [box_offset[d], box_offset[d] + box_extent[d]) of every dimension d, in
  // row-major order of the box, into `out` (exactly box_numel(box_extent)
  // values, else an invalid argument). E.g. columns [c0, c1) of an [R, C]
  // weight: box_offset {0, c0}, box_extent {R, c1 - c0}. Whatever slices
  // were saved (flat ranges, other boxes, another world size), the host
  // assembles it.
  void read_box(const std::string& name, std::span<const int64_t> shape,
                std::span<const int64_t> box_offset, std::span<const int64_t> box_extent,
                std::span<float> out) const {
    const auto s = make_box_slice(name, shape, box_offset, box_extent);
    TESSERA_CHECK(out.size() == s.count, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "': a box of ", s.count, " elements read into a buffer of ", out.size());
    detail::check_host_call(host_, r_->read(r_->ctx, &s, out.data()), "state read");
  }

 private:
  Host host_;
  const tessera_state_reader* r_;
};

class StateWriter {
 public:
  StateWriter(const Host& host, const tessera_state_writer* w) : host_(host), w_(w) {}
  // The C writer, e.g. to hand to another strategy plugin (elastic).
  [[nodiscard]] const tessera_state_writer& raw() const noexcept { return *w_; }
  // True when every rank must write all it holds, replicas included
  // (TESSERA_STATE_ALL_REPLICAS); false: each element once across the world.
  // The host asks for all replicas only when it compares the ranks' final
  // states (run_training's collect_final_state, used by tests); checkpoints
  // never do.
  [[nodiscard]] bool all_replicas() const noexcept {
    return (w_->flags & TESSERA_STATE_ALL_REPLICAS) != 0;
  }
  // The step whose result is saved (tessera_state_writer.step: the last
  // completed step, the resumed step before any step ran, 0 before the
  // first step of a fresh run); -1 when the host's writer predates the
  // field (its struct_size does not cover it).
  [[nodiscard]] int64_t step() const noexcept {
    if (w_->struct_size < offsetof(tessera_state_writer, step) + sizeof(w_->step)) return -1;
    return w_->step;
  }
  // Elements [offset, offset + data.size()) of tensor `name` of full `shape`.
  void write(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
             std::span<const float> data) const {
    const auto s = make_slice(name, shape, offset, data.size());
    detail::check_host_call(host_, w_->write(w_->ctx, &s, data.data()), "state write");
  }
  // The box of tensor `name` of full `shape` (see StateReader::read_box)
  // from `data` (exactly box_numel(box_extent) values). Without
  // all_replicas() the boxes and ranges of all ranks together hold every
  // element once.
  void write_box(const std::string& name, std::span<const int64_t> shape,
                 std::span<const int64_t> box_offset, std::span<const int64_t> box_extent,
                 std::span<const float> data) const {
    const auto s = make_box_slice(name, shape, box_offset, box_extent);
    TESSERA_CHECK(data.size() == s.count, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "': a box of ", s.count, " elements written from a buffer of ", data.size());
    detail::check_host_call(host_, w_->write(w_->ctx, &s, data.data()), "state write");
  }

 private:
  Host host_;
  const tessera_state_writer* w_;
};

}  // namespace tessera::sdk
