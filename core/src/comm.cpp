#include "tessera/core/comm.hpp"

#include <cstddef>
#include <cstdlib>
#include <span>
#include <utility>

#include "checked_comm.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

// Shared by the Backend and every Communicator and Work made from it, so the
// plugin object (and its library) outlives them all.
class BackendState {
 public:
  BackendState(std::shared_ptr<LoadedPlugin> plugin, const OptionValues& options,
               const BackendSettings& settings)
      : plugin_(std::move(plugin)),
        api_(static_cast<const tessera_backend_api*>(plugin_->descriptor().api)),
        name_(plugin_->name()),
        checks_(settings.checks) {
    TESSERA_CHECK(plugin_->kind() == TESSERA_KIND_BACKEND, TESSERA_ERR_INVALID_ARGUMENT, "plugin '",
                  name_, "' (", plugin_->path().string(), ") is not a backend");
    if (settings.joining) {
      if (!detail::has_grow(*api_) ||
          (api_->capabilities & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    "TESSERA_JOIN=1: backend '" + name_ + "' (" + plugin_->path().string() +
                        ") cannot admit a process into a running world (it needs comm_grow, "
                        "backend interface 1.4, and one process per rank): gloo can");
      }
    }
    const tessera_backend_config config{sizeof(tessera_backend_config), settings.world_size,
                                        static_cast<int64_t>(settings.timeout.count()),
                                        settings.joining ? 1 : 0};
    throw_if_failed(api_->create(plugin_->host().api(), &options, &config, &backend_),
                    "backend '" + name_ + "': create failed", plugin_->path());
    checked_api_ = detail::checked_api(*api_);
  }
  BackendState(const BackendState&) = delete;
  BackendState& operator=(const BackendState&) = delete;
  ~BackendState() {
    if (backend_ != nullptr) api_->destroy(backend_);
  }

  [[nodiscard]] const tessera_backend_api& api() const noexcept { return *api_; }
  [[nodiscard]] tessera_backend* backend() const noexcept { return backend_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const tessera_backend_api& checked_api() const noexcept { return checked_api_; }
  [[nodiscard]] CollectiveChecks checks() const noexcept { return checks_; }

 private:
  std::shared_ptr<LoadedPlugin> plugin_;
  const tessera_backend_api* api_;
  std::string name_;
  CollectiveChecks checks_;
  tessera_backend_api checked_api_{};
  tessera_backend* backend_ = nullptr;
};

tessera_buffer cpu_buffer(void* data, uint64_t count, tessera_dtype dtype) noexcept {
  return tessera_buffer{data, count, dtype, tessera_device{TESSERA_DEVICE_CPU, 0}};
}

// ---- Work ----

Work::Work(std::shared_ptr<BackendState> backend, const tessera_backend_api* api,
           tessera_work* work, std::string what)
    : backend_(std::move(backend)), api_(api), work_(work), what_(std::move(what)) {}

Work::Work(Work&& other) noexcept
    : backend_(std::move(other.backend_)),
      api_(other.api_),
      work_(std::exchange(other.work_, nullptr)),
      what_(std::move(other.what_)) {}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::move(other.backend_);
    api_ = other.api_;
    work_ = std::exchange(other.work_, nullptr);
    what_ = std::move(other.what_);
  }
  return *this;
}

Work::~Work() { release(); }

void Work::release() noexcept {
  if (work_ == nullptr) return;
  const tessera_status status = api_->work_wait(work_, -1);
  if (status != TESSERA_OK) {
    get_logger("core")->error("{} failed and was never waited for: {}", what_, take_thread_error());
  }
  api_->work_free(work_);
  work_ = nullptr;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (work_ == nullptr) return;
  const tessera_status status = api_->work_wait(work_, timeout.count());
  if (status == TESSERA_ERR_TIMEOUT && timeout.count() >= 0) {
    // Still running: the caller may wait again.
    throw_if_failed(status, what_);
  }
  api_->work_free(std::exchange(work_, nullptr));
  throw_if_failed(status, what_);
}

