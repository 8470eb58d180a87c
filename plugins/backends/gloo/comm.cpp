#include "comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "forever.hpp"
#include "p2p.hpp"
#include "rendezvous.hpp"
#include "store.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/dtype.hpp"
#include "work.hpp"

namespace tessera::gloo_backend {
namespace {

std::chrono::milliseconds gloo_timeout(int64_t timeout_ms) {
  return timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : kForever;
}

tessera_buffer cpu_i32(int32_t* data, uint64_t count) {
  return tessera_buffer{data, count, TESSERA_I32, tessera_device{TESSERA_DEVICE_CPU, 0}};
}

// The members a shrink agreed on, as written by rank_list; nullopt unless
// they are distinct ranks of a group of `size` in increasing order.
std::optional<std::vector<int32_t>> parse_members(const std::vector<char>& value, int32_t size) {
  std::vector<int32_t> members;
  const std::string text(value.begin(), value.end());
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(", ", at);
    if (end == std::string::npos) end = text.size();
    const auto rank = sdk::parse_int(text.substr(at, end - at));
    if (!rank || *rank < 0 || *rank >= size || (!members.empty() && *rank <= members.back())) {
      return std::nullopt;
    }
    members.push_back(static_cast<int32_t>(*rank));
    at = end + 2;
  }
  return members;
}

}  // namespace

GlooComm::GlooComm(std::shared_ptr<Engine> engine, std::shared_ptr<Group> group)
    : engine_(std::move(engine)),
      group_(std::move(group)),
      scratch_(engine_->host, group_->identity().world_ranks[static_cast<size_t>(group_->rank())]),
      raw_scratch_(engine_->host,
                   group_->identity().world_ranks[static_cast<size_t>(group_->rank())]) {
  engine_->control->add(group_);
  engine_->watchdog.add(group_);
  if (group_->sockets().size() + 1 < static_cast<size_t>(size())) {
    engine_->host.log(TESSERA_LOG_WARN, engine_->settings.rank, "gloo: found the sockets of only ",
                      group_->sockets().size(), " of ", size() - 1, " peers of group '",
                      group_->identity().name,
                      "'; an abort reaches the others only when their own timeout ends them");
  }
}

template <typename Body>
void GlooComm::finish(Completion& done, Body&& body) noexcept {
  std::optional<Error> error;
  try {
    body();
  } catch (const Error& e) {
    error = e;
  } catch (const std::exception& e) {
    error = Error(TESSERA_ERR_INTERNAL, e.what());
  }
  // Counted as finished before anyone waiting on `done` can run on.
  outstanding_.fetch_sub(1);
  done.finish(std::move(error));
}

template <typename Runner>
void GlooComm::submit_counted(Runner& runner, Job job) {
  outstanding_.fetch_add(1);
  try {
    if constexpr (std::is_same_v<Runner, Executor>) {
      runner.submit(std::move(job));
    } else {
      runner.run(std::move(job));
    }
  } catch (...) {
    outstanding_.fetch_sub(1);  // never queued: no finish() will count it
    throw;
  }
}

GlooComm::~GlooComm() {
  const size_t pending = outstanding_.load();
  if (pending > 0) {
    group_->fail(Error(TESSERA_ERR_PEER_LOST,
                       where(detail::concat("the communicator was destroyed with ", pending,
                                            " operation(s) still pending"))));
  }
  waiters_.shutdown();
  executor_.shutdown();
  engine_->control->remove(group_->identity().key);
}

std::string GlooComm::where(const std::string& what) const {
  return detail::concat(what, " on group '", group_->identity().name, "' (rank ", rank(), " of ",
                        size(), ")");
}

