#include "harness.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

namespace tessera::test {

const Plugin& Plugin::get() {
  static const Plugin plugin = [] {
    void* lib = dlopen(TESSERA_INMEMORY_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      throw std::runtime_error(std::string("cannot load ") + TESSERA_INMEMORY_PLUGIN + ": " +
                               dlerror());  // NOLINT(concurrency-mt-unsafe): runs once
    }
    void* sym = dlsym(lib, TESSERA_PLUGIN_ENTRY_SYMBOL);
    if (sym == nullptr) {
      throw std::runtime_error(std::string("no entry point in ") + TESSERA_INMEMORY_PLUGIN);
    }
    auto entry = reinterpret_cast<tessera_plugin_entry_fn>(sym);  // NOLINT: dlsym result
    Plugin p;
    p.descriptor = entry();
    p.api = static_cast<const tessera_backend_api*>(p.descriptor->api);
    return p;
  }();
  return plugin;
}

void check(tessera_status status) {
  if (status != TESSERA_OK) throw Error(status, FakeHost::last_error());
}

Work::~Work() {
  if (work_ == nullptr) return;
  int32_t done = 0;
  if (Plugin::get().api->work_test(work_, &done) == TESSERA_OK && done == 0) {
    Plugin::get().api->work_wait(work_, -1);
  }
  Plugin::get().api->work_free(work_);
}

void Work::wait(int64_t timeout_ms) { check(Plugin::get().api->work_wait(work_, timeout_ms)); }

bool Work::test() {
  int32_t done = 0;
  check(Plugin::get().api->work_test(work_, &done));
  return done != 0;
}

Comm::~Comm() { Plugin::get().api->comm_destroy(comm_); }
int32_t Comm::rank() const { return Plugin::get().api->comm_rank(comm_); }
int32_t Comm::size() const { return Plugin::get().api->comm_size(comm_); }

void Comm::run(const tessera_coll_args& a) { check(Plugin::get().api->post(comm_, &a, nullptr)); }

Work Comm::start(const tessera_coll_args& a) {
  tessera_work* w = nullptr;
  check(Plugin::get().api->post(comm_, &a, &w));
  if (w == nullptr) throw std::runtime_error("post returned no work for a non-blocking call");
  return Work(w);
}

std::unique_ptr<Comm> Comm::split(int32_t color, int32_t key) {
  tessera_comm* out = nullptr;
  check(Plugin::get().api->comm_split(comm_, color, key, &out));
  return out == nullptr ? nullptr : std::make_unique<Comm>(out);
}

void Comm::abort(const std::string& reason) {
  Plugin::get().api->comm_abort(comm_, reason.c_str());
}

tessera_options default_options(const BackendConfig& config) {
  tessera_options o;
  o.values["block_kb"] = config.block_kb;
  o.values["spin_us"] = config.spin_us;
  o.values["stream_kb"] = config.stream_kb;
  return o;
}

tessera_status try_create(FakeHost& host, const tessera_options& options,
                          const BackendConfig& config, tessera_backend** out) {
  tessera_backend_config c{sizeof(tessera_backend_config), config.world_size, config.timeout_ms, 0};
  return Plugin::get().api->create(host.api(), &options, &c, out);
}

Backend::Backend(FakeHost& host, const BackendConfig& config) : world_size_(config.world_size) {
  const tessera_options options = default_options(config);
  check(try_create(host, options, config, &backend_));
}

Backend::~Backend() { Plugin::get().api->destroy(backend_); }

std::unique_ptr<Comm> Backend::connect(int32_t rank) {
  tessera_comm* c = nullptr;
  check(Plugin::get().api->connect(backend_, rank, &c));
  return std::make_unique<Comm>(c);
}

std::vector<RankOutcome> run_ranks(Backend& backend, const std::function<void(Comm&)>& body,
                                   bool abort_on_failure) {
  const int32_t n = backend.world_size();
  std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankOutcome& out = outcomes[static_cast<size_t>(r)];
      std::unique_ptr<Comm> comm;
      try {
        comm = backend.connect(r);
        body(*comm);
      } catch (const Error& e) {
        out = RankOutcome{e.status(), e.what()};
      } catch (const std::exception& e) {
        out = RankOutcome{TESSERA_ERR_INTERNAL, e.what()};
      }
      if (out.status != TESSERA_OK && abort_on_failure && comm) {
        comm->abort("rank " + std::to_string(r) + " failed: " + out.message);
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

void run_ok(const BackendConfig& config, const std::function<void(Comm&)>& body) {
  FakeHost host;
  Backend backend(host, config);
  const auto outcomes = run_ranks(backend, body);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].status, TESSERA_OK) << "rank " << r << ": " << outcomes[r].message;
  }
}

tessera_coll_args args(tessera_coll_type coll, tessera_buffer send, tessera_buffer recv,
                       tessera_reduce_op op, int32_t root) {
  tessera_coll_args a{};
  a.struct_size = sizeof a;
  a.coll = coll;
  a.send = send;
  a.recv = recv;
  a.op = op;
  a.root = root;
  return a;
}

tessera_coll_args p2p(tessera_coll_type coll, tessera_buffer buffer, int32_t peer, int32_t tag) {
  tessera_coll_args a{};
  a.struct_size = sizeof a;
  a.coll = coll;
  if (coll == TESSERA_COLL_SEND) {
    a.send = buffer;
  } else {
    a.recv = buffer;
  }
  a.peer = peer;
  a.tag = tag;
  return a;
}

}  // namespace tessera::test
