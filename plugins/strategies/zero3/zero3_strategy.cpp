// The `zero3` strategy (see zero3_strategy.hpp).
#include "zero3_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_state.hpp"

namespace tessera::strategies {

// The runner's callbacks: gather before each unit's forward and backward,
// prefetching the next unit in the direction of the pass; gradients bound
// before the backward, their reduce-scatters started after it on the last
// micro-batch.
class Zero3Hooks final : public sdk::RunnerHooks {
 public:
  explicit Zero3Hooks(Zero3Strategy& s) : s_(s) {}
  void before_forward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, unit + 1 < s_.shards_.num_units() ? unit + 1 : -1);
  }
  void before_backward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, unit - 1);
    s_.bind_grads(unit);
  }
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    s_.finish_grads(unit, last_micro);
  }

 private:
  Zero3Strategy& s_;
};

void Zero3Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT, "strategy 'zero3' needs at least ",
                "one rank, but the world size is ", world_size);
  (void)Zero3Options::read(options);
}

Zero3Strategy::Zero3Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      options_(Zero3Options::read(options)),
      layout_(env.model()),
      shards_(layout_, env.world_size(), env.rank()),
      params_(host, env.rank(), TESSERA_MEM_PARAMS, static_cast<size_t>(shards_.shard_elements())),
      grads_(host, env.rank(), TESSERA_MEM_GRADS, static_cast<size_t>(shards_.shard_elements())),
      optim_(env.optimizer().make_state(shards_.shard_elements())),
      param_ptrs_(layout_),
      grad_ptrs_(layout_),
      gather_(host, env.world(), shards_, env.rank()),
      reducer_(host, env.world(), shards_, options_.reduce_dtype, env.rank()),
      runner_(host, env.model(), env.rank()) {
  done_at_.resize(static_cast<size_t>(shards_.num_units()));
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    done_at_[static_cast<size_t>(shards_.grad_done(o))].push_back(o);
  }
  if (env.rank() == 0) {
    host_.debug("zero3: ", layout_.total(), " parameters in ", shards_.num_units(),
                " units, shard of ", shards_.shard_elements(), " elements per rank, prefetch ",
                options_.prefetch ? "on" : "off", ", gradients reduced in ",
                dtype_name(options_.reduce_dtype), ", ", env.world_size(), " ranks");
  }
}

tessera_strategy_layout Zero3Strategy::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = env_.rank();
  l.data_size = env_.world_size();
  return l;
}

std::span<float> Zero3Strategy::param_piece(int32_t u) {
  const sdk::UnitShard& s = shards_.unit(u);
  return params_.span().subspan(static_cast<size_t>(s.shard_offset),
                                static_cast<size_t>(s.shard.shard_size));
}

std::span<float> Zero3Strategy::grad_piece(int32_t u) {
  const sdk::UnitShard& s = shards_.unit(u);
  return grads_.span().subspan(static_cast<size_t>(s.shard_offset),
                               static_cast<size_t>(s.shard.shard_size));
}

void Zero3Strategy::bind_owner(sdk::SlotPointers& ptrs, int32_t owner, float* base) {
  const uint64_t begin = shards_.unit(owner).unit.begin;
  for (const size_t i : shards_.entries(owner)) {
    ptrs.bind_entry(i, base != nullptr ? base + (layout_.entry(i).offset - begin) : nullptr);
  }
}

void Zero3Strategy::release_params(int32_t owner) {
  bind_owner(param_ptrs_, owner, nullptr);
  gather_.release(owner);
}

void Zero3Strategy::use_unit(int32_t u, int32_t next) {
  const std::vector<int32_t>& needed = shards_.owners(u);
  static const std::vector<int32_t> kNone;
  const std::vector<int32_t>& ahead = options_.prefetch && next >= 0 ? shards_.owners(next) : kNone;
  const auto in = [](const std::vector<int32_t>& v, int32_t o) {
    return std::find(v.begin(), v.end(), o) != v.end();
  };
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    if (gather_.held(o) && !in(needed, o) && !in(ahead, o)) release_params(o);
  }
  for (const int32_t o : needed) bind_owner(param_ptrs_, o, gather_.ready(o, param_piece(o)));
  for (const int32_t o : ahead) gather_.start(o, param_piece(o));
}

void Zero3Strategy::bind_grads(int32_t u) {
  for (const int32_t o : shards_.owners(u)) bind_owner(grad_ptrs_, o, reducer_.grads(o));
}

void Zero3Strategy::finish_grads(int32_t u, bool last_micro) {
  if (!last_micro) return;  // the full gradients keep accumulating
  // At most the owners completed at one unit are in flight at a time.
  reducer_.finish_all();
  for (const int32_t o : done_at_[static_cast<size_t>(u)]) {
    bind_owner(grad_ptrs_, o, nullptr);
    reducer_.start(o, grad_piece(o), /*blocking=*/false);
  }
  if (u == 0) reducer_.finish_all();
}

void Zero3Strategy::release_all() noexcept {
  reducer_.abandon();
  gather_.release_all();
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    bind_owner(param_ptrs_, o, nullptr);
    bind_owner(grad_ptrs_, o, nullptr);
  }
}

void Zero3Strategy::load(const sdk::StateReader& reader) {
  const bool with_optimizer = sdk::has_optimizer_state(reader, layout_, env_.optimizer());
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    const sdk::FlatRange real = s.flat_real();
    if (real.empty()) continue;
    sdk::read_params(reader, layout_, real, param_piece(u));
    if (with_optimizer) {
      sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, real, s.shard_offset);
    }
  }
}

sdk::StepResult Zero3Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  const sdk::CommStats before = world.stats();
  grads_.zero();  // the reducer adds each unit's reduced piece into it once
  sdk::StepResult result;
  try {
    Zero3Hooks hooks(*this);
    result.loss =
        runner_.run(args.micro_batches, args.loss_scales, param_ptrs_, grad_ptrs_, &hooks);
    reducer_.finish_all();
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
  // Each element's gradient lives on exactly one rank: the global sum of
  // squares is the sum of the ranks' shard sums (padding is zero).
  double total = 0.0;
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    total += sdk::sum_squares(grad_piece(u).first(shards_.unit(u).shard.real.size()));
  }
  if (world.size() > 1) world.allreduce(std::span<double>(&total, 1));
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
  const sdk::CommStats& after = world.stats();
  result.comm_wait_ns = after.wait_ns - before.wait_ns;
  result.comm_bytes = after.bytes_sent - before.bytes_sent;
  return result;
}

void Zero3Strategy::save(const sdk::StateWriter& writer) {
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    if (writer.all_replicas()) {
      if (s.unit.empty()) continue;
      try {
        const float* full = gather_.ready(u, param_piece(u));
        sdk::write_params(writer, layout_, s.unit,
                          std::span<const float>(full, static_cast<size_t>(s.unit.size())));
      } catch (...) {
        gather_.release_all();
        throw;
      }
      gather_.release(u);
    } else {
      const sdk::FlatRange real = s.flat_real();
      sdk::write_params(writer, layout_, real, param_piece(u).first(real.size()));
    }
    sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, s.flat_real(),
                               s.shard_offset);
  }
}

}  // namespace tessera::strategies
