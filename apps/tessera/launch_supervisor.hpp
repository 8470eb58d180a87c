// Watching the ranks of `tessera launch` until they have all ended: copying
// their output, forwarding signals, and shutting the job down when one rank
// fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launch_output.hpp"
#include "launch_process.hpp"
#include "launch_signals.hpp"

namespace tessera::cli {

// "2.5 s", for messages.
std::string duration_text(std::chrono::milliseconds duration);

struct SuperviseOptions {
  // After the first rank fails, how long the others may keep running (they
  // usually fail on their own with the useful error) before SIGTERM.
  std::chrono::milliseconds grace{30000};
  // After SIGTERM, how long before SIGKILL.
  std::chrono::milliseconds kill_after{5000};
  // Where the launcher's own messages go.
  int message_fd = 2;
  // Elastic launches (may be empty): asked about every 250 ms while ranks
  // run whether something outside this launcher ended the round (a rank of
  // another node failed); a reason returned is reported and the running
  // ranks get SIGTERM at once (SIGKILL `kill_after` later).
  std::function<std::optional<std::string>()> stop_requested;
  // Elastic launches (may be empty): told once, as soon as the first of
  // this launcher's ranks fails, what happened ("rank 2 (pid 7) exited with
  // status 1"), so the other nodes can stop theirs without waiting.
  std::function<void(const std::string&)> on_failure;
};

// Owns the started ranks. Add each one as soon as it is spawned; if anything
// throws before supervise() has seen every rank end, the destructor kills
// (SIGKILL to each rank's process group) and reaps whatever still runs and
// closes every descriptor, so nothing outlives the launcher.
class RankSupervisor {
 public:
  RankSupervisor() = default;
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;
  ~RankSupervisor();

  // Takes ownership of a started rank. Captured output (spawned.stdout_fd /
  // stderr_fd >= 0) is copied line by line to descriptors 1 and 2 with the
  // prefix "[rank R] " (or none when `prefix` is false).
  void add(int rank, const SpawnedRank& spawned, bool prefix);

  // Runs until every rank has ended:
  //  - output lines are copied as they complete; a rank's partial last line
  //    is written when it ends;
  //  - SIGINT and SIGTERM received by the launcher are sent to every running
  //    rank's process group;
  //  - a rank that exits non-zero or by a signal is reported at once
  //    ("rank R (pid P) exited with status 3"); `grace` after the first such
  //    failure the ranks still running get SIGTERM, and `kill_after` later
  //    SIGKILL;
  //  - at the end, if any rank failed, one summary line of every rank's
  //    outcome is written.
  // Returns 0 when every rank exited with status 0, else 1.
  int supervise(SignalPipe& signals, const SuperviseOptions& options);

  // After supervise(): whether the launcher received SIGINT or SIGTERM
  // (forwarded to the ranks), and the reason stop_requested gave, if any.
  [[nodiscard]] bool interrupted() const noexcept { return interrupted_; }
  [[nodiscard]] const std::optional<std::string>& stopped_for() const noexcept {
    return stopped_for_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct Stream {
    int fd = -1;
    std::optional<LinePrefixer> lines;  // empty: pass the bytes through unchanged
    int sink = -1;
  };
  struct Rank {
    int rank = 0;
    pid_t pid = -1;
    bool running = true;
    int wait_status = 0;
    bool stopped_by_launcher = false;  // got the launcher's SIGTERM/SIGKILL
    Stream out;
    Stream err;
  };

  // Reads what one stream holds now (once, or until it is empty when
  // `drain`); closes it at end of file or error.
  void read_stream(Stream& stream, bool drain);
  static void close_stream(Stream& stream) noexcept;
  // Reaps every rank that has ended, reporting failures; returns true if
  // one of them failed.
  bool reap(const SuperviseOptions& options);
  // Sends `signal` to every running rank's group; returns their ranks.
  std::vector<int> signal_running(int signal, bool from_launcher);
  void message(const SuperviseOptions& options, const std::string& text) const;
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] bool any_running() const noexcept;

  std::vector<Rank> ranks_;
  std::optional<int> first_failed_;
  bool interrupted_ = false;
  std::optional<std::string> stopped_for_;
};

}  // namespace tessera::cli
