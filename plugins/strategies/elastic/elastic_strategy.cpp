#include "elastic_strategy.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {
namespace {

using Piece = elastic::Piece;

// p2p tags of the neighbour copy: the list of pieces (and its length), then
// each step's values.
constexpr int32_t kListTag = 30001;
constexpr int32_t kValuesTag = 30003;

bool peer_failure(tessera_status status) {
  return status == TESSERA_ERR_PEER_LOST || status == TESSERA_ERR_TIMEOUT;
}

bool can_shrink(const tessera_backend_api* api) {
  return api != nullptr &&
         api->struct_size >= offsetof(tessera_backend_api, comm_shrink) + sizeof(void*) &&
         api->comm_shrink != nullptr;
}

bool can_grow(const tessera_backend_api* api) {
  return api != nullptr &&
         api->struct_size >= offsetof(tessera_backend_api, comm_grow) + sizeof(void*) &&
         api->comm_grow != nullptr;
}

int64_t piece_bytes(const std::vector<Piece>& pieces) {
  int64_t bytes = 0;
  for (const Piece& p : pieces) bytes += static_cast<int64_t>(p.data.size() * sizeof(float));
  return bytes;
}

std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string out;
  for (const int32_t r : ranks) out += detail::concat(out.empty() ? "" : ", ", r);
  return out;
}

}  // namespace

void ElasticStrategy::check(const sdk::Host& host, const sdk::Options& options,
                            int32_t world_size) {
  const auto inner = elastic::InnerPlugin::find(host, options.get_string("inner"),
                                                options.get_string("inner_options"));
  const int64_t settle = options.get_int("settle_ms");
  TESSERA_CHECK(settle > 0, TESSERA_ERR_INVALID_ARGUMENT, "settle_ms = ", settle, " must be > 0");
  const int64_t kill = options.get_int("kill_rank");
  TESSERA_CHECK(kill >= -1 && kill < world_size, TESSERA_ERR_INVALID_ARGUMENT, "kill_rank = ", kill,
                " is not a rank of the world of ", world_size, " (or -1: none)");
  const int64_t every = options.get_int("join_every");
  TESSERA_CHECK(every >= 0, TESSERA_ERR_INVALID_ARGUMENT, "join_every = ", every,
                " must be >= 0 (0: never admit joining ranks)");
  const int64_t wait = options.get_int("join_wait_s");
  TESSERA_CHECK(wait > 0 && wait <= 31536000, TESSERA_ERR_INVALID_ARGUMENT, "join_wait_s = ", wait,
                " must be in 1..31536000");
  inner.check(world_size);
}

