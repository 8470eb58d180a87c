#include "engine.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <utility>

#include "control.hpp"
#include "op.hpp"

namespace tessera::mpi {
namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

// True for a process that exited but was not reaped yet (state Z or X).
bool is_zombie(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

Engine::Engine(const sdk::Host& host, const Settings& settings, const ProcessInfo& process)
    : host_(host),
      settings_(settings),
      process_(process),
      self_{host_name(), static_cast<int64_t>(getpid())},
      control_(std::make_unique<ControlService>(host, settings, process.rank)) {}

Engine::~Engine() = default;

void Engine::abandon(std::unique_ptr<OpState> op) {
  if (!op) return;
  const std::lock_guard lock(mu_);
  abandoned_.push_back(std::move(op));
}

uint64_t Engine::next_group_number() noexcept {
  const std::lock_guard lock(mu_);
  return ++groups_;
}

bool Engine::process_gone(const Identity& id) const noexcept {
  if (id.pid <= 0 || id.host != self_.host) return false;
  if (::kill(static_cast<pid_t>(id.pid), 0) != 0) return errno == ESRCH;
  try {
    return is_zombie(id.pid);
  } catch (...) {
    return false;
  }
}

}  // namespace tessera::mpi
