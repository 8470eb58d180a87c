// Model assembly, parameter storage and the reference trainer (see model.hpp).
#include "tessera/core/model/model.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "tessera/core/model/gpt.hpp"
#include "tessera/core/model/mlp.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {

const char* split_hint_name(SplitHint hint) noexcept {
  switch (hint) {
    case SplitHint::column:
      return "column";
    case SplitHint::row:
      return "row";
    default:
      return "none";
  }
}

int64_t ParamSpec::numel() const noexcept {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

Model::Model(std::string name, std::vector<std::unique_ptr<Unit>> units, DataShape shape)
    : name_(std::move(name)), units_(std::move(units)), shape_(shape) {
  const auto fail = [this](const std::string& what) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, "model '" + name_ + "': " + what);
  };
  if (units_.empty()) fail("has no units");
  std::set<std::string> names;
  for (std::size_t i = 0; i < units_.size(); ++i) {
    const Unit& u = *units_[i];
    if (!names.insert(u.name()).second) fail("unit name '" + u.name() + "' repeats");
    if (u.is_first() != (i == 0)) fail("unit '" + u.name() + "' has a wrong first-unit flag");
    if (u.is_last() != (i + 1 == units_.size())) {
      fail("unit '" + u.name() + "' has a wrong last-unit flag");
    }
  }
  owners_.resize(units_.size());
  for (std::size_t i = 0; i < units_.size(); ++i) {
    const auto specs = units_[i]->params();
    for (std::size_t j = 0; j < specs.size(); ++j) {
      const ParamSpec& spec = specs[j];
      if (spec.tied_to.empty()) {
        owners_[i].push_back({i, j});
        continue;
      }
      const std::string where = "parameter '" + units_[i]->name() + "." + spec.name + "'";
      const auto dot = spec.tied_to.find('.');
      if (dot == std::string::npos) fail(where + " ties to '" + spec.tied_to + "' (no '.')");
      const std::string unit_name = spec.tied_to.substr(0, dot);
      const std::string param_name = spec.tied_to.substr(dot + 1);
      bool found = false;
      for (std::size_t k = 0; k < units_.size() && !found; ++k) {
        if (units_[k]->name() != unit_name) continue;
        const auto other = units_[k]->params();
        for (std::size_t m = 0; m < other.size(); ++m) {
          if (other[m].name != param_name) continue;
          if (!other[m].tied_to.empty()) fail(where + " ties to a tied parameter");
          if (other[m].shape != spec.shape) fail(where + " ties to one of another shape");
          owners_[i].push_back({k, m});
          found = true;
          break;
        }
      }
      if (!found) fail(where + " ties to missing '" + spec.tied_to + "'");
    }
  }
}

ParamRef Model::owner(std::size_t unit, std::size_t param) const {
  return owners_.at(unit).at(param);
}

int64_t Model::parameter_count() const noexcept {
  int64_t n = 0;
  for (const auto& u : units_) {
    for (const ParamSpec& s : u->params()) {
      if (s.tied_to.empty()) n += s.numel();
    }
  }
  return n;
}

std::unique_ptr<Model> make_model(const ModelSection& section) {
  if (section.name == "mlp") {
    const MlpConfig config = parse_mlp_config(section.params, section.params_where);
    return std::make_unique<Model>("mlp", build_mlp_units(config),
                                   DataShape::classification(config.input, config.classes));
  }
  if (section.name == "gpt") {
    const GptConfig config = parse_gpt_config(section.params, section.params_where);
    return std::make_unique<Model>("gpt", build_gpt_units(config),
                                   DataShape::sequences(config.seq_len, config.vocab));
  }
  throw Error(
      TESSERA_ERR_INVALID_ARGUMENT,
      detail::concat(section.params_where.empty() ? "[model]" : section.params_where,
                     ": key 'name' names unknown model '", section.name, "' (known: mlp, gpt)"));
}

ModelParams::ModelParams(const Model& model) {
  buffers_.resize(model.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (const ParamSpec& s : model.unit(i).params()) {
      buffers_[i].emplace_back(s.tied_to.empty() ? static_cast<std::size_t>(s.numel()) : 0, 0.0f);
    }
  }
  ptrs_.resize(model.size());
  cptrs_.resize(model.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (std::size_t j = 0; j < buffers_[i].size(); ++j) {
      const ParamRef ref = model.owner(i, j);
      float* p = buffers_[ref.unit][ref.param].data();
      ptrs_[i].push_back(p);
      cptrs_[i].push_back(p);
    }
  }
}

std::vector<float> ModelParams::flatten() const {
  std::vector<float> out;
  for (const auto& unit : buffers_) {
    for (const auto& b : unit) out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

void ModelParams::zero() {
  for (auto& unit : buffers_) {
    for (auto& b : unit) std::fill(b.begin(), b.end(), 0.0f);
  }
}

void ModelParams::init(const Model& model, uint64_t seed) {
  for (std::size_t i = 0; i < model.size(); ++i) model.unit(i).init(unit(i), seed);
}

namespace {

// Runs every unit forward on fresh contexts; returns them and the loss.
double run_forward(const Model& model, const ModelParams& params, const Batch& batch,
                   float loss_scale, std::vector<std::unique_ptr<UnitContext>>& contexts) {
  contexts.clear();
  UnitInput input;
  input.batch = &batch;
  input.loss_scale = loss_scale;
  ConstView out;
  for (std::size_t i = 0; i < model.size(); ++i) {
    contexts.push_back(model.unit(i).make_context());
    out = model.unit(i).forward(*contexts.back(), params.unit_const(i), input);
    input.x = out;
  }
  const float* loss = out.data;
  if (loss == nullptr || out.rows * out.cols != 1) {
    throw Error(TESSERA_ERR_INTERNAL, "model '" + model.name() + "': last unit returned no loss");
  }
  return static_cast<double>(*loss);
}

}  // namespace

double reference_loss(const Model& model, const ModelParams& params, const Batch& batch,
                      float loss_scale) {
  std::vector<std::unique_ptr<UnitContext>> contexts;
  return run_forward(model, params, batch, loss_scale, contexts);
}

double reference_forward_backward(const Model& model, const ModelParams& params, ModelParams& grads,
                                  const Batch& batch, float loss_scale) {
  std::vector<std::unique_ptr<UnitContext>> contexts;
  const double loss = run_forward(model, params, batch, loss_scale, contexts);
  ConstView grad;
  for (std::size_t i = model.size(); i-- > 0;) {
    grad = model.unit(i).backward(*contexts[i], params.unit_const(i), grads.unit(i), grad);
  }
  return loss;
}

}  // namespace tessera::model
