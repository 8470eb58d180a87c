#include "launch_supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace tessera::cli {
namespace {

constexpr std::chrono::milliseconds kMaxPollWait{250};
// Wait status recorded when waitpid fails: a normal exit with status 255,
// so that the rank counts as failed.
constexpr int kStatusUnknown = 255 << 8;

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped by a signal,
// 't' stopped by a tracer, ...), or 0 when it cannot be read.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t end = stat.rfind(')');  // the command name may hold anything
  return end != std::string::npos && end + 2 < stat.size() ? stat[end + 2] : '\0';
}

}  // namespace

std::string duration_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g} s", static_cast<double>(duration.count()) / 1000.0);
}

RankSupervisor::~RankSupervisor() {
  for (Rank& r : ranks_) {
    if (r.running) {
      signal_group(r.pid, SIGKILL);
      int status = 0;
      while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.running = false;
    }
    close_stream(r.out);
    close_stream(r.err);
  }
}

void RankSupervisor::add(int rank, const SpawnedRank& spawned, bool prefix) {
  Rank& r = ranks_.emplace_back();
  r.rank = rank;
  r.pid = spawned.pid;
  r.out.fd = spawned.stdout_fd;
  r.out.sink = STDOUT_FILENO;
  r.err.fd = spawned.stderr_fd;
  r.err.sink = STDERR_FILENO;
  const std::string tag = prefix ? fmt::format("[rank {}] ", rank) : std::string();
  r.out.lines.emplace(tag, STDOUT_FILENO);
  r.err.lines.emplace(tag, STDERR_FILENO);
}

void RankSupervisor::close_stream(Stream& stream) noexcept {
  if (stream.fd < 0) return;
  if (stream.lines) stream.lines->finish();
  ::close(stream.fd);
  stream.fd = -1;
}

void RankSupervisor::read_stream(Stream& stream, bool drain) {
  std::array<char, 65536> buffer{};
  while (stream.fd >= 0) {
    const ssize_t n = ::read(stream.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_stream(stream);
      return;
    }
    if (stream.lines) {
      stream.lines->feed(buffer.data(), static_cast<std::size_t>(n));
    } else {
      (void)write_all(stream.sink, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
    }
    if (!drain) return;
  }
}

bool RankSupervisor::reap(const SuperviseOptions& options) {
  bool failed = false;
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    int status = 0;
    pid_t got = 0;
    do {
      got = ::waitpid(r.pid, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got == 0) continue;
    const int wait_error = errno;
    r.running = false;
    r.wait_status = got == r.pid ? status : kStatusUnknown;
    // What the rank wrote before it ended is in the pipe already; anything a
    // leftover child of it writes later is not waited for.
    read_stream(r.out, true);
    read_stream(r.err, true);
    close_stream(r.out);
    close_stream(r.err);
    const std::string what =
        got == r.pid ? describe_exit(status)
                     : fmt::format("cannot be waited for: {}", std::strerror(wait_error));
    if (exited_cleanly(r.wait_status)) continue;
    failed = true;
    const std::string line = fmt::format("rank {} (pid {}) {}", r.rank, r.pid, what);
    const int allowed = options.tolerate_failures;
    const bool counted =
        !first_failed_ && interrupted_ == 0 && !stopped_for_ && !r.stopped_by_launcher;
    if (tolerate(r, options)) {
      message(options, fmt::format("{}; {} (--tolerate-failures {}: {} of {} used)", line,
                                   any_running() ? "the other ranks go on" : "tolerated", allowed,
                                   tolerated_, allowed));
      continue;
    }
    message(options, counted && allowed > 0 && tolerated_ >= allowed
                         ? fmt::format("{}; --tolerate-failures {} is used up, so the job stops",
                                       line, allowed)
                         : line);
    if (!first_failed_) {
      first_failed_ = r.rank;
      if (options.on_failure && !r.stopped_by_launcher) {
        options.on_failure(
            fmt::format("rank {} (pid {}) {}", r.rank, r.pid, describe_exit(r.wait_status)));
      }
    }
  }
  return failed;
}

bool RankSupervisor::tolerate(const Rank& failed, const SuperviseOptions& options) {
  if (tolerated_ >= options.tolerate_failures || first_failed_ || interrupted_ != 0 ||
      stopped_for_ || failed.stopped_by_launcher) {
    return false;
  }
  // With every other rank failed too, nothing is left to go on.
  const bool others_left = std::any_of(ranks_.begin(), ranks_.end(), [&failed](const Rank& r) {
    return &r != &failed && (r.running || exited_cleanly(r.wait_status));
  });
  if (!others_left) return false;
  ++tolerated_;
  return true;
}

std::vector<int> RankSupervisor::signal_running(int signal, bool from_launcher) {
  std::vector<int> signalled;
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    signal_group(r.pid, signal);
    if (from_launcher) r.stopped_by_launcher = true;
    signalled.push_back(r.rank);
  }
  return signalled;
}

