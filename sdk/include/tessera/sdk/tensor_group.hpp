// The tensor-parallel group a strategy hands to a model's units
// (tessera_tp_group, tessera/c/model.h), with their traffic counted: the
// units call the communicator themselves from inside forward and backward,
// so the group's backend table is a copy of the real one whose `post`
// forwards the call and adds the bytes it sends (by CommView::bytes_sent's
// count) and, for a blocking call, the time it blocked.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "tessera/c/model.h"
#include "tessera/sdk/comm_view.hpp"

namespace tessera::sdk {

class TensorGroup {
 public:
  TensorGroup() = default;
  // Over `comm` (borrowed; it must outlive the group), with TESSERA_TP_*
  // `flags`. A group of one rank hands the units no group at all (get()
  // is null: whole parameters, no communication).
  TensorGroup(CommView& comm, uint32_t flags) : comm_(&comm) {
    const tessera_backend_api* real = comm.api();
    std::memcpy(&api_, real, std::min<size_t>(real->struct_size, sizeof api_));
    api_.post = &counting_post;
    group_.struct_size = sizeof group_;
    group_.rank = comm.rank();
    group_.size = comm.size();
    group_.flags = flags;
    group_.backend = &api_;
    group_.comm = comm.raw();
    const std::lock_guard<std::mutex> lock(registry_mutex());
    registry()[comm.raw()] = this;
  }
  TensorGroup(const TensorGroup&) = delete;
  TensorGroup& operator=(const TensorGroup&) = delete;
  ~TensorGroup() {
    if (comm_ == nullptr) return;
    const std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(comm_->raw());
  }

  // What the units' calls take: null for a group of one rank.
  [[nodiscard]] const tessera_tp_group* get() const noexcept {
    return comm_ != nullptr && group_.size > 1 ? &group_ : nullptr;
  }
  // Bytes the units' collectives sent, and time they blocked, so far.
  [[nodiscard]] int64_t bytes_sent() const noexcept { return bytes_sent_; }
  [[nodiscard]] int64_t wait_ns() const noexcept { return wait_ns_; }

 private:
  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<const tessera_comm*, TensorGroup*>& registry() {
    static std::map<const tessera_comm*, TensorGroup*> m;
    return m;
  }
  static tessera_status counting_post(tessera_comm* comm, const tessera_coll_args* args,
                                      tessera_work** work) {
    TensorGroup* g = nullptr;
    {
      const std::lock_guard<std::mutex> lock(registry_mutex());
      const auto it = registry().find(comm);
      if (it != registry().end()) g = it->second;
    }
    if (g == nullptr) return TESSERA_ERR_INTERNAL;  // only registered groups get this table
    const auto t0 = std::chrono::steady_clock::now();
    const tessera_status s = g->comm_->api()->post(comm, args, work);
    if (args != nullptr) g->bytes_sent_ += g->comm_->bytes_sent(*args);
    if (work == nullptr) {
      g->wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    }
    return s;
  }

  CommView* comm_ = nullptr;
  tessera_backend_api api_{};
  tessera_tp_group group_{};
  int64_t bytes_sent_ = 0;
  int64_t wait_ns_ = 0;
};

}  // namespace tessera::sdk
