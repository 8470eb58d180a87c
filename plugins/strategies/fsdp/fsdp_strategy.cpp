// The `fsdp` strategy (see fsdp_strategy.hpp).
#include "fsdp_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_state.hpp"

namespace tessera::strategies {

// The runner's callbacks. full_shard: gather before each unit's forward and
// backward (prefetching the next unit in the pass's direction) and free the
// others; shard_grad_op: gather before the forward only and keep until the
// unit's backward is done; G = 1: parameters are bound in place.
class FsdpHooks final : public sdk::RunnerHooks {
 public:
  explicit FsdpHooks(FsdpStrategy& s) : s_(s) {}
  void before_forward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, s_.next_other(unit, 1),
                s_.options_.sharding != ShardingStrategy::kShardGradOp);
  }
  void before_backward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, s_.next_other(unit, -1),
                s_.options_.sharding != ShardingStrategy::kShardGradOp);
    s_.bind_grads(unit);
  }
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    s_.finish_unit(unit, last_micro);
  }

 private:
  FsdpStrategy& s_;
};

void FsdpStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                         int32_t world_size) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT, "strategy 'fsdp' needs at least ",
                "one rank, but the world size is ", world_size);
  (void)FsdpOptions::read(options, world_size);
}

FsdpStrategy::FsdpStrategy(const sdk::Host& host, const sdk::Options& options,
                           sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      options_(FsdpOptions::read(options, env.world_size())),
      group_size_(options_.group_size(env.world_size())),
      layout_(env.model()),
      shards_(layout_, group_size_, env.rank() % group_size_,
              options_.min_params > 0
                  ? sdk::group_by_min_params(layout_, static_cast<uint64_t>(options_.min_params))
                  : std::vector<int32_t>{}),
      params_(host, env.rank(), TESSERA_MEM_PARAMS, static_cast<size_t>(shards_.shard_elements())),
      grads_(host, env.rank(), TESSERA_MEM_GRADS, static_cast<size_t>(shards_.shard_elements())),
      optim_(env.optimizer().make_state(shards_.shard_elements())),
      param_ptrs_(layout_),
      grad_ptrs_(layout_),
      runner_(host, env.model(), env.rank()) {
  done_at_.resize(static_cast<size_t>(shards_.model_units()));
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    done_at_[static_cast<size_t>(shards_.grad_done(o))].push_back(o);
  }
  if (group_size_ == 1) {
    // Every piece is its whole unit: bind the slots in place, once.
    for (int32_t o = 0; o < shards_.num_units(); ++o) {
      bind_owner(param_ptrs_, o, param_piece(o).data());
      bind_owner(grad_ptrs_, o, grad_piece(o).data());
    }
  }
  if (env.rank() == 0) {
    host_.debug("fsdp: ", sharding_name(options_.sharding), ", ", layout_.total(),
                " parameters in ", shards_.model_units(), " model units wrapped into ",
                shards_.num_units(), " FSDP units, sharding groups of ", group_size_, " ranks, ",
                env.world_size() / group_size_, " replicas, shard of ", shards_.shard_elements(),
                " elements per rank, parameters gathered in ", dtype_name(options_.param_dtype),
                ", gradients reduced in ", dtype_name(options_.reduce_dtype));
  }
}

tessera_strategy_layout FsdpStrategy::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = env_.rank();
  l.data_size = env_.world_size();
  return l;
}

void FsdpStrategy::ensure_comms() {
  if (comms_ready_) return;
  sdk::CommView& world = env_.world();
  const int32_t n = env_.world_size();
  const int32_t index = env_.rank() / group_size_;  // which group
  const int32_t inner = env_.rank() % group_size_;  // position inside it
  if (group_size_ > 1 && group_size_ < n) {
    group_split_ = world.split(index, inner);
    replica_split_ = world.split(inner, index);
    TESSERA_CHECK(group_split_ != nullptr && replica_split_ != nullptr, TESSERA_ERR_INTERNAL,
                  "fsdp: rank ", env_.rank(), ": comm_split returned no communicator");
    replicas_ = replica_split_.get();
  } else if (group_size_ == 1 && n > 1) {
    replicas_ = &world;
  }
  if (group_size_ > 1) {
    gather_ = std::make_unique<sdk::UnitGather>(host_, group(), shards_, env_.rank(),
                                                options_.param_dtype);
    // hybrid_shard: each reduced piece is summed over the replicas too.
    reducer_ = std::make_unique<sdk::UnitReducer>(host_, group(), shards_, options_.reduce_dtype,
                                                  env_.rank(), replicas_);
  }
  comms_ready_ = true;
}