ElasticStrategy::ElasticStrategy(const sdk::Host& host, const sdk::Options& options,
                                 sdk::StrategyEnv& env)
    : host_(host),
      plugin_(elastic::InnerPlugin::find(host, options.get_string("inner"),
                                         options.get_string("inner_options"))),
      settle_ms_(options.get_int("settle_ms")),
      kill_rank_(options.get_int("kill_rank")),
      kill_at_step_(options.get_int("kill_at_step")),
      join_every_(options.get_int("join_every")),
      join_wait_ms_(options.get_int("join_wait_s") * 1000),
      wait_for_join_at_(options.get_int("wait_for_join_at_step")) {
  const tessera_strategy_env& raw = env.c();
  TESSERA_CHECK(can_shrink(raw.backend), TESSERA_ERR_INVALID_ARGUMENT,
                "the backend cannot re-form its group after losing a rank (it has no comm_shrink, "
                "backend interface 1.3): elastic runs on gloo or inmemory");
  thread_ranks_ = (raw.backend->capabilities & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0;
  can_grow_ = can_grow(raw.backend);
  joining_ = env.joining();
  TESSERA_CHECK(!joining_ || can_grow_, TESSERA_ERR_INVALID_ARGUMENT,
                "this rank joins a running world, but the backend cannot admit it (it has no "
                "comm_grow, backend interface 1.4): use gloo");
  // The compressor, if any, is the inner strategy's to use.
  if (raw.compressor != nullptr) (void)env.compressor();
  inner_env_ = raw;
  inner_env_.joining = 0;  // the inner strategy always runs on a formed world
  world_ = std::make_unique<sdk::CommView>(host_, raw.backend, raw.world, /*owned=*/false);
  origin_.resize(static_cast<size_t>(world_->size()));
  std::iota(origin_.begin(), origin_.end(), 0);
  next_origin_ = world_->size();
  make_inner();
}

ElasticStrategy::~ElasticStrategy() {
  inner_.reset();  // before the world it runs on
  host_.track_memory(TESSERA_RANK_UNKNOWN, TESSERA_MEM_OTHER, -tracked_bytes_);
}

void ElasticStrategy::make_inner() {
  inner_env_.rank = world_->rank();
  inner_env_.world_size = world_->size();
  inner_env_.world = world_->raw();
  inner_ = std::make_unique<elastic::InnerStrategy>(plugin_, inner_env_);
  const tessera_strategy_layout& l = inner_->layout();
  TESSERA_CHECK(l.data_rank == world_->rank() && l.data_size == world_->size(),
                TESSERA_ERR_INVALID_ARGUMENT, "inner strategy '", plugin_.name,
                "' trains data-parallel slice ", l.data_rank, " of ", l.data_size, " on rank ",
                world_->rank(), " of ", world_->size(),
                ": elastic wraps only strategies whose ranks are their data-parallel slices "
                "(ddp, zero1, zero2, zero3, fsdp)");
  classified_ = false;
}

void ElasticStrategy::load(const sdk::StateReader& reader) { inner_->load(reader.raw()); }

void ElasticStrategy::save(const sdk::StateWriter& writer) { inner_->save(writer.raw()); }

void ElasticStrategy::maybe_die(int64_t step) const {
  if (kill_rank_ < 0 || step != kill_at_step_) return;
  if (origin_[static_cast<size_t>(world_->rank())] != kill_rank_) return;
  if (thread_ranks_) {
    // A thread cannot be killed alone: the rank's thread ends with this
    // error, the host aborts the world for it, the others go on.
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("kill_rank = ", kill_rank_, ": rank ", kill_rank_,
                               " leaves the run at step ", step, " (for tests)"));
  }
  host_.warn("elastic: kill_rank = ", kill_rank_, ": rank ", kill_rank_, " kills itself at step ",
             step);
  (void)std::raise(SIGKILL);
}

sdk::StepResult ElasticStrategy::step(const sdk::StepArgs& args) {
  sdk::StepResult changed;
  changed.world_changed = true;
  if (joining_) {
    // Not a member yet: a failure here is this rank's alone.
    joining_ = false;
    changed.restored_step = join();
    grown_before_ = changed.restored_step + 1;
    return changed;
  }
  try {
    if (!started_) {
      snapshot(args.step - 1);  // the loaded state
      started_ = true;
    }
    // (Once: not again when the step runs on the grown world.)
    const bool wait = args.step == wait_for_join_at_ && grown_before_ != args.step;
    const bool due = wait || (join_every_ > 0 && args.step % join_every_ == 0);
    if (can_grow_ && due && admit(args.step - 1, wait)) {
      changed.restored_step = args.step - 1;  // this step runs on the grown world
      grown_before_ = args.step;
      return changed;
    }
    maybe_die(args.step);
    TESSERA_CHECK(args.c != nullptr, TESSERA_ERR_INTERNAL,
                  "elastic: step without the host's arguments");
    const tessera_step_result r = inner_->step(*args.c);
    const int64_t copy_bytes = world_->stats().bytes_sent;
    snapshot(args.step);
    const int64_t snapshot_sent = world_->stats().bytes_sent - copy_bytes;
    sdk::StepResult out;
    out.loss = r.loss;
    out.grad_norm = r.grad_norm;
    out.skipped = r.skipped != 0;
    out.comm_wait_ns = r.comm_wait_ns;
    out.comm_bytes = r.comm_bytes + snapshot_sent;
    out.comm_bytes_raw = (r.comm_bytes_raw != 0 ? r.comm_bytes_raw : r.comm_bytes) + snapshot_sent;
    out.compress_ns = r.compress_ns;
    out.comm_bytes_cross_node = r.comm_bytes_cross_node;
    return out;
  } catch (const Error& e) {
    if (!peer_failure(e.status())) throw;
    const int32_t before = world_->size();
    sdk::StepResult out;
    out.restored_step = recover(args.step, e.what());
    out.world_changed = true;
    out.lost_ranks = before - world_->size();
    return out;
  }
}

