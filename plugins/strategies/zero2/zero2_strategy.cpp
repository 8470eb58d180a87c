// The `zero2` strategy (see zero2_strategy.hpp).
#include "zero2_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_state.hpp"

namespace tessera::strategies {

// The runner's callbacks: gradient slots bound to full per-unit buffers
// before each unit's backward, reduce-scatters started after it, on every
// micro-batch.
class Zero2Hooks final : public sdk::RunnerHooks {
 public:
  explicit Zero2Hooks(Zero2Strategy& s) : s_(s) {}
  void before_backward(int32_t unit, int32_t /*micro*/) override { s_.bind_grads(unit); }
  void after_backward(int32_t unit, int32_t /*micro*/, bool /*last_micro*/) override {
    s_.reduce_grads(unit);
  }

 private:
  Zero2Strategy& s_;
};

void Zero2Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  TESSERA_CHECK(world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT, "strategy 'zero2' needs at least ",
                "one rank, but the world size is ", world_size);
  (void)Zero2Options::read(options);
}

Zero2Strategy::Zero2Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      options_(Zero2Options::read(options)),
      layout_(env.model()),
      shards_(layout_, env.world_size(), env.rank()),
      params_(host, layout_, env.rank(), /*with_grads=*/false),
      grads_(host, env.rank(), TESSERA_MEM_GRADS, static_cast<size_t>(shards_.shard_elements())),
      optim_(env.optimizer().make_state(shards_.shard_elements())),
      grad_ptrs_(layout_),
      reducer_(host, env.world(), shards_, options_.reduce_dtype),
      runner_(host, env.model(), env.rank()) {
  done_at_.resize(static_cast<size_t>(shards_.num_units()));
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    done_at_[static_cast<size_t>(shards_.grad_done(o))].push_back(o);
  }
  if (env.rank() == 0) {
    host_.debug("zero2: ", layout_.total(), " parameters in ", shards_.num_units(),
                " units, gradient and optimizer shard of ", shards_.shard_elements(),
                " elements per rank, overlap ", options_.overlap ? "on" : "off", ", reduce dtype ",
                ::tessera::dtype_name(options_.reduce_dtype), ", ", env.world_size(), " ranks");
  }
}

tessera_strategy_layout Zero2Strategy::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = env_.rank();
  l.data_size = env_.world_size();
  return l;
}

std::span<float> Zero2Strategy::grad_piece(int32_t u) {
  const sdk::UnitShard& s = shards_.unit(u);
  return grads_.span().subspan(static_cast<size_t>(s.shard_offset),
                               static_cast<size_t>(s.shard.shard_size));
}

void Zero2Strategy::bind_owner(int32_t owner, float* base) {
  const uint64_t begin = shards_.unit(owner).unit.begin;
  for (const size_t i : shards_.entries(owner)) {
    grad_ptrs_.bind_entry(i, base != nullptr ? base + (layout_.entry(i).offset - begin) : nullptr);
  }
}

void Zero2Strategy::unbind_all() noexcept {
  for (int32_t o = 0; o < shards_.num_units(); ++o) {
    for (const size_t i : shards_.entries(o)) grad_ptrs_.bind_entry(i, nullptr);
  }
}

void Zero2Strategy::bind_grads(int32_t u) {
  for (const int32_t o : shards_.owners(u)) bind_owner(o, reducer_.grads(o));
}

void Zero2Strategy::reduce_grads(int32_t u) {
  // The reduce-scatters started after the previous unit ran while this
  // unit's backward computed; complete them before starting new ones so at
  // most one unit's buffers are in flight.
  reducer_.finish_all();
  for (const int32_t o : done_at_[static_cast<size_t>(u)]) {
    bind_owner(o, nullptr);
    reducer_.start(o, grad_piece(o), /*blocking=*/!options_.overlap);
  }
  if (u == 0) reducer_.finish_all();
}

void Zero2Strategy::gather_params() {
  sdk::CommView& world = env_.world();
  if (world.size() == 1) return;  // the pieces are the whole units, updated in place
  sdk::TrackedBuffer<float> send(host_, env_.rank(), TESSERA_MEM_COMM);
  sdk::TrackedBuffer<float> recv(host_, env_.rank(), TESSERA_MEM_COMM);
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    if (s.unit.empty()) continue;
    // This rank's piece, padded with zeros to the common piece length.
    send.resize(static_cast<size_t>(s.shard.shard_size));
    send.zero();
    const sdk::FlatRange real = s.flat_real();
    const std::span<float> mine = params_.params(real);
    std::copy(mine.begin(), mine.end(), send.data());
    recv.resize(static_cast<size_t>(s.shard.padded_total));
    world.allgather(std::span<const float>(send.span()), recv.span());
    const std::span<float> unit = params_.params(s.unit);
    std::copy(recv.data(), recv.data() + unit.size(), unit.begin());
  }
}

void Zero2Strategy::load(const sdk::StateReader& reader) {
  sdk::read_params(reader, layout_, sdk::FlatRange{0, layout_.total()}, params_.params());
  if (!sdk::has_optimizer_state(reader, layout_, env_.optimizer())) return;
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    const sdk::FlatRange real = s.flat_real();
    if (real.empty()) continue;
    sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, real, s.shard_offset);
  }
}

sdk::StepResult Zero2Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  const sdk::CommStats before = world.stats();
  grads_.zero();
  sdk::StepResult result;
  try {
    Zero2Hooks hooks(*this);
    result.loss =
        runner_.run(args.micro_batches, args.loss_scales, params_.param_ptrs(), grad_ptrs_, &hooks);
    reducer_.finish_all();
  } catch (...) {
    reducer_.abandon();
    unbind_all();
    throw;
  }
  unbind_all();
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
    const sdk::FlatRange real = s.flat_real();
    if (real.empty()) continue;
    const std::span<float> grads = grad_piece(u).first(static_cast<size_t>(real.size()));
    sdk::scale_in_place(grads, factor);
    env_.optimizer().step(optim_, s.shard_offset, params_.params(real), grads, args.step, args.lr);
  }
  gather_params();
  const sdk::CommStats& after = world.stats();
  result.comm_wait_ns = after.wait_ns - before.wait_ns;
  result.comm_bytes = after.bytes_sent - before.bytes_sent;
  return result;
}

void Zero2Strategy::save(const sdk::StateWriter& writer) {
  if (writer.all_replicas()) {
    sdk::write_params(writer, layout_, sdk::FlatRange{0, layout_.total()}, params_.params());
  }
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    const sdk::FlatRange real = s.flat_real();
    if (real.empty()) continue;
    if (!writer.all_replicas()) sdk::write_params(writer, layout_, real, params_.params(real));
    sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, real, s.shard_offset);
  }
}

}  // namespace tessera::strategies
