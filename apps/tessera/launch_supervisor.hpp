// Watching the ranks of `tessera launch` until they have all ended: copying
// their output, forwarding signals, and shutting the job down when one rank
// fails (or, with --tolerate-failures N, when more than N have failed).
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
  // --tolerate-failures: how many rank failures the other ranks go on after.
  // A failure counts when the rank ends non-zero or by a signal on its own
  // (not stopped by the launcher, not after the launcher was interrupted);
  // the first `tolerate_failures` of them are reported and the others keep
  // running, as long as another rank is still running or exited with 0. The
  // next one stops the job like the first failure does with 0.
  int tolerate_failures = 0;
  // After SIGTERM, how long before SIGKILL.
  std::chrono::milliseconds kill_after{5000};
  // Where the launcher's own messages go.
  int message_fd = 2;
  // Elastic launches (may be empty): asked about every 250 ms while ranks
  // run whether something outside this launcher ended the round (a rank of
  // another node failed); a reason returned is reported and the running
  // ranks get SIGTERM at once (SIGKILL `kill_after` later).
  std::function<std::optional<std::string>()> stop_requested;
  // Elastic launches (may be empty): told once, as soon as a failure of one
  // of this launcher's ranks stops the job (the first one not tolerated),
  // what happened ("rank 2 (pid 7) exited with status 1"), so the other
  // nodes can stop theirs without waiting.
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
  //    rank's process group; `grace` later the ranks still running get
  //    SIGTERM and `kill_after` later SIGKILL, as after a failure; the
  //    signal received again moves the next of those to now;
  //  - a rank that exits non-zero or by a signal is reported at once
  //    ("rank R (pid P) exited with status 3"); the first
  //    `tolerate_failures` such failures are only reported (see
  //    SuperviseOptions); `grace` after the first failure not tolerated the
  //    ranks still running get SIGTERM, and `kill_after` later SIGKILL;
  //  - at the end, if any rank failed, one summary line of every rank's
  //    outcome is written.
  // Returns 0 when every rank exited with status 0, or when the only
  // failures were tolerated ones and at least one rank exited with 0, and
  // the launcher was not interrupted; else 1.
  int supervise(SignalPipe& signals, const SuperviseOptions& options);

  // After supervise(): whether the launcher received SIGINT or SIGTERM
  // (forwarded to the ranks), and the reason stop_requested gave, if any.
  [[nodiscard]] bool interrupted() const noexcept { return interrupted_ != 0; }
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
  // Whether the failure of `failed` is one of the first tolerate_failures
  // (counting it if so): not stopped by the launcher or after an interrupt,
  // nothing stopping the job yet, and another rank still running or done
  // with status 0.
  bool tolerate(const Rank& failed, const SuperviseOptions& options);
  // Sends `signal` to every running rank's group; returns their ranks.
  std::vector<int> signal_running(int signal, bool from_launcher);
  // A rank stopped by a signal (SIGSTOP, SIGTSTP; not a debugger's stop)
  // cannot end on its own. When every rank still running is stopped and
  // some rank has ended, and that lasts --grace, kills them: each is then a
  // failure like any other (tolerated under --tolerate-failures).
  void kill_stopped_orphans(const SuperviseOptions& options);
  void message(const SuperviseOptions& options, const std::string& text) const;
  // "2 of 3 ranks failed: rank 0 exit 0, rank 1 SIGKILL, ..."; `within`
  // is put after "failed" (", tolerated (--tolerate-failures 1)").
  [[nodiscard]] std::string summary(const std::string& within = {}) const;
  [[nodiscard]] bool any_running() const noexcept;

  std::vector<Rank> ranks_;
  std::optional<int> first_failed_;  // the failure that stops the job (not a tolerated one)
  int tolerated_ = 0;                // failures tolerated so far
  int interrupted_ = 0;              // the first SIGINT or SIGTERM received; 0: none
  std::optional<std::string> stopped_for_;
  // Since when the ranks still running have all been stopped by a signal
  // while another has ended (kill_stopped_orphans).
  std::optional<Clock::time_point> orphans_stopped_since_;
};

}  // namespace tessera::cli