void GlooComm::execute(const tessera_coll_args& args, uint64_t seq, int64_t timeout_ms,
                       const std::string& label) {
  group_->check();
  OpInfo op;
  op.coll = args.coll;
  op.seq = seq;
  op.label = label;
  RunOptions opts;
  opts.timeout = gloo_timeout(timeout_ms);
  opts.scratch = &scratch_;
  opts.sockets = &group_->sockets();
  Waits waits;
  const WaitRegistry::Enlisted enlisted(group_->waits(), waits);
  opts.waits = &waits;
  if (args.coll == TESSERA_COLL_ALLREDUCE) {
    opts.allreduce = resolve_allreduce(engine_->settings.algorithm, args, size(),
                                       engine_->settings.auto_threshold_bytes);
  }
  if (timeout_ms > 0) {
    auto limit = std::chrono::milliseconds(timeout_ms);
    // gloo applies its timeout to each wait inside an operation, not to the
    // whole of it: the watch ends the operation shortly after its deadline.
    if (gloo_enforces_timeout(args.coll, opts.allreduce)) {
      limit += std::max(std::chrono::milliseconds(25), limit / 10);
    }
    group_->watch(op.start + limit);
  }
  try {
    run_collective(group_->context(), args, opts);
  } catch (const Error&) {
    group_->unwatch();
    throw;
  } catch (const std::exception& e) {
    group_->unwatch();
    throw explain_failure(*engine_, *group_, op, e.what());
  }
  group_->unwatch();
  // gloo returns normally from waits the group's breakage interrupted: the
  // result is not to be trusted.
  if (waits.interrupted()) {
    throw explain_failure(*engine_, *group_, op,
                          "its waits were interrupted (the group's connections were shut down)");
  }
}

std::unique_ptr<sdk::Work> GlooComm::post(const tessera_coll_args& args, bool nonblocking) {
  sdk::validate_coll_args(args, rank(), size(), TESSERA_BACKEND_CAP_CPU_BUFFERS);
  if (args.coll == TESSERA_COLL_SEND || args.coll == TESSERA_COLL_RECV) {
    return post_p2p(args, nonblocking);
  }
  group_->check();
  const uint64_t seq = group_->post_collective();
  const int64_t timeout = engine_->settings.resolve_timeout(args.timeout_ms);
  if (!nonblocking && executor_.idle()) {
    execute(args, seq, timeout);
    return nullptr;
  }
  auto done = std::make_shared<Completion>();
  submit_counted(executor_, [this, args, seq, timeout, done] {
    finish(*done, [&] { execute(args, seq, timeout); });
  });
  if (!nonblocking) {
    done->wait(-1);
    done->rethrow();
    return nullptr;
  }
  return std::make_unique<TaskWork>(done, where(detail::concat(coll_name(args.coll), " #", seq)));
}

std::unique_ptr<sdk::Work> GlooComm::post_p2p(const tessera_coll_args& args, bool nonblocking) {
  group_->check();
  OpInfo op;
  op.coll = args.coll;
  op.peer = args.peer;
  op.tag = args.tag;
  op.seq =
      args.coll == TESSERA_COLL_SEND ? group_->post_send(args.peer) : group_->post_recv(args.peer);
  const int64_t timeout = engine_->settings.resolve_timeout(args.timeout_ms);
  const auto limit = std::chrono::milliseconds(timeout);  // < 0: P2pOp waits without limit
  auto p2p = std::make_shared<P2pOp>(group_->context(), args, &group_->waits());
  try {
    p2p->post();
  } catch (const std::exception& e) {
    throw explain_failure(*engine_, *group_, op, e.what());
  }
  if (!nonblocking) {
    try {
      p2p->wait(limit);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw explain_failure(*engine_, *group_, op, e.what());
    }
    return nullptr;
  }
  auto done = std::make_shared<Completion>();
  submit_counted(waiters_, [this, p2p, op, limit, done] {
    finish(*done, [&] {
      try {
        p2p->wait(limit);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        throw explain_failure(*engine_, *group_, op, e.what());
      }
    });
  });
  const std::string what = detail::concat(coll_name(args.coll), " #", op.seq,
                                          args.coll == TESSERA_COLL_SEND ? " to" : " from",
                                          " rank ", args.peer, " (tag ", args.tag, ")");
  return std::make_unique<TaskWork>(done, where(what));
}

