// The `tensor` strategy (see tensor_strategy.hpp).
#include "tensor_strategy.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/parallel_estimate.hpp"
#include "tessera/sdk/step_frame.hpp"

namespace tessera::strategies {

void TensorStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                           int32_t world_size) {
  (void)TensorOptions::read(options, world_size);
}

sdk::Estimate TensorStrategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                       const sdk::EstimateArgs& args) {
  const TensorOptions o = TensorOptions::read(options, args.world_size);
  const sdk::ModelDesc& model = args.model;
  const int32_t t = o.size;
  const int32_t r = args.world_size / t;
  sdk::parallel_estimate::require_tensor_parallel(model, t, o.sequence, "tensor", "size");
  const int64_t micro = model.micro_examples(r);
  const int64_t m = model.micro_batches();
  const int32_t units = model.num_units();
  int64_t held = 0;
  int64_t replicated = 0;
  int64_t tp_bytes = 0;
  int64_t tp_messages = 0;
  for (int32_t u = 0; u < units; ++u) {
    const tessera_unit_desc& d = model.unit(u);
    held += sdk::parallel_estimate::held_params(d, t);
    replicated += d.params - d.split_params;
    const sdk::parallel_estimate::UnitTraffic tr =
        sdk::parallel_estimate::unit_traffic(model, u, micro, t);
    tp_bytes += tr.bytes * m;
    tp_messages += tr.messages * m;
    if (sdk::checkpointed_unit(o.checkpoint_every, u, units)) {
      // The recomputed forward's collectives.
      const sdk::parallel_estimate::UnitTraffic fw =
          sdk::parallel_estimate::forward_traffic(model, u, micro, t, o.sequence);
      tp_bytes += fw.bytes * m;
      tp_messages += fw.messages * m;
    }
  }
  // One context per unit, reused by every micro-batch (fewer kept with
  // checkpointing).
  const sdk::parallel_estimate::RangeActivations activations =
      sdk::parallel_estimate::range_activations(model, 0, units, micro, t, o.sequence,
                                                o.checkpoint_every);
  sdk::Estimate e;
  e.data_size = r;
  e[TESSERA_MEM_PARAMS] = 4 * held;
  e[TESSERA_MEM_GRADS] = 4 * held;
  e[TESSERA_MEM_OPTIMIZER] = 4 * static_cast<int64_t>(model.optimizer_slots()) * held;
  e[TESSERA_MEM_ACTIVATIONS] = activations.held + activations.recompute;
  if (t > 1) {
    // The norm (a double), and in sequence mode the replicated gradients.
    tp_bytes += sdk::parallel_estimate::allreduce(8, t);
    tp_messages += 1;
    if (o.sequence) {
      tp_bytes += sdk::parallel_estimate::allreduce(4 * replicated, t);
      tp_messages += 1;
    }
    e.add_traffic("tensor", t, tp_bytes, tp_messages);
  }
  if (r > 1) e.add_traffic("data", r, sdk::parallel_estimate::allreduce(4 * held, r), 1);
  const auto examples = static_cast<double>(model.slice_examples(r));
  e.compute_flops =
      (model.flops(0, units, examples) +
       sdk::parallel_estimate::recompute_flops(model, 0, units, o.checkpoint_every, examples)) /
      t;
  return e;
}

TensorStrategy::TensorStrategy(const sdk::Host& host, const sdk::Options& options,
                               sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      options_(TensorOptions::read(options, env.world_size())),
      mesh_({{"dp", env.world_size() / options_.size}, {"tp", options_.size}}, env.world_size(),
            env.rank()),
      tp_size_(mesh_.size("tp")),
      dp_size_(mesh_.size("dp")),
      tp_rank_(mesh_.coord("tp")),
      dp_rank_(mesh_.coord("dp")),
      flat_(env.model()),
      param_ptrs_(flat_),
      grad_ptrs_(flat_),
      runner_(host, env.model(), env.rank(), true, options_.checkpoint_every) {
  const sdk::ModelView& model = env.model();
  plan(model);  // refuses before any collective, so every rank refuses alike
  tp_ = mesh_.group(env.world(), {"tp"});
  dp_ = mesh_.group(env.world(), {"dp"});
  params_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_PARAMS, shards_.total());
  grads_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_GRADS, shards_.total());
  optim_ = env.optimizer().make_state(shards_.total());
  for (size_t i = 0; i < shards_.entries(); ++i) {
    param_ptrs_.bind_entry(i, params_.data() + shards_.held(i).at);
    grad_ptrs_.bind_entry(i, grads_.data() + shards_.held(i).at);
  }
  // The units' collectives go through a table that counts them.
  group_ = std::make_unique<sdk::TensorGroup>(*tp_, group_flags());
  // No group for one rank: the units run their single-rank arithmetic.
  runner_.set_tp_group(group_->get());
  if (env.rank() == 0) {
    host_.info("tensor: ", tp_size_, " ranks per tensor group x ", dp_size_,
               " data-parallel replicas, mode ", options_.sequence ? "sequence" : "tensor",
               "; a rank holds ", shards_.total(), " of ", flat_.total(), " parameter elements (",
               shards_.split_total(), " in shards)");
  }
}