void ElasticStrategy::snapshot(int64_t step) {
  // The older generation is written over, in place where the layout is
  // the same (the pieces and the copy keep their memory).
  Generation& g = gens_[next_gen_];
  const int64_t before = piece_bytes(g.own) + piece_bytes(g.copy);
  g.step = step;
  g.own_ok = g.copy_ok = false;
  g.copy_of = -1;
  elastic::PieceCollector into{&g.own};
  inner_->save(elastic::collecting_writer(into, TESSERA_STATE_ALL_REPLICAS, step));
  into.finish();
  g.own_ok = true;
  next_gen_ ^= 1U;  // the other generation keeps the step before
  const int32_t n = world_->size();
  if (n > 1) {
    if (!classified_) classify(g.own);
    const int32_t right = (world_->rank() + 1) % n;
    const int32_t left = (world_->rank() + n - 1) % n;
    std::vector<float>& mine = send_buffer_;
    mine.clear();
    for (const size_t i : unique_) {
      mine.insert(mine.end(), g.own[i].data.begin(), g.own[i].data.end());
    }
    if (g.copy_list != lists_) {  // the pieces of another classification
      g.copy = left_list_;
      g.copy_list = lists_;
    }
    size_t theirs = 0;
    for (const Piece& p : g.copy) theirs += p.count;
    std::vector<float>& values = receive_buffer_;
    values.resize(theirs);
    // Both ends know the lengths (classify): empty ones are not sent.
    sdk::PendingOp sent;
    if (!mine.empty()) sent = world_->start_send(std::span<const float>(mine), right, kValuesTag);
    if (!values.empty()) world_->recv(std::span<float>(values), left, kValuesTag);
    sent.wait(host_);
    size_t at = 0;
    for (Piece& p : g.copy) {
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), p.count, p.data.begin());
      at += p.count;
    }
    g.copy_of = origin_[static_cast<size_t>(left)];
    g.copy_ok = true;
  }
  const int64_t after = piece_bytes(g.own) + piece_bytes(g.copy);
  host_.track_memory(TESSERA_RANK_UNKNOWN, TESSERA_MEM_OTHER, after - before);
  tracked_bytes_ += after - before;
}

void ElasticStrategy::classify(const std::vector<Piece>& own) {
  // Which slices other ranks hold too: by a hash of each slice's identity.
  std::vector<uint64_t> hashes;
  hashes.reserve(own.size());
  for (const Piece& p : own) hashes.push_back(std::hash<std::string>{}(p.key()));
  std::vector<uint8_t> bytes(hashes.size() * sizeof(uint64_t));
  std::memcpy(bytes.data(), hashes.data(), bytes.size());
  const auto all = elastic::allgather_bytes(*world_, bytes);
  std::map<uint64_t, int> holders;
  for (const auto& list : all) {
    std::vector<uint64_t> theirs(list.size() / sizeof(uint64_t));
    std::memcpy(theirs.data(), list.data(), theirs.size() * sizeof(uint64_t));
    for (const uint64_t h : theirs) ++holders[h];
  }
  unique_.clear();
  std::vector<const Piece*> mine;
  for (size_t i = 0; i < own.size(); ++i) {
    if (holders[hashes[i]] == 1) {
      unique_.push_back(i);
      mine.push_back(&own[i]);
    }
  }
  const int32_t n = world_->size();
  const std::vector<uint8_t> list =
      elastic::exchange_bytes(host_, *world_, elastic::encode_descriptors(mine),
                              (world_->rank() + 1) % n, (world_->rank() + n - 1) % n, kListTag);
  left_list_ = elastic::decode_descriptors(list.data(), list.size());
  ++lists_;
  classified_ = true;
}

