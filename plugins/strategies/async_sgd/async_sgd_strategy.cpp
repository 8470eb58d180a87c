// The `async_sgd` strategy (see async_sgd_strategy.hpp).
//
// Messages travel on a communicator split from the world at construction,
// so they never meet the host's own collectives. Every message has a fixed
// size both sides know: a push is one gradient shard (shard_size_
// elements, padding zero) followed by kHeader values (the step's number
// and learning rate); a reply is one parameter shard. Pushes and replies
// have tags of their own.
//
// A server keeps one receive posted per worker for that worker's next
// push, also across its step() returns: a fast worker's push of step t + 1
// may arrive while the server is still in step t, and which step the host
// runs next without a collective in between is something no rank knows.
// The receives stay on the strategy's own communicator, where the host
// posts nothing. This is the one exception to "no operation pending when a
// call returns" (docs/strategies/async_sgd.md). At the end of a run each
// worker that stepped sends each server one stop message, which the
// receive posted for its next push takes; the server's destructor waits
// for them. A rank whose step fails, or that is destroyed while an
// exception unwinds (the host failed on it), aborts the communicator
// instead, with its error, so that no peer waits for it until the timeout.
#include "async_sgd_strategy.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <thread>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"

namespace tessera::strategies {

namespace {

constexpr int32_t kPushTag = 1;
constexpr int32_t kReplyTag = 2;
// After the shard: the step's number (its int64 bits in two floats), the
// step's learning rate.
constexpr uint64_t kHeader = 3;
// The step number of a worker's stop message.
constexpr int64_t kStopStep = -1;

void write_header(std::span<float> header, int64_t step, float lr) {
  std::memcpy(header.data(), &step, sizeof step);
  header[2] = lr;
}
int64_t header_step(std::span<const float> header) {
  int64_t step = 0;
  std::memcpy(&step, header.data(), sizeof step);
  return step;
}

// The server's poll loop sleeps this long after a round that found nothing
// ready, doubling up to kMaxIdle: short enough for a small model's step,
// long enough not to starve the in-memory backend's other rank threads.
constexpr std::chrono::microseconds kMinIdle{20};
constexpr std::chrono::microseconds kMaxIdle{1000};

}  // namespace

void AsyncSgdStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                             int32_t world_size) {
  (void)AsyncSgdOptions::read(options, world_size);
}

sdk::Estimate AsyncSgdStrategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                         const sdk::EstimateArgs& args) {
  const AsyncSgdOptions o = AsyncSgdOptions::read(options, args.world_size);
  const sdk::ModelDesc& model = args.model;
  const int32_t servers = o.servers;
  const int32_t workers = args.world_size - servers;
  const int64_t psi = model.params();
  const int64_t shard = (psi + servers - 1) / servers;
  const int64_t message = shard + static_cast<int64_t>(kHeader);
  sdk::Estimate e = sdk::data_parallel_estimate(model, workers, o.activation_checkpointing);
  // A worker: the replica padded to whole shards, its gradients, one push
  // buffer per server. A server: its shard, the optimizer state for it,
  // the summed gradient at staleness 0, a push and a reply buffer per
  // worker, and when predicting the mean change and the shard before an
  // update.
  const int64_t worker[] = {4 * shard * servers, 4 * shard * servers, 0, 4 * message * servers, 0};
  const int64_t server[] = {4 * shard, o.staleness == 0 ? 4 * shard : 0,
                            4 * shard * model.optimizer_slots(), 4 * (message + shard) * workers,
                            o.predicting() ? 8 * shard : 0};
  const tessera_mem_category categories[] = {TESSERA_MEM_PARAMS, TESSERA_MEM_GRADS,
                                             TESSERA_MEM_OPTIMIZER, TESSERA_MEM_COMM,
                                             TESSERA_MEM_OTHER};
  // The categories of the largest rank: a worker unless the servers'
  // message buffers outgrow the worker's activations.
  int64_t worker_total = e[TESSERA_MEM_ACTIVATIONS];
  int64_t server_total = 0;
  for (size_t c = 0; c < std::size(categories); ++c) {
    worker_total += worker[c];
    server_total += server[c];
  }
  const bool server_largest = server_total > worker_total;
  if (server_largest) e[TESSERA_MEM_ACTIVATIONS] = 0;
  for (size_t c = 0; c < std::size(categories); ++c) {
    e[categories[c]] = server_largest ? server[c] : worker[c];
  }
  e.memory_total = std::max(worker_total, server_total);
  // Per step a worker sends a push to every server, a server a reply to
  // every worker.
  const int64_t worker_bytes = 4 * message * servers;
  const int64_t server_bytes = 4 * shard * workers;
  e.add_traffic("data", args.world_size, std::max(worker_bytes, server_bytes),
                std::max(servers, workers));
  return e;
}