void GlooComm::run_internal(const tessera_coll_args& args, const char* label) {
  // Through the normal path, so it is ordered after queued operations and
  // its failures are reported like any other collective's.
  group_->check();
  const uint64_t seq = group_->post_collective();
  const int64_t timeout = engine_->settings.timeout_ms;
  if (!executor_.idle()) {
    auto done = std::make_shared<Completion>();
    submit_counted(executor_, [this, args, seq, timeout, done, label] {
      finish(*done, [&] { execute(args, seq, timeout, label); });
    });
    done->wait(-1);
    done->rethrow();
  } else {
    execute(args, seq, timeout, label);
  }
}

std::unique_ptr<sdk::Comm> GlooComm::split(int32_t color, int32_t key) {
  const int32_t n = size();
  std::vector<int32_t> mine{color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  tessera_coll_args exchange{};
  exchange.struct_size = sizeof exchange;
  exchange.coll = TESSERA_COLL_ALLGATHER;
  exchange.send = cpu_i32(mine.data(), 2);
  exchange.recv = cpu_i32(all.data(), all.size());
  run_internal(exchange, "split");
  const uint64_t number = ++splits_;
  if (color < 0) return nullptr;

  // Members of my colour, ordered by key, then by rank in this group.
  std::vector<std::pair<int32_t, int32_t>> members;  // (key, rank)
  for (int32_t r = 0; r < n; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) {
      members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
    }
  }
  std::sort(members.begin(), members.end());
  const GroupIdentity& parent = group_->identity();
  GroupIdentity identity;
  identity.id = detail::concat(parent.id, ".s", number, "c", color);
  identity.key = group_key(identity.id);
  identity.name = detail::concat("split ", number, " colour ", color, " of ", parent.name);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank()) identity.rank = static_cast<int32_t>(i);
    identity.world_ranks.push_back(parent.world_ranks[static_cast<size_t>(members[i].second)]);
  }
  const GroupAddress address{engine_->prefix + "/" + identity.id, identity.name, identity.rank,
                             identity.size()};
  const int64_t timeout = engine_->settings.timeout_ms;
  const auto store = open_store(engine_->host, engine_->settings);
  await_members(*store, address, timeout);
  Connection connection = connect_group(*store, open_store(engine_->host, engine_->settings),
                                        address, engine_->device.device, timeout);
  auto child = std::make_shared<Group>(std::move(identity), std::move(connection));
  group_->add_child(child);
  return std::make_unique<GlooComm>(engine_, std::move(child));
}