const ElasticStrategy::Generation* ElasticStrategy::generation(int64_t step) const {
  for (const Generation& g : gens_) {
    if (g.own_ok && g.step == step) return &g;
  }
  return nullptr;
}

int64_t ElasticStrategy::agree_on_step(const std::vector<int32_t>& lost) {
  // Per rank: its starting rank, then per generation step, own_ok, copy_ok, copy_of.
  constexpr size_t kWords = 1 + 4 * 2;
  std::vector<int64_t> mine(kWords);
  mine[0] = origin_[static_cast<size_t>(world_->rank())];
  for (size_t i = 0; i < gens_.size(); ++i) {
    mine[1 + 4 * i] = gens_[i].step;
    mine[2 + 4 * i] = gens_[i].own_ok ? 1 : 0;
    mine[3 + 4 * i] = gens_[i].copy_ok ? 1 : 0;
    mine[4 + 4 * i] = gens_[i].copy_of;
  }
  std::vector<int64_t> all(kWords * static_cast<size_t>(world_->size()));
  world_->allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  const auto record = [&](size_t rank, size_t gen, size_t field) {
    return all[rank * kWords + 1 + 4 * gen + field];
  };
  std::set<int64_t, std::greater<>> candidates;
  for (size_t r = 0; r < static_cast<size_t>(world_->size()); ++r) {
    for (size_t g = 0; g < gens_.size(); ++g) {
      if (record(r, g, 1) != 0) candidates.insert(record(r, g, 0));
    }
  }
  for (const int64_t t : candidates) {
    bool whole = true;
    for (size_t r = 0; whole && r < static_cast<size_t>(world_->size()); ++r) {
      bool has = false;
      for (size_t g = 0; g < gens_.size(); ++g) has |= record(r, g, 0) == t && record(r, g, 1) != 0;
      whole = has;
    }
    for (const int32_t l : lost) {
      bool copied = false;
      for (size_t r = 0; r < static_cast<size_t>(world_->size()); ++r) {
        for (size_t g = 0; g < gens_.size(); ++g) {
          copied |= record(r, g, 0) == t && record(r, g, 2) != 0 && record(r, g, 3) == l;
        }
      }
      whole = whole && copied;
    }
    if (whole) return t;
  }
  throw Error(TESSERA_ERR_PEER_LOST,
              detail::concat("elastic: the survivors do not hold the whole training state of "
                             "any step between them (lost: rank(s) ",
                             rank_list(lost),
                             "; each rank's own pieces are copied only to its right neighbour, "
                             "so two neighbours lost together take some with them): restart "
                             "from the last checkpoint (tessera launch --max-restarts)"));
}

int64_t ElasticStrategy::recover(int64_t failed_step, const std::string& why) {
  const int32_t old_size = world_->size();
  const int32_t me = origin_[static_cast<size_t>(world_->rank())];
  host_.warn("elastic: step ", failed_step, " failed on rank ", me, ": ", why,
             "; re-forming the world");
  const tessera_backend_api* api = world_->api();
  // Wakes the ranks still waiting in the step (their errors name this one).
  api->comm_abort(
      world_->raw(),
      detail::concat("elastic: rank ", me, " lost a peer and re-forms the world").c_str());
  inner_.reset();  // its groups go with the old world
  tessera_comm* fresh = nullptr;
  sdk::detail::check_host_call(host_, api->comm_shrink(world_->raw(), settle_ms_, &fresh),
                               "elastic: re-forming the world");
  replace_world(fresh);

  std::vector<int32_t> origin(static_cast<size_t>(world_->size()));
  const std::vector<int32_t> mine{me};
  world_->allgather(std::span<const int32_t>(mine), std::span<int32_t>(origin));
  std::vector<int32_t> lost;
  for (const int32_t o : origin_) {
    if (std::find(origin.begin(), origin.end(), o) == origin.end()) lost.push_back(o);
  }
  origin_ = origin;
  const int64_t restored = agree_on_step(lost);

  const Generation* found = generation(restored);
  TESSERA_CHECK(found != nullptr, TESSERA_ERR_INTERNAL, "elastic: agreed on step ", restored,
                " but holds no state of it");
  const Generation& g = *found;
  std::vector<const Piece*> held;
  for (const Piece& p : g.own) held.push_back(&p);
  if (g.copy_ok && std::find(lost.begin(), lost.end(), g.copy_of) != lost.end()) {
    for (const Piece& p : g.copy) held.push_back(&p);
  }
  const elastic::Assembled state =
      share(held, detail::concat("after step ", restored, " (lost: rank(s) ", rank_list(lost),
                                 "): restart from the last checkpoint"));
  restart_inner(state, restored);
  reason_ = detail::concat("rank(s) ", rank_list(lost), " lost; world ", old_size, " -> ",
                           world_->size(), ", the state after step ", restored,
                           " restored from the survivors' memory (no checkpoint read)");
  host_.warn("elastic: ", reason_);
  return restored;
}