void TensorStrategy::plan(const sdk::ModelView& model) {
  sdk::require_tensor_parallel(model, tp_size_, group_flags(), "tensor", "size");
  // Split tensors first, then the replicated ones: the norm counts the
  // second range on one rank of the group only.
  shards_ = sdk::TensorShards(flat_, model, tp_size_, tp_rank_, "tensor");
  if (env_.rank() == 0) {
    for (const size_t i : shards_.kept_whole()) {
      const sdk::FlatEntry& e = flat_.entry(i);
      host_.info("tensor: '", e.full_name, "' ", sdk::TensorShards::shape_text(e.shape),
                 ": size = ", tp_size_, " does not divide its last dimension (", e.shape.back(),
                 "), so the last unit keeps it whole on every rank (replicated)");
    }
  }
}

tessera_strategy_layout TensorStrategy::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = dp_rank_;
  l.data_size = dp_size_;
  return l;
}

void TensorStrategy::load(const sdk::StateReader& reader) {
  shards_.read(reader, flat_, env_.optimizer(), params_.span(), optim_);
}

void TensorStrategy::save(const sdk::StateWriter& writer) {
  if (dp_rank_ != 0 && !writer.all_replicas()) return;
  // Each element once: a replicated tensor from the group's first rank.
  shards_.write(writer, flat_, env_.optimizer(), params_.span(), optim_,
                tp_rank_ == 0 || writer.all_replicas());
}

double TensorStrategy::forward_backward(const sdk::StepArgs& args) {
  const double loss = runner_.run(args.micro_batches, args.loss_scales, param_ptrs_, grad_ptrs_);
  // Every rank of the group computed the whole loss; the host sums the
  // ranks' losses, so one rank per group reports it.
  return tp_rank_ == 0 ? loss : 0.0;
}

double TensorStrategy::sum_squares() {
  // Shards summed over the tensor group; replicated tensors (the same on
  // every rank of the group) counted once; the replicas hold the same sums.
  const std::span<const float> all = grads_.span();
  double total = host_.sum_squares(all.subspan(0, static_cast<size_t>(shards_.split_total())));
  if (tp_rank_ == 0)
    total += host_.sum_squares(all.subspan(static_cast<size_t>(shards_.split_total())));
  if (tp_->size() > 1) tp_->allreduce(std::span<double>(&total, 1));
  return total;
}

sdk::StepResult TensorStrategy::step(const sdk::StepArgs& args) {
  const int64_t units_bytes_before = group_->bytes_sent();
  const int64_t units_wait_before = group_->wait_ns();
  const sdk::CommStats tp_before = tp_->stats();
  const sdk::CommStats dp_before = dp_->stats();
  sdk::StepResult result = sdk::run_step(
      args, {&env_.world(), tp_.get(), dp_.get()},
      {.zero_grads = [&] { grads_.zero(); },
       .forward_backward = [&] { return forward_backward(args); },
       .finish =
           [&] {
             // Under sequence parallelism each rank's replicated gradients
             // cover its token rows only: their sum over the group is the
             // whole gradient.
             if (options_.sequence && tp_->size() > 1) {
               tp_->allreduce(grads_.span().subspan(static_cast<size_t>(shards_.split_total())));
             }
             if (dp_->size() > 1) dp_->allreduce(grads_.span());
           },
       .sum_squares = [&] { return sum_squares(); },
       .update =
           [&](float factor) {
             host_.scale(grads_.span(), factor);
             env_.optimizer().step(optim_, 0, params_.span(), grads_.span(), args.step, args.lr);
           }});
  const int64_t unit_bytes = group_->bytes_sent() - units_bytes_before;
  result.comm_bytes += unit_bytes;
  result.comm_wait_ns += group_->wait_ns() - units_wait_before;
  const int64_t tp_bytes = unit_bytes + tp_->stats().bytes_sent - tp_before.bytes_sent;
  const int64_t dp_bytes = dp_->stats().bytes_sent - dp_before.bytes_sent;
  host_.debug("tensor: step ", args.step, " rank ", env_.rank(), ": tensor group sent ", tp_bytes,
              " bytes (units ", unit_bytes, "), data-parallel group sent ", dp_bytes, " bytes");
  return result;
}

}  // namespace tessera::strategies