namespace {

// The servers apply each worker's push as it comes, with no global sum of
// squares to find an overflow in: no loss scaling, so no f16.
const sdk::Host& without_loss_scaling(const sdk::Host& host) {
  TESSERA_CHECK(host.compute_precision() != TESSERA_F16, TESSERA_ERR_UNSUPPORTED,
                "async_sgd: run.precision = \"f16\" is not supported (its servers apply each "
                "worker's gradients as they arrive, with no loss scaling); use \"bf16\" or "
                "\"f32\"");
  return host;
}

}  // namespace

AsyncSgdStrategy::AsyncSgdStrategy(const sdk::Host& host, const sdk::Options& options,
                                   sdk::StrategyEnv& env)
    : host_(without_loss_scaling(host)),
      env_(env),
      options_(AsyncSgdOptions::read(options, env.world_size())),
      flat_(env.model()),
      ps_(env.world().split(0, env.rank())) {
  const int32_t servers = options_.servers;
  const int32_t w = workers();
  layout_.struct_size = sizeof layout_;
  layout_.data_size = w;
  layout_.data_rank = is_server() ? 0 : env.rank() - servers;
  shard_size_ = sdk::even_shard(flat_.total(), servers, 0).shard_size;
  const size_t message = static_cast<size_t>(shard_size_ + kHeader);
  if (is_server()) {
    shard_ = sdk::even_shard(flat_.total(), servers, env.rank());
    const auto n = static_cast<size_t>(shard_.real.size());
    params_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_PARAMS, n);
    optim_ = env.optimizer().make_state(n);
    if (options_.staleness == 0) {
      sum_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_GRADS, n);
    }
    if (options_.predicting()) {
      last_change_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_OTHER, n);
      before_ = sdk::TrackedBuffer<float>(host, env.rank(), TESSERA_MEM_OTHER, n);
      replied_at_.assign(static_cast<size_t>(w), 0);
      delay_.assign(static_cast<size_t>(w), -1.0);
    }
    for (int32_t i = 0; i < w; ++i) {
      push_in_.emplace_back(host, env.rank(), TESSERA_MEM_COMM, message);
      reply_.emplace_back(host, env.rank(), TESSERA_MEM_COMM, static_cast<size_t>(shard_size_));
    }
    push_ops_.resize(static_cast<size_t>(w));
    reply_ops_.resize(static_cast<size_t>(w));
    clock_.assign(static_cast<size_t>(w), 0);
    held_.assign(static_cast<size_t>(w), 0);
    replied_.assign(static_cast<size_t>(w), 0);
    lr_.assign(static_cast<size_t>(w), 0.0f);
  } else {
    replica_ = std::make_unique<sdk::ReplicatedParams>(
        host, flat_, env.rank(), true,
        shard_size_ * static_cast<uint64_t>(servers) - flat_.total());
    runner_ = std::make_unique<sdk::UnitRunner>(host, env.model(), env.rank(), true,
                                                options_.activation_checkpointing);
    for (int32_t k = 0; k < servers; ++k) {
      push_out_.emplace_back(host, env.rank(), TESSERA_MEM_COMM, message);
    }
  }
  if (env.rank() == 0) {
    host_.debug("async_sgd: ", flat_.total(), " parameters, ", servers, " servers of ", shard_size_,
                " elements, ", w, " workers, staleness ", options_.staleness);
  }
}

AsyncSgdStrategy::~AsyncSgdStrategy() {
  if (failed_ || std::uncaught_exceptions() > 0) {
    abort_messages(
        ::tessera::detail::concat("async_sgd: rank ", env_.rank(), " stopped on an error"));
  } else if (!is_server() && stepped_) {
    for (int32_t k = 0; k < options_.servers; ++k) {
      try {
        const std::span<float> out = push_out_[static_cast<size_t>(k)].span();
        std::fill(out.begin(), out.end(), 0.0f);
        write_header(out.subspan(static_cast<size_t>(shard_size_)), kStopStep, 0.0f);
        ps_->send(std::span<const float>(out), k, kPushTag);
      } catch (const std::exception& e) {
        host_.warn("async_sgd: worker rank ", env_.rank(), " could not stop server ", k, ": ",
                   e.what());
      }
    }
  }
  for (size_t i = 0; i < push_ops_.size(); ++i) {
    try {
      push_ops_[i].wait(host_);
    } catch (const std::exception& e) {
      if (!failed_) {
        host_.warn("async_sgd: server ", env_.rank(), ": the receive for worker rank ",
                   static_cast<int32_t>(i) + options_.servers, " ended with: ", e.what());
      }
    }
  }
  for (sdk::PendingOp& op : reply_ops_) {
    try {
      op.wait(host_);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): reported by the step
    }
  }
}