elastic::Assembled ElasticStrategy::share(const std::vector<const Piece*>& held,
                                          const std::string& after) {
  // Every rank ends with every piece: each slice goes from the lowest rank
  // holding it to the ranks that lack it.
  const auto lists = elastic::allgather_bytes(*world_, elastic::encode_descriptors(held));
  const auto n = static_cast<size_t>(world_->size());
  const auto self = static_cast<size_t>(world_->rank());
  std::vector<std::vector<Piece>> theirs(n);
  std::map<std::string, std::vector<size_t>> holders;
  for (size_t r = 0; r < n; ++r) {
    theirs[r] = elastic::decode_descriptors(lists[r].data(), lists[r].size());
    for (const Piece& p : theirs[r]) {
      std::vector<size_t>& h = holders[p.key()];
      if (h.empty() || h.back() != r) h.push_back(r);
    }
  }
  const auto provides = [&](size_t r, const Piece& p) {
    const std::vector<size_t>& h = holders[p.key()];
    return h.front() == r && h.size() < n;
  };
  std::vector<float> sent;
  for (const Piece* p : held) {
    if (provides(self, *p)) sent.insert(sent.end(), p->data.begin(), p->data.end());
  }
  const auto blobs = elastic::allgather_floats(*world_, sent);
  elastic::Assembled state;
  std::set<std::string> have;
  for (const Piece* p : held) {
    state.add(*p);
    have.insert(p->key());
  }
  for (size_t r = 0; r < n; ++r) {
    if (r == self) continue;
    size_t at = 0;
    for (Piece& p : theirs[r]) {
      if (!provides(r, p)) continue;
      if (have.count(p.key()) == 0) {
        std::copy_n(blobs[r].begin() + static_cast<std::ptrdiff_t>(at), p.count, p.data.begin());
        state.add(p);
      }
      at += p.count;
    }
  }
  const std::vector<std::string> missing = state.incomplete();
  TESSERA_CHECK(missing.empty(), TESSERA_ERR_PEER_LOST, "elastic: no rank holds all of tensor '",
                missing.empty() ? "" : missing.front(), "' ", after);
  return state;
}

void ElasticStrategy::restart_inner(const elastic::Assembled& state, int64_t step) {
  make_inner();
  inner_->load(state.reader());
  for (Generation& gen : gens_) {
    host_.track_memory(TESSERA_RANK_UNKNOWN, TESSERA_MEM_OTHER,
                       -(piece_bytes(gen.own) + piece_bytes(gen.copy)));
    tracked_bytes_ -= piece_bytes(gen.own) + piece_bytes(gen.copy);
    gen = Generation{};
  }
  next_gen_ = 0;
  snapshot(step);
  started_ = true;
}