sdk::CommView& FsdpStrategy::group() {
  return group_split_ != nullptr ? *group_split_ : env_.world();
}

std::span<float> FsdpStrategy::param_piece(int32_t u) {
  const sdk::UnitShard& s = shards_.unit(u);
  return params_.span().subspan(static_cast<size_t>(s.shard_offset),
                                static_cast<size_t>(s.shard.shard_size));
}

std::span<float> FsdpStrategy::grad_piece(int32_t u) {
  const sdk::UnitShard& s = shards_.unit(u);
  return grads_.span().subspan(static_cast<size_t>(s.shard_offset),
                               static_cast<size_t>(s.shard.shard_size));
}

void FsdpStrategy::bind_owner(sdk::SlotPointers& ptrs, int32_t owner, float* base) {
  const uint64_t begin = shards_.unit(owner).unit.begin;
  for (const size_t i : shards_.entries(owner)) {
    ptrs.bind_entry(i, base != nullptr ? base + (layout_.entry(i).offset - begin) : nullptr);
  }
}

int32_t FsdpStrategy::next_other(int32_t m, int32_t direction) const {
  const std::vector<int32_t>& mine = shards_.owners(m);
  for (int32_t n = m + direction; n >= 0 && n < shards_.model_units(); n += direction) {
    for (const int32_t o : shards_.owners(n)) {
      if (std::find(mine.begin(), mine.end(), o) == mine.end()) return n;
    }
  }
  return -1;
}

void FsdpStrategy::use_unit(int32_t u, int32_t next, bool free_others) {
  if (gather_ == nullptr) return;  // G = 1: bound in place
  const std::vector<int32_t>& needed = shards_.owners(u);
  static const std::vector<int32_t> kNone;
  // The next unit's FSDP units are kept when already gathered, with or
  // without prefetching, so prefetch changes only when gathers start.
  const std::vector<int32_t>& ahead = next >= 0 ? shards_.owners(next) : kNone;
  const auto in = [](const std::vector<int32_t>& v, int32_t o) {
    return std::find(v.begin(), v.end(), o) != v.end();
  };
  if (free_others) {
    for (int32_t o = 0; o < shards_.num_units(); ++o) {
      if (gather_->held(o) && !in(needed, o) && !in(ahead, o)) {
        bind_owner(param_ptrs_, o, nullptr);
        gather_->release(o);
      }
    }
  }
  for (const int32_t o : needed) bind_owner(param_ptrs_, o, gather_->ready(o, param_piece(o)));
  if (!options_.prefetch) return;
  for (const int32_t o : ahead) gather_->start(o, param_piece(o));
}

void FsdpStrategy::bind_grads(int32_t u) {
  if (reducer_ == nullptr) return;  // G = 1: bound in place
  for (const int32_t o : shards_.owners(u)) bind_owner(grad_ptrs_, o, reducer_->grads(o));
}

void FsdpStrategy::finish_unit(int32_t u, bool last_micro) {
  const std::vector<int32_t>& done = done_at_[static_cast<size_t>(u)];
  if (gather_ != nullptr && options_.sharding == ShardingStrategy::kShardGradOp) {
    // No unit below u reads these parameters again in this backward.
    for (const int32_t o : done) {
      bind_owner(param_ptrs_, o, nullptr);
      gather_->release(o);
    }
  }
  if (!last_micro) return;  // the full gradients keep accumulating
  if (reducer_ == nullptr) {
    // G = 1: the gradients were accumulated in place.
    if (replicas_ == nullptr) return;
    for (const int32_t o : done) {
      sdk::allreduce_as(host_, *replicas_, grad_piece(o), options_.reduce_dtype, env_.rank());
    }
    return;
  }
  // The reduce-scatters started after the previous model unit ran during
  // this unit's backward; at most the FSDP units completed at one model
  // unit are in flight at a time.
  reducer_->finish_all();
  for (const int32_t o : done) {
    bind_owner(grad_ptrs_, o, nullptr);
    reducer_->start(o, grad_piece(o), /*blocking=*/false);
  }
  if (u == 0) reducer_->finish_all();
}