void AsyncSgdStrategy::abort_messages(const std::string& reason) noexcept {
  ps_->api()->comm_abort(ps_->raw(), reason.c_str());
}

void AsyncSgdStrategy::load(const sdk::StateReader& reader) {
  if (is_server()) {
    sdk::read_params(reader, flat_, shard_.real, params_.span());
    sdk::read_optimizer_state(reader, flat_, env_.optimizer(), optim_, shard_.real);
  } else {
    sdk::read_params(reader, flat_, sdk::FlatRange{0, flat_.total()}, replica_->params());
  }
}

sdk::StepResult AsyncSgdStrategy::step(const sdk::StepArgs& args) {
  const auto delayed =
      std::lower_bound(options_.delay_ranks.begin(), options_.delay_ranks.end(), env_.rank());
  if (options_.delay_ms > 0 && delayed != options_.delay_ranks.end() && *delayed == env_.rank() &&
      args.step % options_.delay_every ==
          (delayed - options_.delay_ranks.begin()) % options_.delay_every) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.delay_ms));
  }
  const sdk::CommMeter meter({ps_.get()});
  sdk::StepResult result;
  try {
    result = is_server() ? server_step(args) : worker_step(args);
  } catch (const std::exception& e) {
    fail(e);
    throw;
  }
  meter.add_to(result);
  return result;
}

void AsyncSgdStrategy::fail(const std::exception& e) noexcept {
  failed_ = true;
  try {
    abort_messages(
        ::tessera::detail::concat("async_sgd: rank ", env_.rank(), " failed: ", e.what()));
  } catch (...) {  // NOLINT(bugprone-empty-catch): only allocation can fail here
  }
}

sdk::StepResult AsyncSgdStrategy::worker_step(const sdk::StepArgs& args) {
  stepped_ = true;
  replica_->zero_grads();
  sdk::StepResult result;
  result.loss = runner_->run(args.micro_batches, args.loss_scales, replica_->param_ptrs(),
                             replica_->grad_ptrs());
  // This rank's gradient is its share of the global mean's; the servers
  // rescale it. The norm reported is that of the rescaled gradient.
  result.grad_norm = std::sqrt(host_.sum_squares(replica_->grads())) * workers();
  const std::span<float> grads = replica_->padded_grads();
  const std::span<float> params = replica_->padded_params();
  const auto s = static_cast<size_t>(shard_size_);
  std::vector<sdk::PendingOp> sends;
  std::vector<sdk::PendingOp> recvs;
  for (int32_t k = 0; k < options_.servers; ++k) {
    const std::span<float> out = push_out_[static_cast<size_t>(k)].span();
    std::copy_n(grads.begin() + static_cast<std::ptrdiff_t>(k * s), s, out.begin());
    write_header(out.subspan(s), args.step, args.lr);
    sends.push_back(ps_->start_send(std::span<const float>(out), k, kPushTag));
    recvs.push_back(ps_->start_recv(params.subspan(k * s, s), k, kReplyTag));
  }
  try {
    for (sdk::PendingOp& op : sends) op.wait(host_);
  } catch (const std::exception& e) {
    fail(e);  // the operations still pending fail at once
    throw;
  }
  try {
    for (sdk::PendingOp& op : recvs) op.wait(host_);
  } catch (const Error& e) {
    // A server holds a reply back while this worker leads the slowest
    // worker by more than `staleness`: the wait may be for another worker.
    const Error held(
        e.status(),
        detail::concat(e.what(), "; a server holds its reply to step ", args.step,
                       " back while this worker is more than staleness ", options_.staleness,
                       " steps ahead of the slowest worker (the server's "
                       "error names the workers' steps)"));
    fail(held);
    throw held;
  } catch (const std::exception& e) {
    fail(e);
    throw;
  }
  return result;
}

void AsyncSgdStrategy::post_push_receive(int32_t w) {
  push_ops_[static_cast<size_t>(w)] =
      ps_->start_recv(push_in_[static_cast<size_t>(w)].span(), options_.servers + w, kPushTag);
}