bool ElasticStrategy::admit(int64_t done, bool wait) {
  constexpr int64_t kPollMs = 20;
  const int64_t looks = wait ? std::max<int64_t>(join_wait_ms_ / kPollMs, 1) : 1;
  tessera_comm* grown = nullptr;
  for (int64_t i = 0; grown == nullptr && i < looks; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    sdk::detail::check_host_call(host_, world_->api()->comm_grow(world_->raw(), 0, &grown),
                                 "elastic: admitting joining ranks");
  }
  if (grown == nullptr) return false;
  const int32_t before = world_->size();
  const int64_t step = take_grown_world(grown, done).step;
  std::vector<int32_t> joined(origin_.begin() + before, origin_.end());
  reason_ = detail::concat("rank(s) ", rank_list(joined), " joined; the state after step ", step,
                           " sent to them from the members' memory");
  host_.warn("elastic: world ", before, " -> ", world_->size(), ": ", reason_);
  return true;
}

int64_t ElasticStrategy::join() {
  tessera_comm* grown = nullptr;
  sdk::detail::check_host_call(host_,
                               world_->api()->comm_grow(world_->raw(), join_wait_ms_, &grown),
                               "elastic: joining the running world");
  TESSERA_CHECK(grown != nullptr, TESSERA_ERR_INTERNAL,
                "elastic: the backend admitted this rank into no world");
  const Grown grew = take_grown_world(grown, -1);
  reason_ = detail::concat("rank ", origin_[static_cast<size_t>(world_->rank())],
                           " joined the running world of ", grew.members, " ranks (now ",
                           world_->size(), "), with its state after step ", grew.step);
  host_.warn("elastic: ", reason_);
  return grew.step;
}

ElasticStrategy::Grown ElasticStrategy::take_grown_world(tessera_comm* grown, int64_t done) {
  const bool member = done >= 0;
  inner_.reset();  // its groups go with the old world
  replace_world(grown);
  // Per rank: its name (-1: a newcomer), the step it holds, the next name.
  const std::vector<int64_t> mine{member ? origin_[static_cast<size_t>(world_->rank())] : -1, done,
                                  member ? next_origin_ : 0};
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(world_->size()));
  world_->allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  const int64_t step = all[1];
  int64_t next = 0;
  int32_t members = 0;
  for (size_t r = 0; r < static_cast<size_t>(world_->size()); ++r) {
    next = std::max(next, all[3 * r + 2]);
    if (all[3 * r] >= 0) ++members;
    TESSERA_CHECK(all[3 * r] < 0 || all[3 * r + 1] == step, TESSERA_ERR_INTERNAL,
                  "elastic: member ", r, " of the grown world holds step ", all[3 * r + 1],
                  ", rank 0 step ", step);
  }
  TESSERA_CHECK(step >= 0 && all[0] >= 0, TESSERA_ERR_INTERNAL,
                "elastic: rank 0 of the grown world is not one of its members");
  origin_.assign(static_cast<size_t>(world_->size()), 0);
  for (size_t r = 0; r < origin_.size(); ++r) {
    origin_[r] = static_cast<int32_t>(all[3 * r] >= 0 ? all[3 * r] : next++);
  }
  next_origin_ = static_cast<int32_t>(next);

  std::vector<const Piece*> held;
  if (member) {
    const Generation* found = generation(step);
    TESSERA_CHECK(found != nullptr, TESSERA_ERR_INTERNAL, "elastic: admitting after step ", step,
                  " but holds no state of it");
    for (const Piece& p : found->own) held.push_back(&p);
  }
  const elastic::Assembled state =
      share(held, detail::concat("after step ", step, " among the members"));
  restart_inner(state, step);
  return Grown{step, members};
}

void ElasticStrategy::replace_world(tessera_comm* fresh) {
  const tessera_backend_api* api = world_->api();
  // The host runs on the old world until the step reports the change (and
  // aborts it if anything fails first): it lives until the next change.
  retired_ = std::move(world_);
  world_ = std::make_unique<sdk::CommView>(host_, api, fresh, /*owned=*/true);
}

tessera_strategy_world ElasticStrategy::world() {
  tessera_strategy_world w{};
  w.struct_size = sizeof w;
  w.rank = world_->rank();
  w.world_size = world_->size();
  w.comm = world_->raw();
  w.layout = inner_->layout();
  w.reason = reason_.c_str();
  return w;
}

}  // namespace tessera::strategies
