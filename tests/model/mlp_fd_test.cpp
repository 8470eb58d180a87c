// Finite-difference checks of the mlp's units.
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "mlp.hpp"

namespace tessera::model {
namespace {

using testing::expect_gradients_match;
using testing::random_values;

Batch classification_batch(int64_t size, int64_t features, int64_t classes, uint64_t seed) {
  Batch batch = Batch::make(size, 0, features);
  batch.inputs = random_values(size * features, 1.0f, seed);
  for (int64_t i = 0; i < size; ++i)
    batch.targets[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % classes);
  return batch;
}

TEST(MlpGradients, FirstDenseLayerRelu) {
  const DenseUnit unit("layer0", 5, 6, kernels::Activation::relu, true);
  const Batch batch = classification_batch(4, 5, 3, 11);
  expect_gradients_match(unit, batch, {}, 0, 0.5f, 1e-3f, 21);
}

TEST(MlpGradients, HiddenDenseLayerRelu) {
  const DenseUnit unit("layer1", 6, 4, kernels::Activation::relu, false);
  const Batch batch = classification_batch(4, 5, 3, 12);
  expect_gradients_match(unit, batch, random_values(4 * 6, 1.0f, 13), 6, 0.5f, 1e-3f, 22);
}

TEST(MlpGradients, HiddenDenseLayerGelu) {
  const DenseUnit unit("layer1", 6, 4, kernels::Activation::gelu, false);
  const Batch batch = classification_batch(4, 5, 3, 14);
  expect_gradients_match(unit, batch, random_values(4 * 6, 1.0f, 15), 6, 0.5f, 1e-2f, 23);
}

TEST(MlpGradients, ClassifierHeadAfterHiddenLayers) {
  const ClassifierHead unit("head", 6, 3, false);
  const Batch batch = classification_batch(5, 4, 3, 16);
  expect_gradients_match(unit, batch, random_values(5 * 6, 1.0f, 17), 6, 0.5f, 1e-2f, 24);
}

TEST(MlpGradients, ClassifierHeadAsOnlyUnit) {
  const ClassifierHead unit("head", 4, 3, true);
  const Batch batch = classification_batch(5, 4, 3, 18);
  expect_gradients_match(unit, batch, {}, 0, 0.5f, 1e-2f, 25);
}

}  // namespace
}  // namespace tessera::model