void AsyncSgdStrategy::apply(std::span<float> grad, int64_t update, float lr,
                             double max_grad_norm) {
  host_.scale(grad, sdk::clip_coefficient(host_.sum_squares(grad), max_grad_norm));
  const std::span<float> params = params_.span();
  const std::span<float> before = before_.span();
  if (options_.predicting()) std::copy(params.begin(), params.end(), before.begin());
  env_.optimizer().step(optim_, 0, params, grad, update, lr);
  if (!options_.predicting()) return;
  // The gain is the least-squares fit of this change on the previous one,
  // over about four rounds: near 1 when updates persist (momentum, Adam),
  // near 0 when they are mostly noise (plain SGD on small batches), where
  // extrapolating would only add the noise.
  const std::span<float> last = last_change_.span();
  double repeat = 0;
  double previous = 0;
  for (size_t e = 0; e < params.size(); ++e) {
    const float change = params[e] - before[e];
    repeat += static_cast<double>(change) * last[e];
    previous += static_cast<double>(last[e]) * last[e];
    last[e] = change;
  }
  const double a = 2.0 / (4.0 * workers() + 1);
  repeat_ += a * (repeat - repeat_);
  previous_ += a * (previous - previous_);
}

double AsyncSgdStrategy::mean_delay() const {
  double sum = 0;
  int measured = 0;
  for (const double d : delay_) {
    if (d < 0) continue;
    sum += d;
    ++measured;
  }
  return measured > 0 ? sum / measured : -1.0;
}

double AsyncSgdStrategy::gain() const noexcept {
  return previous_ > 0 ? std::clamp(repeat_ / previous_, 0.0, 1.0) : 0.0;
}

void AsyncSgdStrategy::write_reply(int32_t w, std::span<float> out) {
  const auto i = static_cast<size_t>(w);
  const std::span<const float> params = params_.span();
  const double ahead = options_.predicting() ? std::max(delay_[i], 0.0) * gain() : 0.0;
  if (options_.predicting()) replied_at_[i] = updates_;
  if (ahead <= 0) {
    std::copy(params.begin(), params.end(), out.begin());
    return;
  }
  // Worker w computes its next gradient from this reply, and the server
  // applies it about delay_[w] updates later, each expected to move the
  // shard by gain() times the last change: the reply is the shard moved
  // that far, so the gradient is computed about where it is applied.
  const auto k = static_cast<float>(ahead);
  const std::span<const float> last = last_change_.span();
  for (size_t e = 0; e < params.size(); ++e) out[e] = params[e] + k * last[e];
}

void AsyncSgdStrategy::arrive(int32_t w) {
  const auto i = static_cast<size_t>(w);
  const auto n = static_cast<size_t>(shard_.real.size());
  const std::span<float> in = push_in_[i].span();
  const std::span<const float> header = in.subspan(static_cast<size_t>(shard_size_));
  const int64_t step = header_step(header);
  TESSERA_CHECK(step == clock_[i] + 1, TESSERA_ERR_INTERNAL, "async_sgd: server ", env_.rank(),
                " received step ", step, " from worker rank ", options_.servers + w,
                ", whose last push was step ", clock_[i]);
  clock_[i] = step;
  held_[i] = step;
  lr_[i] = header[2];
  if (options_.staleness > 0) {
    // Applied on arrival as an update of its own: rescaled by the number of
    // workers (their mean is the global mean's gradient) and with lr / W,
    // so that a round of W pushes moves plain SGD as one synchronous step.
    const std::span<float> grad = in.first(n);
    if (options_.predicting()) {
      // A moving mean over about four of this worker's pushes: a worker
      // slower than the others sees more updates between reply and push.
      const auto delay = static_cast<double>(updates_ - replied_at_[i]);
      delay_[i] = delay_[i] < 0 ? delay : delay_[i] + 0.4 * (delay - delay_[i]);
    }
    host_.scale(grad, static_cast<float>(workers()));
    apply(grad, ++updates_, lr_[i] / static_cast<float>(workers()), max_grad_norm_);
    post_push_receive(w);
    return;
  }
  // Staleness 0: once every worker has pushed this step, their gradients
  // summed in worker order make one update, as an allreduce would.
  if (*std::min_element(clock_.begin(), clock_.end()) < step) return;
  const std::span<float> sum = sum_.span();
  std::copy_n(push_in_[0].span().begin(), n, sum.begin());
  for (size_t j = 1; j < push_in_.size(); ++j) {
    const std::span<const float> g = push_in_[j].span();
    for (size_t e = 0; e < n; ++e) sum[e] += g[e];
  }
  updates_ = step;
  apply(sum, step, lr_[i], max_grad_norm_);
  for (int32_t j = 0; j < workers(); ++j) post_push_receive(j);
}

