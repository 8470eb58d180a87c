// Plain SGD with the reference trainer on synthetic data: the loss falls.
#include <gtest/gtest.h>

#include <utility>

#include "../support/models.hpp"
#include "tessera/core/data/synthetic.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/sdk/rng.hpp"

namespace tessera::model {
namespace {

// Trains `model` for `steps` SGD steps of `batch_size` examples from
// `data`; returns the mean loss of the first and the last step.
std::pair<double, double> train(const Model& model, const Dataset& data, int64_t batch_size,
                                int steps, float lr) {
  ModelParams params(model), grads(model);
  params.init(model, 1234);
  const DataShape& shape = model.data_shape();
  const int64_t per = shape.is_sequence() ? shape.seq_len : 1;
  const float scale = 1.0f / static_cast<float>(batch_size * per);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < steps; ++step) {
    Batch batch = Batch::make(batch_size, shape.seq_len, shape.features);
    for (int64_t row = 0; row < batch_size; ++row) {
      data.fill(sample_key(99, static_cast<uint64_t>(step), static_cast<uint64_t>(row)), batch,
                row);
    }
    grads.zero();
    const double loss = reference_forward_backward(model, params, grads, batch, scale);
    if (step == 0) first = loss;
    last = loss;
    for (std::size_t u = 0; u < model.size(); ++u) {
      for (std::size_t j = 0; j < model.params(u).size(); ++j) {
        const ParamRef ref = model.owner(u, j);
        if (!(ref == ParamRef{u, j})) continue;
        const auto p = params.at(ref);
        const auto g = std::as_const(grads).at(ref);
        for (std::size_t k = 0; k < p.size(); ++k) p[k] -= lr * g[k];
      }
    }
  }
  return {first, last};
}

TEST(ReferenceTraining, TinyGptLossFalls) {
  ModelSection s;
  s.name = "gpt";
  s.params = toml::parse("vocab = 8\nlayers = 1\nd_model = 16\nheads = 2\nseq_len = 8");
  const auto model = make_model(s, test::model_plugins());
  const SyntheticSequences data(model->data_shape(), 5, 0.05);
  const auto [first, last] = train(*model, data, 8, 30, 0.5f);
  EXPECT_LT(last, first);
  EXPECT_LT(last, first - 0.1) << "first " << first << " last " << last;
}

TEST(ReferenceTraining, TinyLlamaLossFalls) {
  ModelSection s;
  s.name = "llama";
  s.params =
      toml::parse("vocab = 8\nlayers = 1\nd_model = 16\nheads = 4\nkv_heads = 2\nseq_len = 8");
  const auto model = make_model(s, test::model_plugins());
  const SyntheticSequences data(model->data_shape(), 5, 0.05);
  const auto [first, last] = train(*model, data, 8, 30, 0.5f);
  EXPECT_LT(last, first - 0.1) << "first " << first << " last " << last;
}

TEST(ReferenceTraining, MlpLossFalls) {
  ModelSection s;
  s.name = "mlp";
  s.params = toml::parse("input = 6\nhidden = [16]\nclasses = 3");
  const auto model = make_model(s, test::model_plugins());
  const SyntheticClusters data(model->data_shape(), 5, 3.0);
  const auto [first, last] = train(*model, data, 16, 30, 0.5f);
  EXPECT_LT(last, first - 0.1) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace tessera::model
