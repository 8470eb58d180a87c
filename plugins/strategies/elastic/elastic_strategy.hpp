// The `elastic` strategy: data-parallel training that survives lost ranks
// in-process. It wraps another strategy plugin (inner = "ddp", "zero1",
// ...) and keeps the state after each step in memory: what the inner
// strategy holds, plus a copy of the pieces only its left neighbour holds.
// When a step (or that copy) fails because a peer is lost or times out, the
// survivors abort the world, re-form it through the backend (comm_shrink,
// backend interface 1.3), agree on the newest step whose state they still
// hold between them, rebuild the inner strategy on the new world, load that
// state from their memory (no checkpoint is read) and tell the host, which
// goes on from the step after it with each rank's new slice of the same
// global batch. Processes started later (TESSERA_JOIN=1) are admitted at
// step boundaries: the backend grows the world (comm_grow, backend 1.4),
// the members hand them the state of the step before from the same memory,
// and the step runs on the grown world. docs/strategies/elastic.md
// describes it for users.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inner_strategy.hpp"
#include "snapshot.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::strategies {

inline constexpr tessera_option_decl kElasticOptions[] = {
    {"inner", TESSERA_OPT_STRING, "ddp",
     "the data-parallel strategy plugin that trains: ddp, zero1, zero2, zero3, fsdp or any "
     "strategy whose ranks are its data-parallel slices"},
    {"inner_options", TESSERA_OPT_STRING, "",
     "the inner strategy's options, as \"key = value; key = value\""},
    {"settle_ms", TESSERA_OPT_INT, "2000",
     "after a failure, how long a survivor waits for the others to join the re-formed world "
     "(ms); a rank that comes later is left out"},
    {"kill_rank", TESSERA_OPT_INT, "-1",
     "for tests: the rank (of the starting world) that kills itself with SIGKILL at step "
     "kill_at_step (a thread rank: its thread fails there); -1: none"},
    {"kill_at_step", TESSERA_OPT_INT, "0", "for tests: the step at whose start kill_rank dies"},
    {"join_every", TESSERA_OPT_INT, "1",
     "admit the ranks waiting to join (TESSERA_JOIN=1) at the start of every join_every-th step; "
     "0: never"},
    {"join_wait_s", TESSERA_OPT_INT, "600",
     "a joining rank: how long it waits to be admitted before it gives up (s)"},
    {"wait_for_join_at_step", TESSERA_OPT_INT, "0",
     "for tests: at the start of this step the ranks wait (up to join_wait_s) until a rank has "
     "joined; 0: never"},
};