bool Work::test() {
  if (work_ == nullptr) return true;
  int32_t done = 0;
  const tessera_status status = api_->work_test(work_, &done);
  if (done == 0 && status == TESSERA_OK) return false;
  api_->work_free(std::exchange(work_, nullptr));
  throw_if_failed(status, what_);
  return true;
}

// ---- Communicator ----

Communicator::Communicator(std::shared_ptr<BackendState> backend, tessera_comm* comm, bool checked)
    : backend_(std::move(backend)),
      api_(checked ? &backend_->checked_api() : &backend_->api()),
      comm_(comm),
      checked_(checked),
      rank_(api_->comm_rank(comm)),
      size_(api_->comm_size(comm)) {}

Communicator::~Communicator() {
  if (owned_) api_->comm_destroy(comm_);
}

std::unique_ptr<Communicator> Communicator::borrow(tessera_comm* comm) const {
  TESSERA_CHECK(comm != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "borrow: null communicator");
  std::unique_ptr<Communicator> view(new Communicator(backend_, comm, checked_));
  view->owned_ = false;
  return view;
}

const std::string& Communicator::backend_name() const noexcept { return backend_->name(); }

const tessera_backend_api* Communicator::c_api() const noexcept { return api_; }

tessera_comm* Communicator::backend_comm() const noexcept {
  return checked_ ? detail::inner_comm(comm_) : comm_;
}

tessera_coll_args Communicator::make(tessera_coll_type coll) const noexcept {
  tessera_coll_args args{};
  args.struct_size = sizeof args;
  args.coll = coll;
  args.root = 0;
  args.peer = -1;
  return args;
}

namespace {
std::string describe(const std::string& backend, tessera_coll_type coll, int rank) {
  return std::string(coll_name(coll)) + " on backend '" + backend + "' (rank " +
         std::to_string(rank) + ")";
}
}  // namespace

void Communicator::run(tessera_coll_args args) {
  args.struct_size = sizeof args;
  const tessera_status status = api_->post(comm_, &args, nullptr);
  if (status != TESSERA_OK) throw_if_failed(status, describe(backend_->name(), args.coll, rank_));
}

void Communicator::run_unverified(tessera_coll_args args) {
  if (!checked_) {
    run(args);
    return;
  }
  args.struct_size = sizeof args;
  const tessera_status status = detail::post_unverified(comm_, &args);
  if (status != TESSERA_OK) throw_if_failed(status, describe(backend_->name(), args.coll, rank_));
}

std::string Communicator::flight_recorder() const {
  return checked_ ? detail::flight_recorder(comm_) : std::string();
}

Work Communicator::start(tessera_coll_args args) {
  args.struct_size = sizeof args;
  tessera_work* work = nullptr;
  std::string what = describe(backend_->name(), args.coll, rank_);
  throw_if_failed(api_->post(comm_, &args, &work), what);
  return Work(backend_, api_, work, std::move(what));
}

bool Communicator::has_raw() const noexcept {
  const tessera_backend_api& api = backend_->api();
  return api.struct_size >= offsetof(tessera_backend_api, raw_post) + sizeof api.raw_post &&
         api.raw_post != nullptr;
}

void Communicator::run_raw(tessera_coll_args args) {
  const std::string what = "raw " + describe(backend_->name(), args.coll, rank_);
  if (!has_raw()) {
    throw Error(TESSERA_ERR_UNSUPPORTED, what + ": the backend offers no raw library call");
  }
  args.struct_size = sizeof args;
  throw_if_failed(backend_->api().raw_post(backend_comm(), &args), what);
}

namespace {
tessera_coll_args with_buffers(tessera_coll_args args, const tessera_buffer& send,
                               const tessera_buffer& recv) {
  args.send = send;
  args.recv = recv;
  return args;
}
}  // namespace