std::unique_ptr<sdk::Comm> GlooComm::shrink(int64_t grace_ms) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const GroupIdentity& parent = group_->identity();
  const int32_t n = size();
  const int32_t me = rank();
  const int64_t timeout = engine_->settings.timeout_ms;
  const uint64_t number = ++shrinks_;
  GroupIdentity identity;
  identity.id = detail::concat(parent.id, ".x", number);
  const std::string prefix = engine_->prefix + "/" + identity.id;
  const auto alive_key = [&](int32_t r) { return detail::concat(prefix, "/alive/", r); };
  const auto store = open_store(engine_->host, engine_->settings);

  // Who is still there: the members whose alive key appears within the
  // grace (all of them: no need to wait longer).
  const std::string pid = "pid " + std::to_string(::getpid());
  store->set(alive_key(me), std::vector<char>(pid.begin(), pid.end()));
  std::vector<int32_t> absent;
  for (int32_t r = 0; r < n; ++r) {
    if (r != me) absent.push_back(r);
  }
  const auto grace = std::chrono::milliseconds(grace_ms);
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::erase_if(absent, [&](int32_t r) { return store->has({alive_key(r)}); });
    const auto left =
        grace - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (absent.empty() || left.count() <= 0) break;
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  std::vector<int32_t> seen;
  for (int32_t r = 0; r < n; ++r) {
    if (std::find(absent.begin(), absent.end(), r) == absent.end()) seen.push_back(r);
  }

  // The first proposal stands; every caller reads it back.
  const std::string proposal = rank_list(seen);
  const std::string members_key = prefix + "/members";
  store->put_if_absent(members_key, std::vector<char>(proposal.begin(), proposal.end()));
  const std::vector<char> agreed = store->await(
      members_key, timeout, detail::concat("the survivors of group '", parent.name, "'"));
  const auto members = parse_members(agreed, n);
  if (!members) {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("gloo: the survivors of group '", parent.name, "' under key '",
                               members_key, "' are '", std::string(agreed.begin(), agreed.end()),
                               "', not a list of its ranks"));
  }
  const auto mine = std::find(members->begin(), members->end(), me);
  if (mine == members->end()) {
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("gloo: rank ", me, " arrived after the survivors of group '",
                               parent.name, "' had agreed on ranks [", rank_list(*members),
                               "] of it; it is left out of the re-formed group (a survivor "
                               "waits for the others only for the grace after its own call)"));
  }

  std::vector<int32_t> missing;  // world ranks of the members left out
  for (int32_t r = 0; r < n; ++r) {
    if (!std::binary_search(members->begin(), members->end(), r)) {
      missing.push_back(parent.world_ranks[static_cast<size_t>(r)]);
    }
  }
  identity.key = group_key(identity.id);
  identity.name = parent.name + " re-formed";
  if (!missing.empty()) {
    identity.name +=
        detail::concat(" without ", parent.id == "w" ? "" : "world ", ranks_phrase(missing));
  }
  identity.rank = static_cast<int32_t>(mine - members->begin());
  for (const int32_t r : *members) {
    identity.world_ranks.push_back(parent.world_ranks[static_cast<size_t>(r)]);
  }
  const GroupAddress address{prefix, identity.name, identity.rank, identity.size()};
  await_members(*store, address, timeout);
  Connection connection = connect_group(*store, open_store(engine_->host, engine_->settings),
                                        address, engine_->device.device, timeout);
  engine_->host.log(TESSERA_LOG_INFO, engine_->settings.rank, "gloo: group '", parent.name,
                    "' re-formed as '", identity.name, "' of ", identity.size(), " ranks (rank ",
                    me, " is now rank ", identity.rank, ")");
  // Not a child of the failed group: its abort must not reach this one.
  auto group = std::make_shared<Group>(std::move(identity), std::move(connection));
  return std::make_unique<GlooComm>(engine_, std::move(group));
}

namespace {

// The run's join queue: entry i is claimed by one joining process; its
// "decided" key says "admitted" (written by the running world's rank 0) or
// "withdrawn" (by the joiner, when it gave up first); "admit" then tells the
// admitted joiner where it goes.
std::string queue_key(const Settings& s, int64_t entry) {
  return detail::concat(s.store.run_id, "/joinq/", entry);
}

constexpr const char* kAdmitted = "admitted";

// "<prefix>\n<rank>\n<size>\n<next_join>": an admitted joiner's place.
std::string admission_text(const std::string& prefix, int32_t rank, int32_t size,
                           int64_t next_join) {
  return detail::concat(prefix, "\n", rank, "\n", size, "\n", next_join);
}

std::vector<std::string> lines_of(const std::vector<char>& value) {
  std::vector<std::string> lines;
  std::string text(value.begin(), value.end());
  size_t at = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n', at)) {
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  lines.push_back(text.substr(at));
  return lines;
}

}  // namespace

std::unique_ptr<GlooComm> connect_world(const sdk::Host& host, WorldStart start) {
  const Settings& s = start.settings;
  auto engine = std::make_shared<Engine>(host, s);
  engine->store_service = std::move(start.store_service);
  engine->device = std::move(start.device);
  engine->prefix = std::move(start.prefix);
  engine->next_join = start.next_join;

  const auto store = open_store(host, s);
  const GroupAddress world{engine->prefix + "/w", "world", s.rank, s.world_size};
  await_members(*store, world, s.timeout_ms);
  Connection data =
      connect_group(*store, open_store(host, s), world, engine->device.device, s.timeout_ms);
  const GroupAddress control{engine->prefix + "/control", "control", s.rank, s.world_size};
  Connection channel =
      connect_group(*store, open_store(host, s), control, engine->device.device, s.timeout_ms);
  engine->control = std::make_unique<Control>(host, std::move(channel));

  GroupIdentity identity;
  identity.id = "w";
  identity.key = group_key(identity.id);
  identity.name = "world";
  identity.rank = s.rank;
  identity.world_ranks.resize(static_cast<size_t>(s.world_size));
  std::iota(identity.world_ranks.begin(), identity.world_ranks.end(), 0);
  auto group = std::make_shared<Group>(std::move(identity), std::move(data));
  host.log(TESSERA_LOG_DEBUG, s.rank, "gloo: world of ", s.world_size, " ranks connected");
  return std::make_unique<GlooComm>(std::move(engine), std::move(group));
}

