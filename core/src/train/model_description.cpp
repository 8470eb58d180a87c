// ModelDescription: a model's units as tessera_model_desc.
#include "tessera/core/train/model_description.hpp"

#include <utility>

namespace tessera::train {

ModelDescription::ModelDescription(const model::Model& model, const BatchSpec& batch)
    : name_(model.name()) {
  for (std::size_t u = 0; u < model.size(); ++u) {
    const tessera_unit_cost cost = model.unit_cost(u);
    UnitSpec unit;
    unit.name = model.unit_name(u);
    unit.flags = model.unit_flags(u);
    unit.num_tensors = 0;
    const auto params = model.params(u);
    for (std::size_t k = 0; k < params.size(); ++k) {
      const model::ParamSpec& p = params[k];
      if (!p.tied_to.empty()) {
        unit.tied_params += p.numel();
        unit.tied_unit = static_cast<int32_t>(model.owner(u, k).unit);
        continue;
      }
      unit.params += p.numel();
      ++unit.num_tensors;
      if (p.split != sdk::model::SplitHint::none) unit.split_params += p.numel();
    }
    unit.forward_flops = cost.forward_flops;
    unit.backward_flops = cost.backward_flops;
    unit.activation_bytes = cost.activation_bytes;
    unit.output_bytes = cost.output_bytes;
    unit.split_activation_bytes = cost.split_activation_bytes;
    unit.sequence_activation_bytes = cost.sequence_activation_bytes;
    units_.push_back(std::move(unit));
  }
  desc_.struct_size = sizeof desc_;
  desc_.seq_len = model.data_shape().is_sequence() ? model.data_shape().seq_len : 0;
  desc_.global_batch = batch.global_batch;
  desc_.micro_batches = batch.micro_batches;
  desc_.optimizer_slots = batch.optimizer_slots;
  desc_.model_api = model.api();
  desc_.model = model.handle();
  link();
}

ModelDescription::ModelDescription(std::string name, std::vector<UnitSpec> units, int64_t seq_len,
                                   const BatchSpec& batch)
    : name_(std::move(name)), units_(std::move(units)) {
  desc_.struct_size = sizeof desc_;
  desc_.seq_len = seq_len;
  desc_.global_batch = batch.global_batch;
  desc_.micro_batches = batch.micro_batches;
  desc_.optimizer_slots = batch.optimizer_slots;
  link();
}

ModelDescription::ModelDescription(const ModelDescription& other)
    : name_(other.name_), units_(other.units_), desc_(other.desc_) {
  link();
}

int64_t ModelDescription::params() const noexcept {
  int64_t n = 0;
  for (const UnitSpec& u : units_) n += u.params;
  return n;
}

void ModelDescription::link() {
  c_units_.clear();
  c_units_.reserve(units_.size());
  for (const UnitSpec& u : units_) {
    tessera_unit_desc d{};
    d.struct_size = sizeof d;
    d.flags = u.flags;
    d.name = u.name.c_str();
    d.params = u.params;
    d.split_params = u.split_params;
    d.tied_params = u.tied_params;
    d.num_tensors = u.num_tensors;
    d.tied_unit = u.tied_unit;
    d.forward_flops = u.forward_flops;
    d.backward_flops = u.backward_flops;
    d.activation_bytes = u.activation_bytes;
    d.output_bytes = u.output_bytes;
    d.split_activation_bytes = u.split_activation_bytes;
    d.sequence_activation_bytes = u.sequence_activation_bytes;
    c_units_.push_back(d);
  }
  desc_.num_units = static_cast<int32_t>(c_units_.size());
  desc_.units = c_units_.data();
  desc_.name = name_.c_str();
}

}  // namespace tessera::train