void Communicator::allreduce(const tessera_buffer& send, const tessera_buffer& recv,
                             tessera_reduce_op op) {
  auto args = with_buffers(make(TESSERA_COLL_ALLREDUCE), send, recv);
  args.op = op;
  run(args);
}
void Communicator::broadcast(const tessera_buffer& buf, int root) {
  auto args = with_buffers(make(TESSERA_COLL_BROADCAST), buf, buf);
  args.root = root;
  run(args);
}
void Communicator::reduce(const tessera_buffer& send, const tessera_buffer& recv,
                          tessera_reduce_op op, int root) {
  auto args = with_buffers(make(TESSERA_COLL_REDUCE), send, recv);
  args.op = op;
  args.root = root;
  run(args);
}
void Communicator::allgather(const tessera_buffer& send, const tessera_buffer& recv) {
  run(with_buffers(make(TESSERA_COLL_ALLGATHER), send, recv));
}
void Communicator::reduce_scatter(const tessera_buffer& send, const tessera_buffer& recv,
                                  tessera_reduce_op op) {
  auto args = with_buffers(make(TESSERA_COLL_REDUCE_SCATTER), send, recv);
  args.op = op;
  run(args);
}
void Communicator::gather(const tessera_buffer& send, const tessera_buffer& recv, int root) {
  auto args = with_buffers(make(TESSERA_COLL_GATHER), send, recv);
  args.root = root;
  run(args);
}
void Communicator::scatter(const tessera_buffer& send, const tessera_buffer& recv, int root) {
  auto args = with_buffers(make(TESSERA_COLL_SCATTER), send, recv);
  args.root = root;
  run(args);
}
void Communicator::alltoall(const tessera_buffer& send, const tessera_buffer& recv) {
  run(with_buffers(make(TESSERA_COLL_ALLTOALL), send, recv));
}
void Communicator::barrier() { run(make(TESSERA_COLL_BARRIER)); }
void Communicator::send(const tessera_buffer& buf, int peer, int tag) {
  auto args = with_buffers(make(TESSERA_COLL_SEND), buf, tessera_buffer{});
  args.recv.dtype = buf.dtype;
  args.recv.device = buf.device;
  args.peer = peer;
  args.tag = tag;
  run(args);
}
void Communicator::recv(const tessera_buffer& buf, int peer, int tag) {
  auto args = with_buffers(make(TESSERA_COLL_RECV), tessera_buffer{}, buf);
  args.send.dtype = buf.dtype;
  args.send.device = buf.device;
  args.peer = peer;
  args.tag = tag;
  run(args);
}

Work Communicator::iallreduce(const tessera_buffer& send, const tessera_buffer& recv,
                              tessera_reduce_op op) {
  auto args = with_buffers(make(TESSERA_COLL_ALLREDUCE), send, recv);
  args.op = op;
  return start(args);
}
Work Communicator::ibroadcast(const tessera_buffer& buf, int root) {
  auto args = with_buffers(make(TESSERA_COLL_BROADCAST), buf, buf);
  args.root = root;
  return start(args);
}
Work Communicator::iallgather(const tessera_buffer& send, const tessera_buffer& recv) {
  return start(with_buffers(make(TESSERA_COLL_ALLGATHER), send, recv));
}
Work Communicator::ireduce_scatter(const tessera_buffer& send, const tessera_buffer& recv,
                                   tessera_reduce_op op) {
  auto args = with_buffers(make(TESSERA_COLL_REDUCE_SCATTER), send, recv);
  args.op = op;
  return start(args);
}
Work Communicator::isend(const tessera_buffer& buf, int peer, int tag) {
  auto args = with_buffers(make(TESSERA_COLL_SEND), buf, tessera_buffer{});
  args.recv.dtype = buf.dtype;
  args.recv.device = buf.device;
  args.peer = peer;
  args.tag = tag;
  return start(args);
}
Work Communicator::irecv(const tessera_buffer& buf, int peer, int tag) {
  auto args = with_buffers(make(TESSERA_COLL_RECV), tessera_buffer{}, buf);
  args.send.dtype = buf.dtype;
  args.send.device = buf.device;
  args.peer = peer;
  args.tag = tag;
  return start(args);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  tessera_comm* out = nullptr;
  throw_if_failed(api_->comm_split(comm_, color, key, &out),
                  "split on backend '" + backend_->name() + "' (rank " + std::to_string(rank_) +
                      ", color " + std::to_string(color) + ")");
  if (out == nullptr) return nullptr;
  return std::unique_ptr<Communicator>(new Communicator(backend_, out, checked_));
}