std::unique_ptr<sdk::Comm> GlooComm::grow(int64_t wait_ms) {
  // A joining process's own world is the only one whose settings say so
  // (the world it is admitted to is an ordinary one).
  if (engine_->settings.joining) return join(wait_ms);
  return admit();
}

std::unique_ptr<sdk::Comm> GlooComm::admit() {
  const Settings& s = engine_->settings;
  // Rank 0 decides the waiting entries; everyone learns {next, count}.
  std::array<int64_t, 2> decided{engine_->next_join, 0};
  std::vector<int64_t> admitted;
  if (rank() == 0) {
    try {
      if (!engine_->join_store) engine_->join_store = open_store(engine_->host, s);
      Store& store = *engine_->join_store;
      int64_t entry = engine_->next_join;
      while (store.has({queue_key(s, entry)})) {
        const std::string claim(kAdmitted);
        if (store.put_if_absent(queue_key(s, entry) + "/decided",
                                std::vector<char>(claim.begin(), claim.end()))) {
          admitted.push_back(entry);
        }
        ++entry;
      }
      decided = {entry, static_cast<int64_t>(admitted.size())};
    } catch (const Error& e) {
      // The run goes on without admitting anyone this time.
      engine_->join_store.reset();
      engine_->host.log(TESSERA_LOG_WARN, s.rank, "gloo: cannot look for joining ranks in the ",
                        s.store_description(), ": ", e.what());
      decided = {engine_->next_join, 0};
      admitted.clear();
    }
  }
  const int32_t n = size();
  const auto total = [&] { return n + static_cast<int32_t>(decided[1]); };
  const uint64_t number = engine_->grows + 1;
  const std::string prefix = detail::concat(engine_->prefix, "/g", number);
  if (rank() == 0) {
    // Their places first, so that a joiner waits no longer than the members.
    for (size_t j = 0; j < admitted.size(); ++j) {
      const std::string text =
          admission_text(prefix, n + static_cast<int32_t>(j), total(), decided[0]);
      engine_->join_store->set(queue_key(s, admitted[j]) + "/admit",
                               std::vector<char>(text.begin(), text.end()));
    }
  }
  tessera_coll_args tell{};
  tell.struct_size = sizeof tell;
  tell.coll = TESSERA_COLL_BROADCAST;
  tell.send = tessera_buffer{decided.data(), decided.size(), TESSERA_I64,
                             tessera_device{TESSERA_DEVICE_CPU, 0}};
  tell.recv = tell.send;
  tell.root = 0;
  run_internal(tell, "grow");
  engine_->next_join = decided[0];
  if (decided[1] == 0) return nullptr;
  engine_->grows = number;

  WorldStart start;
  start.settings = s;
  start.settings.rank = rank();
  start.settings.world_size = total();
  start.prefix = prefix;
  start.device = engine_->device;
  start.store_service = engine_->store_service;
  start.next_join = decided[0];
  engine_->host.log(TESSERA_LOG_INFO, s.rank, "gloo: admitting ", decided[1],
                    decided[1] == 1 ? " joining rank" : " joining ranks", ": world of ", n, " -> ",
                    total(), " ranks (rank ", rank(), " stays rank ", rank(), ")");
  return connect_world(engine_->host, std::move(start));
}

