// The mlp's split backward (TESSERA_UNIT_SPLIT_BACKWARD): backward_input then
// backward_weight give the gradients backward gives, bit for bit, for every
// kind of mlp unit; the weight half refuses to run before the input half.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "mlp.hpp"

namespace tessera::model {
namespace {

using testing::random_values;

struct SplitCase {
  std::string name;
  bool head;
  bool first;
};

void PrintTo(const SplitCase& c, std::ostream* out) { *out << c.name; }

bool split_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp may not take the null data() of an empty vector.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class MlpSplitBackward : public ::testing::TestWithParam<SplitCase> {};

TEST_P(MlpSplitBackward, HalvesEqualTheWholeBackwardBitForBit) {
  const SplitCase& c = GetParam();
  constexpr int64_t kIn = 5, kOut = 4, kRows = 6;
  std::unique_ptr<Unit> unit;
  if (c.head) {
    unit = std::make_unique<ClassifierHead>("head", kIn, kOut, c.first);
  } else {
    unit = std::make_unique<DenseUnit>("layer1", kIn, kOut, kernels::Activation::gelu, c.first);
  }
  EXPECT_EQ(unit->flags() & TESSERA_UNIT_SPLIT_BACKWARD, TESSERA_UNIT_SPLIT_BACKWARD);
  Batch batch = Batch::make(kRows, 0, kIn);
  batch.inputs = random_values(kRows * kIn, 1.0f, 5);
  for (int64_t i = 0; i < kRows; ++i) {
    batch.targets[static_cast<std::size_t>(i)] = static_cast<int32_t>(i % kOut);
  }
  const BatchView view = test::view_of(batch);
  const std::vector<float> x = random_values(kRows * kIn, 1.0f, 6);
  std::vector<std::vector<float>> params = {random_values(kIn * kOut, 0.5f, 7),
                                            random_values(kOut, 0.5f, 8)};
  const std::vector<const float*> p = {params[0].data(), params[1].data()};
  const std::vector<float> grad_out = random_values(kRows * kOut, 1.0f, 9);
  const ConstView g = c.head ? ConstView{} : ConstView{grad_out.data(), kRows, kOut};
  UnitInput in{&view, c.first ? ConstView{} : ConstView{x.data(), kRows, kIn}, 0.25f};

  // Whole backward.
  std::vector<std::vector<float>> whole = {std::vector<float>(kIn * kOut, 0.1f),
                                           std::vector<float>(kOut, 0.1f)};
  std::vector<float*> wg = {whole[0].data(), whole[1].data()};
  auto c1 = unit->make_context();
  (void)unit->forward(*c1, p, in);
  const ConstView dx1 = unit->backward(*c1, p, wg, g);
  const std::vector<float> dx_whole =
      dx1.empty() ? std::vector<float>()
                  : std::vector<float>(dx1.data, dx1.data + dx1.rows * dx1.cols);

  // The two halves, on another context, into buffers with the same start.
  std::vector<std::vector<float>> split = {std::vector<float>(kIn * kOut, 0.1f),
                                           std::vector<float>(kOut, 0.1f)};
  std::vector<float*> sg = {split[0].data(), split[1].data()};
  auto c2 = unit->make_context();
  (void)unit->forward(*c2, p, in);
  const ConstView dx2 = unit->backward_input(*c2, p, g);
  EXPECT_EQ(split[0], std::vector<float>(kIn * kOut, 0.1f)) << "the input half wrote gradients";
  unit->backward_weight(*c2, p, sg);
  const std::vector<float> dx_split =
      dx2.empty() ? std::vector<float>()
                  : std::vector<float>(dx2.data, dx2.data + dx2.rows * dx2.cols);

  EXPECT_EQ(dx1.empty(), c.first);
  EXPECT_TRUE(split_same_bits(dx_whole, dx_split));
  EXPECT_TRUE(split_same_bits(whole[0], split[0]));
  EXPECT_TRUE(split_same_bits(whole[1], split[1]));
  EXPECT_FALSE(split_same_bits(split[0], std::vector<float>(kIn * kOut, 0.1f)));

  // The weight half once more, without a new input half: refused.
  try {
    unit->backward_weight(*c2, p, sg);
    ADD_FAILURE() << "a second backward_weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward_weight without backward_input"),
              std::string::npos)
        << e.what();
  }

  // A new forward after an input half: that half no longer applies.
  (void)unit->forward(*c2, p, in);
  (void)unit->backward_input(*c2, p, g);
  (void)unit->forward(*c2, p, in);
  try {
    unit->backward_weight(*c2, p, sg);
    ADD_FAILURE() << "backward_weight after a new forward was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward_weight without backward_input"),
              std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Units, MlpSplitBackward,
                         ::testing::Values(SplitCase{"first_dense", false, true},
                                           SplitCase{"hidden_dense", false, false},
                                           SplitCase{"head_after_hidden", true, false},
                                           SplitCase{"head_alone", true, true}),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace tessera::model