std::unique_ptr<Communicator> Communicator::split_checked(int color, int key,
                                                          CollectiveChecks checks,
                                                          const std::string& label) {
  TESSERA_CHECK(checks != CollectiveChecks::off, TESSERA_ERR_INVALID_ARGUMENT,
                "split_checked needs checks other than off");
  tessera_comm* out = nullptr;
  const std::string what = "split on backend '" + backend_->name() + "' (rank " +
                           std::to_string(rank_) + ", color " + std::to_string(color) + ")";
  throw_if_failed(backend_->api().comm_split(backend_comm(), color, key, &out), what);
  if (out == nullptr) return nullptr;
  detail::CheckSettings check;
  check.verify = checks == CollectiveChecks::verify;
  check.backend = backend_->name();
  tessera_comm* checked = nullptr;
  throw_if_failed(detail::wrap(backend_->api(), out, check, label, &checked), what);
  return std::unique_ptr<Communicator>(new Communicator(backend_, checked, true));
}

void Communicator::abort(const std::string& reason) noexcept {
  api_->comm_abort(comm_, reason.c_str());
}

// ---- Backend ----

Backend::Backend(std::shared_ptr<LoadedPlugin> plugin, const OptionValues& options,
                 const BackendSettings& settings)
    : state_(std::make_shared<BackendState>(std::move(plugin), options, settings)) {}

Backend::~Backend() = default;

const std::string& Backend::name() const noexcept { return state_->name(); }

uint32_t Backend::capabilities() const noexcept { return state_->api().capabilities; }

std::unique_ptr<Communicator> Backend::connect(int rank) {
  tessera_comm* comm = nullptr;
  // A process backend takes its rank from the launcher's environment (-1).
  const char* env_rank = std::getenv("RANK");
  const std::string as = rank >= 0 ? " as rank " + std::to_string(rank)
                         : env_rank != nullptr && *env_rank != '\0'
                             ? " as rank " + std::string(env_rank) + " (RANK)"
                             : " (the rank from the launcher's environment)";
  const std::string what = "backend '" + state_->name() + "': connect" + as;
  throw_if_failed(state_->api().connect(state_->backend(), rank, &comm), what);
  if (state_->checks() == CollectiveChecks::off) {
    return std::unique_ptr<Communicator>(new Communicator(state_, comm, false));
  }
  detail::CheckSettings check;
  check.verify = state_->checks() == CollectiveChecks::verify;
  check.backend = state_->name();
  tessera_comm* checked = nullptr;
  throw_if_failed(detail::wrap(state_->api(), comm, check, "world", &checked), what);
  return std::unique_ptr<Communicator>(new Communicator(state_, checked, true));
}

std::unique_ptr<Backend> open_backend(const PluginRegistry& registry, const std::string& name,
                                      const toml::table* options, const std::string& where,
                                      const BackendSettings& settings) {
  auto plugin = registry.get(TESSERA_KIND_BACKEND, name);
  const auto& d = plugin->descriptor();
  const OptionValues values = resolve_options(
      std::span<const tessera_option_decl>(d.options, d.num_options), options, where);
  return std::make_unique<Backend>(std::move(plugin), values, settings);
}

}  // namespace tessera
