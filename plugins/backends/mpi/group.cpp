#include "group.hpp"

#include <utility>

#include "control.hpp"
#include "runtime.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpi {

Group::Group(std::shared_ptr<Engine> engine, MPI_Comm data, MPI_Comm ctrl, std::string name,
             int32_t rank, std::vector<Identity> members)
    : engine_(std::move(engine)),
      data_(data),
      ctrl_(ctrl),
      name_(std::move(name)),
      rank_(rank),
      size_(static_cast<int32_t>(members.size())),
      members_(std::move(members)),
      p2p_(std::make_unique<std::atomic<uint64_t>[]>(2 * members_.size())) {
  void* value = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(data_, MPI_TAG_UB, &value, &found) == MPI_SUCCESS && found != 0 &&
      value != nullptr) {
    tag_ub_ = *static_cast<int*>(value);
  }
}

Group::~Group() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  // Freeing is local; MPI keeps a communicator with pending operations
  // alive internally until they are done.
  if (ctrl_ != MPI_COMM_NULL) MPI_Comm_free(&ctrl_);
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
}

bool Group::fail(tessera_status status, const std::string& reason) {
  {
    const std::lock_guard lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return false;
    reason_ = reason;
    failed_.store(true, std::memory_order_release);
  }
  engine_->host().log(TESSERA_LOG_WARN, world_rank(), "mpi: group '", name_, "' broken (",
                      status_name(status), "): ", reason);
  return true;
}

bool Group::fail_tree(const std::string& reason) {
  const bool first = fail(TESSERA_ERR_PEER_LOST, reason);
  std::vector<std::shared_ptr<Group>> children;
  {
    const std::lock_guard lock(mu_);
    for (const auto& weak : children_) {
      if (auto child = weak.lock()) children.push_back(std::move(child));
    }
  }
  for (const auto& child : children) child->fail_tree(reason);
  return first;
}

std::string Group::failure() const {
  const std::lock_guard lock(mu_);
  return reason_;
}

void Group::throw_failure(std::string_view what) const {
  throw Error(TESSERA_ERR_PEER_LOST,
              detail::concat(what, " on ", label(), " failed: the group is broken: ", failure()));
}

void Group::add_child(const std::shared_ptr<Group>& child) {
  const std::lock_guard lock(mu_);
  std::erase_if(children_, [](const auto& weak) { return weak.expired(); });
  children_.push_back(child);
}

std::string Group::label() const {
  return detail::concat("rank ", rank_, " of group '", name_, "' (", size_, " ranks)");
}

std::shared_ptr<Group> open_group(const std::shared_ptr<Engine>& engine, MPI_Comm data,
                                  std::string name, int32_t rank, std::vector<Identity> members,
                                  Deadline deadline) {
  const std::string what = detail::concat("mpi: creating group '", name, "' on rank ", rank);
  return_errors(data, what);
  MPI_Comm ctrl = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Comm_idup(data, &ctrl, &request), detail::concat(what, ": MPI_Comm_idup"),
            TESSERA_ERR_PEER_LOST);
  if (!wait_requests(&request, 1, engine->settings(), deadline,
                     detail::concat(what, ": MPI_Comm_idup"))) {
    throw Error(TESSERA_ERR_TIMEOUT,
                detail::concat(what,
                               ": duplicating its communicator (MPI_Comm_idup) timed out "
                               "after ",
                               engine->settings().timeout_ms, " ms: not every member took part"));
  }
  return_errors(ctrl, what);
  auto group =
      std::make_shared<Group>(engine, data, ctrl, std::move(name), rank, std::move(members));
  engine->control().attach(group);
  return group;
}

}  // namespace tessera::mpi
