// The mlp under tensor parallelism: the classes-parallel head and a column
// layer that gathers its output, on 2 and 3 in-memory ranks against the
// whole units on one rank; whole models (column and row layers, a head
// split by classes or replicated), also through the plugin's table; a
// group of one rank changes nothing; a backward in a group of another size
// than its forward is refused naming the unit and both sizes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/models.hpp"
#include "mlp.hpp"
#include "tessera/sdk/error.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_tp_one_is_identical;
using testing::expect_unit_tp_matches;

// Widths divisible by 2 and 3.
constexpr int64_t kMlpTpInput = 5;
constexpr int64_t kMlpTpWidth = 12;
constexpr int64_t kMlpTpClasses = 6;

Batch mlp_tp_batch(int64_t classes = kMlpTpClasses) {
  Batch batch = Batch::make(7, 0, kMlpTpInput);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    batch.inputs[i] = static_cast<float>((i * 7 % 11)) / 11.0f - 0.5f;
  }
  for (std::size_t i = 0; i < batch.targets.size(); ++i) {
    batch.targets[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<std::size_t>(classes));
  }
  return batch;
}

MlpConfig mlp_tp_config(int64_t classes) {
  MlpConfig config;
  config.input = kMlpTpInput;
  config.hidden = {kMlpTpWidth, kMlpTpWidth, kMlpTpWidth};  // column, row, column (gathers)
  config.classes = classes;
  config.activation = kernels::Activation::gelu;
  return config;
}

TEST(MlpTensorParallel, ClassesParallelHeadAndGatheringColumnLayer) {
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  const DenseUnit layer("layer2", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                        DenseSplit::column, true);
  for (const int tp : {2, 3}) {
    expect_unit_tp_matches(head, mlp_tp_batch(), kMlpTpWidth, tp, 301);
    expect_unit_tp_matches(head, mlp_tp_batch(), kMlpTpWidth, tp, 302, true);
    expect_unit_tp_matches(layer, mlp_tp_batch(), kMlpTpWidth, tp, 303);
    expect_unit_tp_matches(layer, mlp_tp_batch(), kMlpTpWidth, tp, 304, true);
  }
}

TEST(MlpTensorParallel, WholeModelsHeadSplitOrReplicated) {
  // 6 classes split 2 and 3 ways; 5 do not, and the head stays whole.
  for (const int64_t classes : {kMlpTpClasses, int64_t{5}}) {
    SCOPED_TRACE("classes = " + std::to_string(classes));
    const auto units = build_mlp_units(mlp_tp_config(classes));
    for (const int tp : {2, 3}) expect_model_tp_matches(units, mlp_tp_batch(classes), tp, 305);
  }
}

TEST(MlpTensorParallel, ThroughThePluginTable) {
  // The plugin's adapter gives every backward the group of its own call.
  const auto model = tessera::test::build_model(
      "mlp", "input = 5\nhidden = [12, 12, 12]\nclasses = 6\nactivation = \"gelu\"\n");
  const auto units = build_mlp_units(mlp_tp_config(kMlpTpClasses));
  for (const int tp : {2, 3}) expect_model_tp_matches(units, mlp_tp_batch(), tp, 306, model.get());
}

TEST(MlpTensorParallel, GroupOfOneIsBitIdentical) {
  const DenseUnit first("layer0", kMlpTpInput, kMlpTpWidth, kernels::Activation::relu, true);
  const DenseUnit row("layer1", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                      DenseSplit::row);
  const DenseUnit gather("layer2", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                         DenseSplit::column, true);
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  expect_tp_one_is_identical(first, mlp_tp_batch(), 0, 307);
  expect_tp_one_is_identical(row, mlp_tp_batch(), kMlpTpWidth, 308);
  expect_tp_one_is_identical(gather, mlp_tp_batch(), kMlpTpWidth, 309);
  expect_tp_one_is_identical(head, mlp_tp_batch(), kMlpTpWidth, 310);
}

// Forward of `unit` in a group of 2 on its shards, then `backward` (true)
// or backward_input (false) without a group; the message each rank got.
std::vector<std::string> backward_without_group(const Unit& unit, bool whole_backward) {
  const Batch batch = mlp_tp_batch();
  const BatchView view = tessera::test::view_of(batch);
  std::vector<std::vector<float>> shards;
  // Split tensors as halves, replicated ones (a row layer's bias) whole.
  for (const ParamSpec& s : unit.params()) {
    shards.emplace_back(s.split == SplitHint::none ? s.numel() : s.numel() / 2, 0.5f);
  }
  std::vector<const float*> p;
  p.reserve(shards.size());
  for (const auto& v : shards) p.push_back(v.data());
  std::vector<float> x(static_cast<std::size_t>(batch.size * kMlpTpWidth), 0.25f);
  std::vector<std::string> messages(2);
  testing::run_tp_ranks(2, [&](int rank, const tessera_tp_group& group) {
    std::vector<std::vector<float>> grads(shards.size());
    std::vector<float*> g;
    g.reserve(shards.size());
    for (std::size_t i = 0; i < shards.size(); ++i) {
      grads[i].assign(shards[i].size(), 0.0f);
      g.push_back(grads[i].data());
    }
    auto ctx = unit.make_context();
    ctx->set_tp(&group);
    UnitInput in;
    in.batch = &view;
    in.tp = &group;
    in.x = {x.data(), batch.size, kMlpTpWidth};
    const ConstView out = unit.forward(*ctx, p, in);
    const std::vector<float> dy(out.data, out.data + out.rows * out.cols);
    const ConstView grad{dy.data(), out.rows, out.cols};
    ctx->set_tp(nullptr);
    try {
      if (whole_backward) {
        (void)unit.backward(*ctx, p, g, grad);
      } else {
        (void)unit.backward_input(*ctx, p, grad);
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
      messages[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  return messages;
}

TEST(MlpTensorParallel, BackwardInAnotherGroupSizeIsRefused) {
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  const DenseUnit layer("layer0", kMlpTpWidth, kMlpTpWidth, kernels::Activation::relu, false);
  for (const std::string& m : backward_without_group(head, true)) {
    EXPECT_NE(m.find("unit 'head': backward in a tensor-parallel group of 1 ranks after a "
                     "forward in one of 2"),
              std::string::npos)
        << m;
  }
  for (const std::string& m : backward_without_group(layer, false)) {
    EXPECT_NE(m.find("unit 'layer0': backward in a tensor-parallel group of 1 ranks after a "
                     "forward in one of 2"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace tessera::model