class ElasticStrategy final : public sdk::Strategy {
 public:
  // Checks the options and the inner strategy's check on `world_size`.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Collective: creates the inner strategy on the world. Refuses a backend
  // that cannot re-form a group and an inner strategy whose data-parallel
  // slices are not its ranks; on a joining rank (env.joining()), a backend
  // that cannot grow one.
  ElasticStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);
  ~ElasticStrategy() override;
  ElasticStrategy(const ElasticStrategy&) = delete;
  ElasticStrategy& operator=(const ElasticStrategy&) = delete;

  [[nodiscard]] tessera_strategy_layout layout() const override { return inner_->layout(); }
  void load(const sdk::StateReader& reader) override;
  // On a joining rank, first: waits to be admitted and takes on the running
  // world's state and step (world_changed). Every join_every-th step, first:
  // admits the ranks waiting to join, if any (world_changed, the step
  // before restored). Then the inner step and the snapshot of its result. On
  // a lost or silent peer (PEER_LOST, TIMEOUT) anywhere in it: recovery, and
  // a result with world_changed.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  void save(const sdk::StateWriter& writer) override;
  // The world after the last recovery.
  [[nodiscard]] tessera_strategy_world world();

 private:
  // The state after one update, as this rank holds it.
  struct Generation {
    int64_t step = -1;      // -1: empty
    bool own_ok = false;    // `own` is complete
    bool copy_ok = false;   // `copy` arrived complete
    int32_t copy_of = -1;   // the starting-world rank whose pieces `copy` holds
    int64_t copy_list = 0;  // the classification `copy` is shaped by (lists_)
    std::vector<elastic::Piece> own;
    std::vector<elastic::Piece> copy;
  };

  void make_inner();
  // Collective: keeps the inner strategy's state after update `step`.
  void snapshot(int64_t step);
  // Collective, once per inner strategy: which of this rank's pieces no
  // other rank holds, and the list of the left neighbour's such pieces.
  void classify(const std::vector<elastic::Piece>& own);
  // After a failure in step `failed_step`; returns the restored step.
  int64_t recover(int64_t failed_step, const std::string& why);
  // Collective on the world: grows it by the ranks waiting to join (the
  // backend's comm_grow) and hands them the state after `done`, the last
  // step; false when nobody waited. With `wait`, looks again every 20 ms
  // (the same number of times on every rank) until someone has come or
  // join_wait_s has passed.
  bool admit(int64_t done, bool wait);
  // On a joining rank: waits to be admitted; returns the step whose state
  // it took on.
  int64_t join();
  // Collective on the grown world `grown`: the members (`done` >= 0: the
  // step whose state they hold) and the joiners (-1) agree on the step and
  // number the newcomers; every rank ends with the whole state. Returns the
  // step and how many members there were.
  struct Grown {
    int64_t step = -1;
    int32_t members = 0;
  };
  Grown take_grown_world(tessera_comm* grown, int64_t done);
  // Collective: every piece of `held` (this rank's) that some rank lacks
  // goes from the lowest rank holding it to the others; the tensors
  // assembled whole. `after` says what failed when a tensor stays
  // incomplete.
  elastic::Assembled share(const std::vector<const elastic::Piece*>& held,
                           const std::string& after);
  // Makes `fresh` (owned) the world; the one before stays alive as
  // retired_ until the next change, since the host still holds it.
  void replace_world(tessera_comm* fresh);
  // Rebuilds the inner strategy on world_ with `state`, the state after
  // `step`, and keeps a fresh snapshot of it.
  void restart_inner(const elastic::Assembled& state, int64_t step);
  // Collective on the new world: the newest step whose state the survivors
  // hold between them.
  int64_t agree_on_step(const std::vector<int32_t>& lost);
  [[nodiscard]] const Generation* generation(int64_t step) const;
  void maybe_die(int64_t step) const;

  sdk::Host host_;
  elastic::InnerPlugin plugin_;
  int64_t settle_ms_;
  int64_t kill_rank_;
  int64_t kill_at_step_;
  int64_t join_every_;
  int64_t join_wait_ms_;
  int64_t wait_for_join_at_;
  bool thread_ranks_ = false;  // the backend's ranks are threads of this process
  bool can_grow_ = false;      // the backend has comm_grow
  bool joining_ = false;       // this rank waits to be admitted at its first step
  int64_t grown_before_ = -1;  // the step at whose start the world last grew

  tessera_strategy_env inner_env_{};        // what the inner strategy was given
  std::unique_ptr<sdk::CommView> retired_;  // the world before world_ (see replace_world)
  std::unique_ptr<sdk::CommView> world_;
  std::vector<int32_t> origin_;  // starting-world rank of each rank of world_
  int32_t next_origin_ = 0;      // what the next rank admitted is called (after all others)
  std::unique_ptr<elastic::InnerStrategy> inner_;

  bool classified_ = false;
  std::vector<size_t> unique_;             // own pieces only this rank holds
  std::vector<elastic::Piece> left_list_;  // the left neighbour's such pieces (no values)
  int64_t lists_ = 0;                      // classifications so far
  std::array<Generation, 2> gens_;
  std::vector<float> send_buffer_;     // the neighbour copy's values, reused
  std::vector<float> receive_buffer_;  // every step
  size_t next_gen_ = 0;
  bool started_ = false;

  std::string reason_;  // of the last change, for world()
  int64_t tracked_bytes_ = 0;
};

}  // namespace tessera::strategies
