// What every group and communicator of one mpi backend instance shares.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime.hpp"
#include "settings.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::mpi {

class ControlService;
struct OpState;

// Which process a rank is: its host name and process id, exchanged when the
// world is formed so a rank that stopped answering can be checked for.
struct Identity {
  std::string host;
  int64_t pid = 0;
};

// The process-wide engine: host services, settings, this process's place in
// MPI, the control service, and the operations given up on.
class Engine {
 public:
  Engine(const sdk::Host& host, const Settings& settings, const ProcessInfo& process);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] const sdk::Host& host() const noexcept { return host_; }
  [[nodiscard]] const Settings& settings() const noexcept { return settings_; }
  [[nodiscard]] const ProcessInfo& process() const noexcept { return process_; }
  [[nodiscard]] const Identity& self() const noexcept { return self_; }
  [[nodiscard]] ControlService& control() noexcept { return *control_; }

  // Keeps an operation that failed or timed out with MPI requests still
  // pending: MPI cannot cancel collectives, so the requests and any staging
  // memory they use stay alive until the engine (after MPI_Finalize) goes.
  void abandon(std::unique_ptr<OpState> op);

  // Number for the next group created by this engine (names in logs).
  uint64_t next_group_number() noexcept;

  // True when `id` names a process on this host that no longer exists.
  [[nodiscard]] bool process_gone(const Identity& id) const noexcept;

 private:
  sdk::Host host_;
  Settings settings_;
  ProcessInfo process_;
  Identity self_;
  std::unique_ptr<ControlService> control_;
  std::mutex mu_;
  std::vector<std::unique_ptr<OpState>> abandoned_;
  uint64_t groups_ = 0;
};

}  // namespace tessera::mpi
