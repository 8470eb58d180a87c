// Small fixtures shared by the strategy-host tests: tiny reference models,
// deterministic batches, bit comparison and the host's last_error.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "support/models.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/model/model.hpp"

namespace tessera::test {

// A gpt of two blocks (vocab 11, d_model 8, seq_len 5).
inline std::unique_ptr<model::Model> tiny_gpt(bool tied_head) {
  ModelSection s;
  s.name = "gpt";
  s.params = toml::parse("vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5");
  s.params.insert_or_assign("tied_head", tied_head);
  s.params_where = "test [model]";
  return model::make_model(s, model_plugins());
}

// An mlp 6 -> 7 -> 5 -> 3 classes.
inline std::unique_ptr<model::Model> tiny_mlp() {
  ModelSection s;
  s.name = "mlp";
  s.params = toml::parse("input = 6\nhidden = [7, 5]\nclasses = 3");
  s.params_where = "test [model]";
  return model::make_model(s, model_plugins());
}

// `size` examples for `model`, a pure function of `seed`.
inline Batch batch_for(const model::Model& model, int64_t size, uint32_t seed) {
  std::mt19937 gen(seed);
  const DataShape& shape = model.data_shape();
  if (shape.is_sequence()) {
    Batch b = Batch::make(size, shape.seq_len, 0);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(shape.vocab) - 1);
    for (auto& t : b.tokens) t = token(gen);
    for (auto& t : b.targets) t = token(gen);
    return b;
  }
  Batch b = Batch::make(size, 0, shape.features);
  std::normal_distribution<float> value(0.0F, 1.0F);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(shape.classes) - 1);
  for (auto& x : b.inputs) x = value(gen);
  for (auto& t : b.targets) t = label(gen);
  return b;
}

// Normal(0, scale) values, a pure function of `seed`.
inline std::vector<float> random_values(std::size_t n, uint32_t seed, float scale = 1.0F) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// What the host's last_error returns now, as a plugin would read it.
inline std::string last_error() {
  static const HostContext host("strategy.test");
  const tessera_host_api* api = host.api();
  return api->last_error(api->ctx);
}

}  // namespace tessera::test
