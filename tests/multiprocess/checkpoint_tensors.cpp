#include "checkpoint_tensors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <utility>

#include "engines.hpp"
#include "tessera/core/safetensors.hpp"

namespace tessera::mptest {

Tensors tensors_of_file(const std::filesystem::path& file) {
  const auto reader = SafetensorsReader::open(file);
  Tensors out;
  for (const auto& name : reader.names()) {
    EXPECT_EQ(reader.info(name).dtype, TESSERA_F32) << file << ": " << name;
    std::vector<float> values(shape_numel(reader.info(name).shape));
    reader.read(name, std::span<float>(values));
    out.emplace(name, std::move(values));
  }
  return out;
}

void expect_close(const Tensors& actual, const Tensors& expected, const std::string& what) {
  std::vector<std::string> actual_names;
  std::vector<std::string> expected_names;
  for (const auto& [name, v] : actual) actual_names.push_back(name);
  for (const auto& [name, v] : expected) expected_names.push_back(name);
  ASSERT_EQ(actual_names, expected_names) << what;
  size_t params = 0;
  size_t slots = 0;
  for (const auto& [name, b] : expected) {
    const std::vector<float>& a = actual.at(name);
    ASSERT_EQ(a.size(), b.size()) << what << ": " << name;
    const TensorDiff d = tensor_diff(a, b);
    const double diff = d.max_abs_diff;
    const double scale = d.max_abs_reference;
    EXPECT_LE(diff, kTolerance * std::max(scale, 1e-30))
        << what << ": " << name << ": max |diff| " << diff << ", max |value| " << scale;
    ++(name.rfind("optim.", 0) == 0 ? slots : params);
  }
  EXPECT_GT(params, 0U) << what << ": no parameters";
  EXPECT_GT(slots, 0U) << what << ": no optimizer state";
}

}  // namespace tessera::mptest