bool AsyncSgdStrategy::send_allowed_replies() {
  const int64_t min_clock = *std::min_element(clock_.begin(), clock_.end());
  bool sent = false;
  const auto n = static_cast<size_t>(shard_.real.size());
  for (size_t i = 0; i < held_.size(); ++i) {
    if (held_[i] == 0 || held_[i] - min_clock > options_.staleness) continue;
    reply_ops_[i].wait(host_);  // the previous reply, long received
    const std::span<float> out = reply_[i].span();
    write_reply(static_cast<int32_t>(i), out.first(n));
    reply_ops_[i] = ps_->start_send(std::span<const float>(out),
                                    options_.servers + static_cast<int32_t>(i), kReplyTag);
    max_lead_ = std::max(max_lead_, held_[i] - min_clock);
    replied_[i] = held_[i];
    held_[i] = 0;
    sent = true;
  }
  return sent;
}

std::string AsyncSgdStrategy::clocks_text() const {
  // A worker that waits for its reply stops pushing: the one whose clock
  // holds the others back (by more than `staleness`) is the one to look at.
  const auto slowest = std::min_element(clock_.begin(), clock_.end());
  std::string text = "the workers' last pushes on this server:";
  for (size_t i = 0; i < clock_.size(); ++i) {
    text += detail::concat(i == 0 ? " " : ", ", "rank ", options_.servers + static_cast<int32_t>(i),
                           " step ", clock_[i]);
  }
  const int64_t lead = *std::max_element(clock_.begin(), clock_.end()) - *slowest;
  if (lead > 0) {
    text += detail::concat(
        " (rank ", options_.servers + static_cast<int32_t>(slowest - clock_.begin()),
        " is the slowest; the others wait for it once they lead by more than staleness ",
        options_.staleness, ")");
  }
  return text;
}

sdk::StepResult AsyncSgdStrategy::server_step(const sdk::StepArgs& args) {
  max_grad_norm_ = args.max_grad_norm;
  const int32_t w = workers();
  if (!serving_) {
    // The first step (args.step after a resume): every worker pushes it next.
    std::fill(clock_.begin(), clock_.end(), args.step - 1);
    std::fill(replied_.begin(), replied_.end(), args.step - 1);
    updates_ = options_.staleness > 0 ? (args.step - 1) * w : 0;
    std::fill(replied_at_.begin(), replied_at_.end(), updates_);
    for (int32_t i = 0; i < w; ++i) post_push_receive(i);
    serving_ = true;
  }
  auto idle = kMinIdle;
  int64_t idle_ns = 0;
  for (;;) {
    bool progress = false;
    for (int32_t i = 0; i < w; ++i) {
      sdk::PendingOp& op = push_ops_[static_cast<size_t>(i)];
      bool done = false;
      try {
        done = op.pending() && op.done(host_);
      } catch (const Error& e) {
        throw Error(e.status(), detail::concat(e.what(), "; ", clocks_text()));
      }
      if (done) {
        arrive(i);
        progress = true;
      }
    }
    progress = send_allowed_replies() || progress;
    if (std::all_of(replied_.begin(), replied_.end(), [&](int64_t r) { return r >= args.step; })) {
      break;
    }
    if (progress) {
      idle = kMinIdle;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(idle);
      idle_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
      idle = std::min(idle * 2, kMaxIdle);
    }
  }
  // The replies of this step (and any later ones) go to workers waiting
  // for them: done at once.
  for (sdk::PendingOp& op : reply_ops_) op.wait(host_);
  const auto [lo, hi] = std::minmax_element(clock_.begin(), clock_.end());
  host_.debug(
      "async_sgd: server ", env_.rank(), " step ", args.step, ": worker clocks ", *lo, "..", *hi,
      ", max lead ", max_lead_, " (staleness ", options_.staleness, "), ", updates_, " updates",
      options_.predicting()
          ? ::tessera::detail::concat(", mean delay ", mean_delay(), " updates, gain ", gain())
          : std::string());
  sdk::StepResult result;
  result.comm_wait_ns = idle_ns;
  return result;
}

void AsyncSgdStrategy::save(const sdk::StateWriter& writer) {
  if (!is_server()) return;
  sdk::write_params(writer, flat_, shard_.real, params_.span());
  sdk::write_optimizer_state(writer, flat_, env_.optimizer(), optim_, shard_.real);
}

}  // namespace tessera::strategies
