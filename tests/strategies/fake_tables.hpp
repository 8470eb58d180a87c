// Small stand-ins for the host's C tables, so the SDK's training utilities
// can be tested without the core models:
//  * FakeModel: units with declared (possibly tied) parameters computing a
//    scalar chain y_u = y_{u-1} + sum of every parameter element (unit 0
//    starts from the batch's value); the last unit returns loss_scale * y.
//    So d loss / d element = loss_scale for every use of a parameter, and
//    the calls are logged.
//  * FakeOptimizer: a rule with named slots whose state is plain arrays.
//  * FakeStore: a state reader and writer over a map of named tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/c/strategy.h"

namespace tessera::test {

// A micro-batch of the fake model.
struct FakeBatch {
  float value = 0.0F;
  int64_t examples = 1;
};

struct FakeParam {
  std::string name;
  std::vector<int64_t> shape;
  int32_t tied_unit = -1;  // >= 0: tied to (tied_unit, tied_param)
  int32_t tied_param = -1;
};

struct FakeUnit {
  std::string name;
  std::vector<FakeParam> params;
  uint64_t context_bytes = 64;  // reported by a context after its forward
};

class FakeModel {
 public:
  explicit FakeModel(std::vector<FakeUnit> units);
  [[nodiscard]] const tessera_model_api* api() const noexcept;
  [[nodiscard]] const tessera_model* handle() const noexcept;
  [[nodiscard]] const std::vector<FakeUnit>& units() const noexcept { return units_; }
  // "F<unit>", "B<unit>" per call, in call order.
  std::vector<std::string> calls;

 private:
  friend struct FakeModelTable;
  std::vector<FakeUnit> units_;
  std::vector<std::vector<std::string>> full_names_;
};

class FakeOptimizer {
 public:
  explicit FakeOptimizer(std::vector<std::string> slots) : slots_(std::move(slots)) {}
  [[nodiscard]] const tessera_optimizer_api* api() const noexcept;
  [[nodiscard]] const tessera_optimizer* handle() const noexcept;

 private:
  friend struct FakeOptimizerTable;
  std::vector<std::string> slots_;
};

// Tensors by name with their full shape and values.
class FakeStore {
 public:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, Tensor> tensors;
  // Slices written, as "name@offset+count" (flat) or "name@[0:2,1:3]"
  // (box), in order.
  std::vector<std::string> writes;

  [[nodiscard]] tessera_state_reader reader() noexcept;
  [[nodiscard]] tessera_state_writer writer(uint32_t flags = 0) noexcept;
};

}  // namespace tessera::test