void FsdpStrategy::release_all() noexcept {
  if (reducer_ != nullptr) reducer_->abandon();
  if (gather_ == nullptr) return;
  gather_->release_all();
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    bind_owner(param_ptrs_, o, nullptr);
    bind_owner(grad_ptrs_, o, nullptr);
  }
}

void FsdpStrategy::load(const sdk::StateReader& reader) {
  const bool with_optimizer = sdk::has_optimizer_state(reader, layout_, env_.optimizer());
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    const sdk::FlatRange real = s.flat_real();
    if (real.empty()) continue;
    sdk::read_params(reader, layout_, real, param_piece(u).first(real.size()));
    if (with_optimizer) {
      sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, real, s.shard_offset);
    }
  }
}

sdk::StepResult FsdpStrategy::step(const sdk::StepArgs& args) {
  ensure_comms();
  const std::vector<sdk::CommView*> comms = {&env_.world(), group_split_.get(),
                                             replica_split_.get()};
  std::vector<sdk::CommStats> before;
  for (sdk::CommView* c : comms) before.push_back(c != nullptr ? c->stats() : sdk::CommStats{});
  const int64_t gathers_before = gather_ != nullptr ? gather_->allgathers() : 0;
  const int64_t scatters_before = reducer_ != nullptr ? reducer_->reduce_scatters() : 0;
  grads_.zero();  // the reducer adds each unit's reduced piece into it once
  sdk::StepResult result;
  try {
    FsdpHooks hooks(*this);
    result.loss =
        runner_.run(args.micro_batches, args.loss_scales, param_ptrs_, grad_ptrs_, &hooks);
    if (reducer_ != nullptr) reducer_->finish_all();
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
  // Inside a group each element's gradient lives on exactly one rank, and
  // every group holds the same reduced gradients: the group's sum is global.
  double total = 0.0;
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    total += sdk::sum_squares(grad_piece(u).first(shards_.unit(u).shard.real.size()));
  }
  if (group_size_ > 1) group().allreduce(std::span<double>(&total, 1));
  const float factor = sdk::clip_coefficient(total, args.max_grad_norm);
  result.grad_norm = sdk::global_grad_norm(total);
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    const auto real = static_cast<size_t>(s.shard.real.size());
    if (real == 0) continue;
    const std::span<float> grads = grad_piece(u).first(real);
    sdk::scale_in_place(grads, factor);
    env_.optimizer().step(optim_, s.shard_offset, param_piece(u).first(real), grads, args.step,
                          args.lr);
  }
  if (env_.rank() == 0 && gather_ != nullptr && host_.enabled(TESSERA_LOG_DEBUG)) {
    host_.debug("fsdp: step ", args.step, ": ", gather_->allgathers() - gathers_before,
                " allgathers and ", reducer_->reduce_scatters() - scatters_before,
                " reduce-scatters of ", shards_.num_units(), " FSDP units");
  }
  // The traffic of the split communicators counts too.
  for (size_t i = 0; i < comms.size(); ++i) {
    if (comms[i] == nullptr) continue;
    result.comm_wait_ns += comms[i]->stats().wait_ns - before[i].wait_ns;
    result.comm_bytes += comms[i]->stats().bytes_sent - before[i].bytes_sent;
  }
  return result;
}

void FsdpStrategy::save(const sdk::StateWriter& writer) {
  const bool first_group = env_.rank() / group_size_ == 0;
  if (writer.all_replicas()) ensure_comms();
  // The written parameters are the f32 masters, whatever param_dtype is.
  std::unique_ptr<sdk::UnitGather> exact;
  if (writer.all_replicas() && gather_ != nullptr) {
    exact = std::make_unique<sdk::UnitGather>(host_, group(), shards_, env_.rank());
  }
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    if (writer.all_replicas()) {
      if (s.unit.empty()) continue;
      if (exact == nullptr) {
        sdk::write_params(writer, layout_, s.unit, param_piece(u).first(s.unit.size()));
      } else {
        const float* full = exact->ready(u, param_piece(u));
        sdk::write_params(writer, layout_, s.unit,
                          std::span<const float>(full, static_cast<size_t>(s.unit.size())));
        exact->release(u);
      }
    } else {
      if (!first_group) continue;  // the other groups hold the same values
      const sdk::FlatRange real = s.flat_real();
      sdk::write_params(writer, layout_, real, param_piece(u).first(real.size()));
    }
    if (first_group || writer.all_replicas()) {
      sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, s.flat_real(),
                                 s.shard_offset);
    }
  }
}

}  // namespace tessera::strategies
