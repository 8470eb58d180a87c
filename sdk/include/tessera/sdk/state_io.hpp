// Strategy-side view of checkpoint state transfer (tessera_state_reader and
// tessera_state_writer, c/strategy.h): checkpoint names and slice reads and
// writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/c/strategy.h"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Checkpoint name of a parameter and of one of its optimizer slots.
inline std::string param_key(const std::string& full_name) { return full_name; }
inline std::string optim_key(const std::string& full_name, const std::string& slot) {
  return "optim." + full_name + "." + slot;
}

// A slice description borrowing `name` and `shape`.
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

class StateReader {
 public:
  StateReader(const Host& host, const tessera_state_reader* r) : host_(host), r_(r) {}
  [[nodiscard]] bool has(const std::string& name) const {
    return r_->has(r_->ctx, name.c_str()) != 0;
  }
  // Elements [offset, offset + out.size()) of tensor `name` of full `shape`.
  void read(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
            std::span<float> out) const {
    const auto s = make_slice(name, shape, offset, out.size());
    detail::check_host_call(host_, r_->read(r_->ctx, &s, out.data()), "state read");
  }

 private:
  Host host_;
  const tessera_state_reader* r_;
};

class StateWriter {
 public:
  StateWriter(const Host& host, const tessera_state_writer* w) : host_(host), w_(w) {}
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
  void write(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
             std::span<const float> data) const {
    const auto s = make_slice(name, shape, offset, data.size());
    detail::check_host_call(host_, w_->write(w_->ctx, &s, data.data()), "state write");
  }

 private:
  Host host_;
  const tessera_state_writer* w_;
};

}  // namespace tessera::sdk
