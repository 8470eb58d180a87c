#include "work.hpp"

#include <utility>

#include "group.hpp"
#include "progress.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpi {

MpiWork::MpiWork(std::shared_ptr<Group> group, std::unique_ptr<OpState> op)
    : group_(std::move(group)), op_(std::move(op)) {}

MpiWork::~MpiWork() {
  if (op_ && op_->pending()) group_->engine().abandon(std::move(op_));
}

void MpiWork::remember(const Error& e) {
  done_ = true;
  status_ = e.status();
  error_ = e.what();
}

void MpiWork::rethrow() const { throw Error(status_, error_); }

void MpiWork::wait(int64_t timeout_ms) {
  if (done_) {
    if (status_ != TESSERA_OK) rethrow();
    return;
  }
  const Clock::time_point now = Clock::now();
  const Deadline user = timeout_ms >= 0 ? deadline_after(now, timeout_ms) : Deadline::max();
  try {
    if (drive(group_, op_, now, user) == WaitEnd::kDone) {
      done_ = true;
      return;
    }
  } catch (const Error& e) {
    remember(e);
    throw;
  }
  throw Error(TESSERA_ERR_TIMEOUT,
              detail::concat("non-blocking ", op_label(*op_), " on ", group_->label(),
                             " still running after ", timeout_ms, " ms"));
}

bool MpiWork::test() {
  if (done_) {
    if (status_ != TESSERA_OK) rethrow();
    return true;
  }
  try {
    done_ = poll_once(group_, op_);
  } catch (const Error& e) {
    remember(e);
    throw;
  }
  return done_;
}

}  // namespace tessera::mpi
