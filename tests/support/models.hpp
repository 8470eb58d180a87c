// Models for tests: the in-tree model plugins (mlp, gpt) built from a
// [model] table given as TOML text, and a unit's view of a core Batch.
#pragma once

#include <memory>
#include <string>

#include <toml++/toml.h>

#include "tessera/core/data/batch.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/model.hpp"

#ifndef TESSERA_TEST_MODEL_PLUGIN_DIR
#error "TESSERA_TEST_MODEL_PLUGIN_DIR must name the directory of the in-tree plugins"
#endif

namespace tessera::test {

// A registry of the in-tree plugins, scanned once.
inline const PluginRegistry& model_plugins() {
  static const PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();  // never destroyed: models may outlive statics
    r->scan({TESSERA_TEST_MODEL_PLUGIN_DIR});
    return r;
  }();
  return *registry;
}

// The [model] section `name` with the keys of `params` (TOML text).
inline ModelSection model_section(const std::string& name, const std::string& params) {
  ModelSection s;
  s.name = name;
  s.params = toml::parse(params);
  s.params_where = "test [model]";
  return s;
}

// The model plugin `name` built from `params` (TOML text).
inline std::unique_ptr<model::Model> build_model(const std::string& name,
                                                 const std::string& params) {
  return model::make_model(model_section(name, params), model_plugins());
}

// What a unit reads of `batch` (borrows it).
inline sdk::model::BatchView view_of(const Batch& batch) {
  sdk::model::BatchView view;
  view.size = batch.size;
  view.seq_len = batch.seq_len;
  view.features = batch.features;
  view.tokens = batch.tokens;
  view.targets = batch.targets;
  view.inputs = batch.inputs;
  return view;
}

}  // namespace tessera::test
