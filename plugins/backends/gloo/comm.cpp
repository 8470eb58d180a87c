#include "comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "forever.hpp"
#include "p2p.hpp"
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

// "0, 1, 3".
std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string text;
  for (const int32_t r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
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
    const auto rank = backend_store::parse_int(text.substr(at, end - at));
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
  auto p2p = std::make_shared<P2pOp>(group_->context(), args);
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

std::unique_ptr<sdk::Comm> GlooComm::split(int32_t color, int32_t key) {
  const int32_t n = size();
  std::vector<int32_t> mine{color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  tessera_coll_args exchange{};
  exchange.struct_size = sizeof exchange;
  exchange.coll = TESSERA_COLL_ALLGATHER;
  exchange.send = cpu_i32(mine.data(), 2);
  exchange.recv = cpu_i32(all.data(), all.size());
  // Through the normal path, so it is ordered after queued operations and
  // its failures are reported like any other collective's.
  group_->check();
  const uint64_t seq = group_->post_collective();
  const int64_t timeout = engine_->settings.timeout_ms;
  if (!executor_.idle()) {
    auto done = std::make_shared<Completion>();
    submit_counted(executor_, [this, exchange, seq, timeout, done] {
      finish(*done, [&] { execute(exchange, seq, timeout, "split"); });
    });
    done->wait(-1);
    done->rethrow();
  } else {
    execute(exchange, seq, timeout, "split");
  }
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
  const auto store = open_store(engine_->settings);
  await_members(*store, address, timeout);
  Connection connection = connect_group(*store, address, engine_->device.device, timeout);
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
  const auto store = open_store(engine_->settings);

  // Who is still there: the members whose alive key appears within the
  // grace (all of them: no need to wait longer).
  const std::string pid = "pid " + std::to_string(::getpid());
  store->put(alive_key(me), std::vector<char>(pid.begin(), pid.end()));
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
    identity.name += detail::concat(" without ", parent.id == "w" ? "" : "world ",
                                    missing.size() == 1 ? "rank " : "ranks ", rank_list(missing));
  }
  identity.rank = static_cast<int32_t>(mine - members->begin());
  for (const int32_t r : *members) {
    identity.world_ranks.push_back(parent.world_ranks[static_cast<size_t>(r)]);
  }
  const GroupAddress address{prefix, identity.name, identity.rank, identity.size()};
  await_members(*store, address, timeout);
  Connection connection = connect_group(*store, address, engine_->device.device, timeout);
  engine_->host.log(TESSERA_LOG_INFO, engine_->settings.rank, "gloo: group '", parent.name,
                    "' re-formed as '", identity.name, "' of ", identity.size(), " ranks (rank ",
                    me, " is now rank ", identity.rank, ")");
  // Not a child of the failed group: its abort must not reach this one.
  auto group = std::make_shared<Group>(std::move(identity), std::move(connection));
  return std::make_unique<GlooComm>(engine_, std::move(group));
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
      P2pOp p2p(group_->context(), args);
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
