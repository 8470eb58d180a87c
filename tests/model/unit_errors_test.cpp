// Units refuse bad calls with errors that name the unit and the problem.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "gpt.hpp"
#include "mlp.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

// Runs `fn` and returns the message of the tessera::Error it throws.
template <typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

TEST(UnitErrors, OutOfRangeTokenIsNamed) {
  const GptEmbedding unit("embed", 5, 4, 3);
  std::vector<float> wte(20), wpe(12);
  const std::vector<const float*> params{wte.data(), wpe.data()};
  Batch batch = Batch::make(1, 3, 0);
  batch.tokens = {1, 7, 2};
  auto ctx = unit.make_context();
  const BatchView view = test::view_of(batch);
  const std::string msg = message_of([&] { unit.forward(*ctx, params, {&view, {}, 1.0f}); });
  EXPECT_NE(msg.find("token 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("embed"), std::string::npos) << msg;
}

TEST(UnitErrors, OutOfRangeTargetIsNamed) {
  const ClassifierHead unit("head", 2, 3, true);
  std::vector<float> w(6), b(3);
  const std::vector<const float*> params{w.data(), b.data()};
  Batch batch = Batch::make(2, 0, 2);
  batch.targets = {0, 3};
  auto ctx = unit.make_context();
  const BatchView view = test::view_of(batch);
  const std::string msg = message_of([&] { unit.forward(*ctx, params, {&view, {}, 1.0f}); });
  EXPECT_NE(msg.find("target 3"), std::string::npos) << msg;
}

TEST(UnitErrors, WrongParameterCountAndShapes) {
  const DenseUnit unit("layer1", 3, 2, kernels::Activation::relu, false);
  std::vector<float> w(6), b(2), x(6);
  Batch batch = Batch::make(2, 0, 4);
  auto ctx = unit.make_context();
  const std::vector<const float*> one{w.data()};
  const BatchView view = test::view_of(batch);
  EXPECT_NE(message_of([&] {
              unit.forward(*ctx, one, {&view, {x.data(), 2, 3}, 1.0f});
            }).find("expected 2 parameter pointers, got 1"),
            std::string::npos);
  const std::vector<const float*> params{w.data(), b.data()};
  EXPECT_NE(message_of([&] {
              unit.forward(*ctx, params, {&view, {x.data(), 3, 2}, 1.0f});
            }).find("input has 2 columns, expected 3"),
            std::string::npos);
  std::vector<float*> grads{w.data(), b.data()};
  EXPECT_NE(message_of([&] {
              unit.backward(*ctx, params, grads, {x.data(), 2, 2});
            }).find("backward without a forward"),
            std::string::npos);
}

TEST(UnitErrors, BlockNeedsMatchingRows) {
  const GptBlock unit("block0", 4, 2, 2);
  std::vector<std::vector<float>> storage;
  std::vector<const float*> params;
  for (const ParamSpec& s : unit.params()) {
    storage.emplace_back(static_cast<std::size_t>(s.numel()), 0.0f);
  }
  for (const auto& v : storage) params.push_back(v.data());
  const Batch batch = Batch::make(2, 3, 0);
  std::vector<float> x(5 * 4);
  auto ctx = unit.make_context();
  const BatchView view = test::view_of(batch);
  EXPECT_NE(message_of([&] {
              unit.forward(*ctx, params, {&view, {x.data(), 5, 4}, 1.0f});
            }).find("expected 6x4"),
            std::string::npos);
}

// A unit with only the whole backward, as an out-of-tree model may have.
class WholeBackwardOnly final : public ConventionUnit {
 public:
  WholeBackwardOnly() : ConventionUnit("plain", false, false) {}
  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override { return nullptr; }
  ConstView forward(UnitContext& /*ctx*/, std::span<const float* const> /*params*/,
                    const UnitInput& input) const override {
    return input.x;
  }
  ConstView backward(UnitContext& /*ctx*/, std::span<const float* const> /*params*/,
                     std::span<float* const> /*grads*/, ConstView grad_output) const override {
    return grad_output;
  }
};

struct NoState final : UnitContext {
  [[nodiscard]] std::size_t bytes() const noexcept override { return 0; }
};

TEST(UnitErrors, HalvesOfBackwardAreUnsupportedWithoutTheSplit) {
  // The SDK's default halves refuse, naming the unit; every in-tree unit
  // overrides them.
  const WholeBackwardOnly unit;
  EXPECT_EQ(unit.flags() & TESSERA_UNIT_SPLIT_BACKWARD, 0u);
  NoState ctx;
  const std::vector<const float*> params;
  const std::vector<float*> grads;
  for (int half = 0; half < 2; ++half) {
    try {
      if (half == 0) {
        (void)unit.backward_input(ctx, params, {});
      } else {
        unit.backward_weight(ctx, params, grads);
      }
      ADD_FAILURE() << "half " << half << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(e.what()).find("unit 'plain' does not split its backward pass into "
                                           "input and weight halves"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(UnitErrors, ATensorParallelGroupIsRefusedByAUnitWithoutTheFlag) {
  // The C adapter refuses a group of more than one rank for a unit that
  // does not declare TESSERA_UNIT_TENSOR_PARALLEL, naming it; every in-tree
  // unit declares it.
  const WholeBackwardOnly unit;
  EXPECT_EQ(unit.flags() & TESSERA_UNIT_TENSOR_PARALLEL, 0u);
  const sdk::model::detail::ModelHandle handle;
  tessera_tp_group tp{};
  tp.struct_size = sizeof tp;
  tp.rank = 0;
  tp.size = 2;
  tessera_unit_call call{};
  call.struct_size = sizeof call;
  call.tp = &tp;
  sdk::model::detail::CallParts parts;
  try {
    sdk::model::detail::read_call(handle, unit, &call, false, parts);
    ADD_FAILURE() << "a group of 2 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find(
                  "unit 'plain' does not support tensor parallelism (group of 2 ranks)"),
              std::string::npos)
        << e.what();
  }
  tp.size = 1;  // one rank: whole parameters, accepted
  EXPECT_NO_THROW(sdk::model::detail::read_call(handle, unit, &call, false, parts));
}

TEST(UnitErrors, BadTiesAreRefused) {
  std::vector<std::unique_ptr<Unit>> units;
  units.push_back(std::make_unique<GptEmbedding>("embed", 5, 4, 3));
  units.push_back(std::make_unique<GptHead>("head", 5, 4, "embed.missing"));
  const std::string msg = message_of([&] { sdk::model::Model("gpt", std::move(units), {}); });
  EXPECT_NE(msg.find("head.wte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("embed.missing"), std::string::npos) << msg;

  std::vector<std::unique_ptr<Unit>> shapes;
  shapes.push_back(std::make_unique<GptEmbedding>("embed", 5, 4, 3));
  shapes.push_back(std::make_unique<GptHead>("head", 6, 4, "embed.wte"));
  EXPECT_NE(
      message_of([&] { sdk::model::Model("gpt", std::move(shapes), {}); }).find("another shape"),
      std::string::npos);

  std::vector<std::unique_ptr<Unit>> order;
  order.push_back(std::make_unique<GptHead>("head", 5, 4, ""));
  order.push_back(std::make_unique<GptEmbedding>("embed", 5, 4, 3));
  EXPECT_NE(
      message_of([&] { sdk::model::Model("gpt", std::move(order), {}); }).find("first-unit flag"),
      std::string::npos);
}

}  // namespace
}  // namespace tessera::model