void RankSupervisor::kill_stopped_orphans(const SuperviseOptions& options) {
  std::vector<int> stopped;
  bool all_stopped = true;
  bool any_ended = false;
  for (const Rank& r : ranks_) {
    if (!r.running) {
      any_ended = true;
    } else if (process_state(r.pid) == 'T') {
      stopped.push_back(r.rank);
    } else {
      all_stopped = false;
    }
  }
  if (!any_ended || stopped.empty() || !all_stopped) {
    orphans_stopped_since_.reset();
    return;
  }
  const auto now = Clock::now();
  if (!orphans_stopped_since_) orphans_stopped_since_ = now;
  if (now - *orphans_stopped_since_ < options.grace) return;
  orphans_stopped_since_.reset();
  message(options, fmt::format("{} stopped by a signal for {} while every other rank has ended "
                               "(--grace): it cannot end on its own; sending SIGKILL",
                               rank_list(stopped), duration_text(options.grace)));
  for (const Rank& r : ranks_) {
    if (r.running) signal_group(r.pid, SIGKILL);
  }
}

void RankSupervisor::message(const SuperviseOptions& options, const std::string& text) const {
  (void)write_all(options.message_fd, "tessera launch: " + text + "\n");
}

bool RankSupervisor::any_running() const noexcept {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
}

std::string RankSupervisor::summary(const std::string& within) const {
  std::vector<std::string> parts;
  std::size_t failed = 0;
  for (const Rank& r : ranks_) {
    const bool ok = exited_cleanly(r.wait_status);
    if (!ok) ++failed;
    parts.push_back(fmt::format("rank {} {}{}", r.rank, short_exit(r.wait_status),
                                !ok && r.stopped_by_launcher ? " (stopped by the launcher)" : ""));
  }
  return fmt::format("{} of {} ranks failed{}: {}", failed, ranks_.size(), within,
                     fmt::join(parts, ", "));
}

int RankSupervisor::supervise(SignalPipe& signals, const SuperviseOptions& options) {
  std::optional<Clock::time_point> term_at;
  std::optional<Clock::time_point> kill_at;
  bool term_sent = false;
  bool kill_sent = false;
  auto next_stop_check = Clock::now();
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;

  while (any_running()) {
    fds.clear();
    streams.clear();
    fds.push_back({signals.fd(), POLLIN, 0});
    streams.push_back(nullptr);
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    auto wait = kMaxPollWait;
    const std::optional<Clock::time_point>& deadline = term_sent ? kill_at : term_at;
    if (deadline && !kill_sent) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
      wait = std::clamp(left, std::chrono::milliseconds(0), wait);
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
      message(options, fmt::format("poll failed ({}); killing every rank", std::strerror(errno)));
      break;
    }

    for (const int sig : signals.take()) {
      if (sig != SIGINT && sig != SIGTERM) continue;
      if (interrupted_ != 0) {
        // Again: stop the ranks now rather than after the grace.
        if (!term_sent) {
          term_at = Clock::now();
        } else if (!kill_sent) {
          kill_at = Clock::now();
        }
        message(options,
                fmt::format("received {} again; stopping the ranks now", signal_name(sig)));
        continue;
      }
      interrupted_ = sig;
      const auto got = signal_running(sig, false);
      // Ranks that do not end on it are stopped as after a failure.
      if (!term_at) term_at = Clock::now() + options.grace;
      if (!got.empty()) {
        message(options, fmt::format("received {}; forwarding it to {} (SIGTERM to those still "
                                     "running {} later, --grace; {} again sends it now)",
                                     signal_name(sig), rank_list(got), duration_text(options.grace),
                                     signal_name(sig)));
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*streams[i], false);
    }
    (void)reap(options);
    if (first_failed_ && !term_at) term_at = Clock::now() + options.grace;
    if (!term_at && interrupted_ == 0) kill_stopped_orphans(options);
    if (!stopped_for_ && !term_sent && options.stop_requested && any_running() &&
        Clock::now() >= next_stop_check) {
      next_stop_check = Clock::now() + kMaxPollWait;
      stopped_for_ = options.stop_requested();
      if (stopped_for_) term_at = Clock::now();
    }

    const auto after = Clock::now();
    if (term_at && !term_sent && after >= *term_at) {
      term_sent = true;
      kill_at = after + options.kill_after;
      const auto got = signal_running(SIGTERM, true);
      if (!got.empty() && stopped_for_ && !first_failed_) {
        message(options, fmt::format("{}; sending SIGTERM to {}", *stopped_for_, rank_list(got)));
      } else if (!got.empty() && interrupted_ != 0 && !first_failed_) {
        message(options, fmt::format("{} still running after {}; sending SIGTERM", rank_list(got),
                                     signal_name(interrupted_)));
      } else if (!got.empty()) {
        message(options, fmt::format("{} still running {} after rank {} failed (--grace); "
                                     "sending SIGTERM",
                                     rank_list(got), duration_text(options.grace), *first_failed_));
      }
    } else if (kill_at && !kill_sent && after >= *kill_at) {
      kill_sent = true;
      const auto got = signal_running(SIGKILL, true);
      if (!got.empty()) {
        message(options, fmt::format("{} still running {} after SIGTERM; sending SIGKILL",
                                     rank_list(got), duration_text(options.kill_after)));
      }
    }
  }
  if (any_running()) return 1;  // poll failed: the destructor kills and reaps the rest
  if (first_failed_) {
    message(options, summary());
    return 1;
  }
  if (interrupted_ != 0) {
    // Every rank exited 0, but the job ended because it was told to.
    message(options, fmt::format("interrupted by {}; every rank exited with status 0",
                                 signal_name(interrupted_)));
    return 1;
  }
  if (tolerated_ > 0) {
    message(options, summary(fmt::format(", tolerated (--tolerate-failures {})",
                                         options.tolerate_failures)));
  }
  return 0;
}

}  // namespace tessera::cli