std::unique_ptr<sdk::Comm> GlooComm::join(int64_t wait_ms) {
  const Settings& s = engine_->settings;
  const auto store = open_store(engine_->host, s);
  // The first free entry of the queue is this process's.
  const std::string pid = "pid " + std::to_string(::getpid());
  int64_t entry = 0;
  while (!store->put_if_absent(queue_key(s, entry), std::vector<char>(pid.begin(), pid.end()))) {
    ++entry;
  }
  const std::string key = queue_key(s, entry);
  const std::string awaited = "admission into the running world of run '" + s.store.run_id +
                              "' (its ranks admit joining ones at the start of a step, under "
                              "the elastic strategy)";
  engine_->host.log(TESSERA_LOG_INFO, s.rank, "gloo: waiting to join the running world of run '",
                    s.store.run_id, "' (entry ", entry, " of its join queue in the ",
                    s.store_description(), ")");
  try {
    (void)store->await(key + "/decided", wait_ms, awaited);
  } catch (const Error& e) {
    if (e.status() != TESSERA_ERR_TIMEOUT) throw;
    const std::string gone = "withdrawn";
    if (store->put_if_absent(key + "/decided", std::vector<char>(gone.begin(), gone.end()))) {
      throw;  // withdrawn before anyone admitted it
    }
  }
  const std::vector<char> decision = store->await(key + "/decided", s.timeout_ms, awaited);
  if (std::string(decision.begin(), decision.end()) != kAdmitted) {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("gloo: entry ", entry, " of the join queue of run '", s.store.run_id,
                               "' was decided '", std::string(decision.begin(), decision.end()),
                               "', not by it"));
  }
  const std::vector<char> place = store->await(key + "/admit", s.timeout_ms, awaited);
  const std::vector<std::string> fields = lines_of(place);
  const auto rank = fields.size() == 4 ? sdk::parse_int(fields[1]) : std::nullopt;
  const auto size = fields.size() == 4 ? sdk::parse_int(fields[2]) : std::nullopt;
  const auto next = fields.size() == 4 ? sdk::parse_int(fields[3]) : std::nullopt;
  if (!rank || !size || !next || *rank < 1 || *rank >= *size) {
    throw Error(
        TESSERA_ERR_INTERNAL,
        detail::concat("gloo: the admission under '", key, "/admit' is '",
                       std::string(place.begin(), place.end()), "', not a place in a world"));
  }
  WorldStart start;
  start.settings = s;
  start.settings.joining = false;
  start.settings.rank = static_cast<int32_t>(*rank);
  start.settings.world_size = static_cast<int32_t>(*size);
  start.prefix = fields[0];
  start.device = engine_->device;
  start.next_join = *next;
  engine_->host.log(TESSERA_LOG_INFO, start.settings.rank, "gloo: admitted as rank ", *rank, " of ",
                    *size);
  return connect_world(engine_->host, std::move(start));
}

void GlooComm::abort(const char* reason) noexcept {
  try {
    const std::string text = reason != nullptr ? reason : "aborted";
    engine_->control->send_abort(*group_, text);
    group_->abort(text, "this rank");
  } catch (...) {
    group_->break_sockets();
  }
}

void GlooComm::raw(const tessera_coll_args& args) {
  const int64_t timeout = engine_->settings.timeout_ms;
  try {
    if (args.coll == TESSERA_COLL_SEND || args.coll == TESSERA_COLL_RECV) {
      P2pOp p2p(group_->context(), args, nullptr);
      p2p.post();
      p2p.wait(std::chrono::milliseconds(timeout));
      return;
    }
    RunOptions opts;
    opts.timeout = gloo_timeout(timeout);
    opts.scratch = &raw_scratch_;
    opts.sockets = &group_->sockets();
    if (args.coll == TESSERA_COLL_ALLREDUCE) {
      opts.allreduce = resolve_allreduce(engine_->settings.algorithm, args, size(),
                                         engine_->settings.auto_threshold_bytes);
    }
    run_collective(group_->context(), args, opts);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_PEER_LOST,
                where(detail::concat("raw ", coll_name(args.coll), " failed in gloo: ", e.what())));
  }
}

}  // namespace tessera::gloo_backend
