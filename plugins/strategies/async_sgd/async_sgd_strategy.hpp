// The `async_sgd` strategy: a parameter server with bounded staleness
// (stale-synchronous parallel). The first `servers` ranks of the world are
// parameter servers, each holding one even shard of the flat parameter
// vector and the optimizer state for it; the other ranks are workers, the
// data-parallel slices, each holding a full replica of the parameters and
// its gradients. A worker pushes each shard of its gradient to its server
// and waits for the server's reply with the fresh parameter shard; a
// server answers a push of step k once k is at most `staleness` steps
// ahead of the slowest worker. docs/strategies/async_sgd.md describes it
// for users.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "async_sgd_options.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::strategies {

class AsyncSgdStrategy final : public sdk::Strategy {
 public:
  // Refuses what AsyncSgdOptions::read refuses for `world_size` ranks.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes no gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kNone;
  // The estimate (strategy 2.3; docs/strategies/async_sgd.md, "Memory and
  // traffic"): the categories of the largest rank (a worker, or a server
  // whose message buffers outgrow it), the busier one's bytes sent per
  // step, a worker's FLOPs. Refuses what
  // check() refuses. (The `auto` selector never proposes async_sgd: it is
  // not exact.)
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Collective: splits the world once into the communicator the pushes and
  // replies travel on (every rank, same order). A server allocates its
  // parameter shard (PARAMS), the optimizer state for it and one push and
  // one reply buffer per worker (COMM); a worker allocates the replica
  // (PARAMS, GRADS) and one push buffer per server (COMM).
  AsyncSgdStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);
  // Finishes the receives a server keeps posted for the workers' next
  // pushes: each worker that stepped sends its servers a stop message, and
  // the servers wait for them. After a failed step, or while an exception
  // unwinds, the rank aborts the strategy's communicator instead.
  ~AsyncSgdStrategy() override;
  AsyncSgdStrategy(const AsyncSgdStrategy&) = delete;
  AsyncSgdStrategy& operator=(const AsyncSgdStrategy&) = delete;

  // Workers are data ranks 0 .. workers-1; servers report data rank 0 (they
  // ignore their batches).
  [[nodiscard]] tessera_strategy_layout layout() const override { return layout_; }

  // Collective. A server reads its shard of the parameters and, when the
  // reader has it, of the optimizer state; a worker reads every parameter.
  void load(const sdk::StateReader& reader) override;
  // Worker: forward/backward, push, wait for the replies. Server: serve
  // pushes until every worker's push of this step is answered (see the
  // .cpp). Errors of a peer or the backend propagate as tessera::Error.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Servers write their shard of the parameters and of the optimizer state
  // (each element exactly once over the world); workers write nothing, also
  // when the writer wants all replicas: their replica is a cache of the
  // servers' parameters that may be up to `staleness` updates old.
  void save(const sdk::StateWriter& writer) override;

 private:
  [[nodiscard]] bool is_server() const noexcept { return env_.rank() < options_.servers; }
  [[nodiscard]] int32_t workers() const noexcept { return env_.world_size() - options_.servers; }
  // "the workers' last pushes on this server: rank 1 step 40, rank 2 step
  // 43 (rank 1 is the slowest; ...)", for a server's failed receive.
  [[nodiscard]] std::string clocks_text() const;
  sdk::StepResult worker_step(const sdk::StepArgs& args);
  sdk::StepResult server_step(const sdk::StepArgs& args);
  // Server: handles worker w's push that has just arrived in push_[w].
  void arrive(int32_t w);
  // Server: sends every reply the staleness bound allows; true if it sent one.
  bool send_allowed_replies();
  // Server: applies `grad` (the real elements of the shard) as one
  // optimizer update, clipped by its own norm; when predicting, keeps the
  // change it made in last_change_ and refits the prediction's gain.
  void apply(std::span<float> grad, int64_t update, float lr, double max_grad_norm);
  // Server: writes worker w's reply into `out` (the real elements): the
  // shard now or, when predicting, as it is expected to be when w's next
  // push is applied.
  void write_reply(int32_t w, std::span<float> out);
  // Server, predicting: how far one update is expected to move the shard
  // along the last change, in [0, 1] (see the .cpp).
  [[nodiscard]] double gain() const noexcept;
  // Server, predicting: the mean over the workers of their measured delays
  // (-1 before any push was measured), for the debug line.
  [[nodiscard]] double mean_delay() const;
  void post_push_receive(int32_t w);
  // Aborts the strategy's communicator: every operation on it, pending or
  // later, fails on every rank with `reason`.
  void abort_messages(const std::string& reason) noexcept;
  // After this rank's step failed with `e`: aborts the communicator with
  // e's message, so that no peer waits for this rank until its timeout.
  void fail(const std::exception& e) noexcept;

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  AsyncSgdOptions options_;
  tessera_strategy_layout layout_{};
  sdk::FlatLayout flat_;
  std::unique_ptr<sdk::CommView> ps_;  // pushes and replies; every rank of the world
  uint64_t shard_size_ = 0;            // padded elements per server

  // ---- worker ----
  std::unique_ptr<sdk::ReplicatedParams> replica_;  // padded to servers x shard_size_
  std::unique_ptr<sdk::UnitRunner> runner_;
  std::vector<sdk::TrackedBuffer<float>> push_out_;  // per server: shard + header
  bool stepped_ = false;

  // ---- server ----
  sdk::ShardRange shard_{};
  sdk::TrackedBuffer<float> params_;  // this server's shard (real elements)
  sdk::OptimState optim_;
  sdk::TrackedBuffer<float> sum_;                   // staleness 0: the step's summed gradient
  std::vector<sdk::TrackedBuffer<float>> push_in_;  // per worker: shard + header
  std::vector<sdk::TrackedBuffer<float>> reply_;    // per worker: the parameter shard sent
  std::vector<sdk::PendingOp> push_ops_;            // per worker: receive of its next push
  std::vector<sdk::PendingOp> reply_ops_;           // per worker: its last reply
  std::vector<int64_t> clock_;                      // per worker: last step pushed
  std::vector<int64_t> held_;                       // per worker: push awaiting a reply, 0: none
  std::vector<int64_t> replied_;                    // per worker: last step answered
  std::vector<float> lr_;                           // per worker: lr of its held push (staleness 0)
  // Prediction (staleness >= 1, option `predict`): the change the last
  // update made, how much of it the next update repeats (the gain's
  // moving sums over about four rounds, 4W updates), and per worker the
  // delay of its pushes (the updates applied between the reply it computed
  // from and its push; a moving mean over about four of its pushes).
  sdk::TrackedBuffer<float> last_change_;  // OTHER
  sdk::TrackedBuffer<float> before_;       // OTHER: the shard before the update being applied
  std::vector<int64_t> replied_at_;        // per worker: updates_ when its last reply was sent
  std::vector<double> delay_;              // per worker; < 0: no push measured yet
  double repeat_ = 0;                      // moving mean of <change, previous change>
  double previous_ = 0;                    // moving mean of |previous change|^2
  int64_t updates_ = 0;                    // optimizer updates applied
  int64_t max_lead_ = 0;                   // largest k - min clock of a reply
  double max_grad_norm_ = 0;               // of the step being served
  bool serving_ = false;                   // receives posted

  bool failed_ = false;  // a step failed on this rank (the communicator is aborted)
};

}  // namespace tessera::strategies
