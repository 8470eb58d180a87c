// The plugin probe: libraries are loaded in a child process first, results
// are cached on disk. See plugin_probe.hpp.
#include "plugin_probe.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "plugin_descriptor.hpp"
#include "tessera/c/plugin.h"

namespace tessera::detail {
namespace {

using Clock = std::chrono::steady_clock;
using Outcome = ProbeResult::Outcome;

constexpr std::string_view kCacheHeader = "tessera plugin probe cache 1";

// ---- environment ----

// The value of environment variable `name`, or nullopt when unset. The
// environment is only read here; nothing in the host writes it.
std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::filesystem::path default_cache_file() {
  const auto xdg = env_value("XDG_CACHE_HOME");
  if (xdg && !xdg->empty() && std::filesystem::path(*xdg).is_absolute()) {
    return std::filesystem::path(*xdg) / "tessera" / "plugin-probe.txt";
  }
  const auto home = env_value("HOME");
  if (home && !home->empty() && std::filesystem::path(*home).is_absolute()) {
    return std::filesystem::path(*home) / ".cache" / "tessera" / "plugin-probe.txt";
  }
  return {};
}

// ---- the cache ----

// What a cached result is valid for: the file behind a path as it is now.
struct FileIdentity {
  std::string path;  // canonical
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

std::optional<FileIdentity> identify(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(file, ec);
  if (ec) return std::nullopt;
  struct stat st {};
  if (::stat(canonical.c_str(), &st) != 0) return std::nullopt;
  FileIdentity id;
  id.path = canonical.string();
  if (id.path.find('\n') != std::string::npos) return std::nullopt;  // not representable
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

char outcome_letter(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::loads:
      return 'L';
    case Outcome::crashed:
      return 'C';
    case Outcome::crashed_unloading:
      return 'U';
    case Outcome::exited:
      return 'E';
    case Outcome::hung:
      return 'H';
  }
  return '?';
}

std::optional<Outcome> outcome_from_letter(char letter) noexcept {
  switch (letter) {
    case 'L':
      return Outcome::loads;
    case 'C':
      return Outcome::crashed;
    case 'U':
      return Outcome::crashed_unloading;
    case 'E':
      return Outcome::exited;
    case 'H':
      return Outcome::hung;
    default:
      return std::nullopt;
  }
}

struct CacheEntry {
  FileIdentity id;
  ProbeResult result;
};
using CacheMap = std::map<std::string, CacheEntry>;  // by canonical path

// Lines "<outcome> <code> <size> <mtime ns> <path>" after a header line.
// A file that is missing, unreadable or of another format gives an empty
// map; a malformed line is skipped.
CacheMap read_cache(const std::filesystem::path& file) {
  CacheMap cache;
  if (file.empty()) return cache;
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line) || line != kCacheHeader) return cache;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    char letter = 0;
    CacheEntry entry;
    if (!(fields >> letter >> entry.result.code >> entry.id.size >> entry.id.mtime_ns) ||
        fields.get() != ' ') {
      continue;
    }
    std::getline(fields, entry.id.path);
    const auto outcome = outcome_from_letter(letter);
    if (!outcome || entry.id.path.empty()) continue;
    entry.result.outcome = *outcome;
    cache[entry.id.path] = std::move(entry);
  }
  return cache;
}

// Writes `cache` to `file` through a temporary file in the same directory
// renamed over it, so a reader never sees half a file. Returns the reason
// on failure, empty on success.
std::string write_cache(const std::filesystem::path& file, const CacheMap& cache) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) return fmt::format("cannot create {}: {}", file.parent_path().string(), ec.message());
  std::string temp = (file.parent_path() / (file.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0)
    return fmt::format("cannot create a file in {}: {}", file.parent_path().string(),
                       std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
  std::string text(kCacheHeader);
  text += '\n';
  for (const auto& [path, entry] : cache) {
    text += fmt::format("{} {} {} {} {}\n", outcome_letter(entry.result.outcome), entry.result.code,
                        entry.id.size, entry.id.mtime_ns, path);
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const bool ok = written == text.size() && ::close(fd) == 0;
  if (!ok || ::rename(temp.c_str(), file.c_str()) != 0) {
    const std::string reason = std::strerror(errno);  // NOLINT(concurrency-mt-unsafe)
    if (!ok && written != text.size()) ::close(fd);
    ::unlink(temp.c_str());
    return fmt::format("cannot write {}: {}", file.string(), reason);
  }
  return {};
}

// ---- the probe process ----

// What the child reports about file `index`: stage 1 once the library is
// loaded and its descriptor read, stage 2 once it is unloaded again (or
// could not be loaded at all, which the host will report itself).
struct ChildRecord {
  uint32_t index;
  uint32_t stage;
};
constexpr uint32_t kStageLoaded = 1;
constexpr uint32_t kStageDone = 2;

void child_report(int fd, std::size_t index, uint32_t stage) noexcept {
  const ChildRecord record{static_cast<uint32_t>(index), stage};
  // Smaller than PIPE_BUF, so written whole or not at all.
  while (::write(fd, &record, sizeof record) < 0 && errno == EINTR) {
  }
}

// The child's whole life. It runs in a copy of a process that may have had
// other threads: a lock one of them held at the fork stays locked here, so
// the child does only what it must and nothing that takes the host's locks:
// the dynamic loader (glibc resets the loader's lock in a forked child),
// the plugin's own entry point and descriptor, write() and _exit(). No
// logging, no allocation by the host, no exception leaves this function; the
// plugin's constructors may still do anything, and one that waits on such a
// lock is reported as hung (a false alarm the host cannot rule out).
[[noreturn]] void probe_child(const char* const* paths, std::size_t begin, std::size_t end,
                              int out) noexcept {
  // A crash must end the child with its signal, whatever handlers the host
  // installed, so that the parent can tell it from an exit. Set through the
  // system call itself: a sanitizer's sigaction() keeps its own SIGSEGV
  // handler, which reports and exits with status 1. An all-zero kernel
  // sigaction is SIG_DFL with no flags and an empty mask.
  sigset_t crash_signals;
  sigemptyset(&crash_signals);
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) {
    const std::array<unsigned long, 4> kernel_default{};  // NOLINT(google-runtime-int)
    ::syscall(SYS_rt_sigaction, sig, kernel_default.data(), nullptr, sizeof(uint64_t));
    sigaddset(&crash_signals, sig);
  }
  ::sigprocmask(SIG_UNBLOCK, &crash_signals, nullptr);
  // What the library or the loader prints while being probed (a constructor's
  // greeting, an assertion of ld.so) would appear twice or without the file's
  // name; the host reports the outcome itself.
  if (const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC); null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  for (std::size_t i = begin; i < end; ++i) {
    void* handle = ::dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      // The registry's own steps: the entry point, then what its checks
      // read of the descriptor.
      void* symbol = ::dlsym(handle, TESSERA_PLUGIN_ENTRY_SYMBOL);
      if (symbol != nullptr) {
        const auto entry = reinterpret_cast<tessera_plugin_entry_fn>(symbol);  // NOLINT
        if (const tessera_plugin_descriptor* descriptor = entry(); descriptor != nullptr) {
          touch_descriptor(*descriptor);
        }
      }
      child_report(out, i, kStageLoaded);
      ::dlclose(handle);
    }
    child_report(out, i, kStageDone);
  }
  ::_exit(0);
}

// Waits for `pid` to end; unless `killed` already, kills it at `deadline`
// (and sets `killed`): a child that closed its end of the pipe may still be
// running. Returns what waitpid returned.
pid_t reap_child(pid_t pid, Clock::time_point deadline, bool& killed, int& status) {
  auto pause = std::chrono::microseconds(100);
  while (true) {
    const pid_t waited = ::waitpid(pid, &status, killed ? 0 : WNOHANG);
    if (waited == pid || (waited < 0 && errno != EINTR)) return waited;
    if (waited == 0 && Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
    } else if (waited == 0) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20'000));
    }
  }
}

// Runs probe children over `paths` until every one has a result. Returns
// the number of children started; nullopt when none could be started
// (`error` says why).
std::optional<std::size_t> run_children(const std::vector<std::string>& paths,
                                        std::chrono::milliseconds timeout,
                                        std::vector<ProbeResult>& results, std::string& error) {
  std::vector<const char*> c_paths;
  c_paths.reserve(paths.size());
  for (const std::string& p : paths) c_paths.push_back(p.c_str());
  std::size_t children = 0;
  std::size_t next = 0;
  while (next < paths.size()) {
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
      error = fmt::format("pipe: {}", std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
      return children == 0 ? std::nullopt : std::optional<std::size_t>(children);
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      error = fmt::format("fork: {}", std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
      ::close(fds[0]);
      ::close(fds[1]);
      return children == 0 ? std::nullopt : std::optional<std::size_t>(children);
    }
    if (pid == 0) {
      ::close(fds[0]);
      probe_child(c_paths.data(), next, paths.size(), fds[1]);
    }
    ::close(fds[1]);
    ++children;

    // Follow the child's reports; each one restarts the clock.
    std::size_t current = next;
    uint32_t stage = 0;
    auto deadline = Clock::now() + timeout;
    bool timed_out = false;
    std::array<char, 4096> buffer{};
    std::size_t have = 0;
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd waiting{fds[0], POLLIN, 0};
      const int ready =
          ::poll(&waiting, 1, static_cast<int>(std::min<int64_t>(left.count(), 60'000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) {  // cannot wait for the child: stop it
        timed_out = true;
        break;
      }
      if (ready == 0) continue;  // the deadline is checked above
      const ssize_t got = ::read(fds[0], buffer.data() + have, buffer.size() - have);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // the child is gone
      have += static_cast<std::size_t>(got);
      std::size_t used = 0;
      for (; have - used >= sizeof(ChildRecord); used += sizeof(ChildRecord)) {
        ChildRecord record{};
        std::memcpy(&record, buffer.data() + used, sizeof record);
        if (record.index != current) continue;  // not expected; ignore
        stage = record.stage;
        if (stage == kStageDone) {
          results[current] = ProbeResult{};
          ++current;
          stage = 0;
        }
        deadline = Clock::now() + timeout;
      }
      std::memmove(buffer.data(), buffer.data() + used, have - used);
      have -= used;
    }
    ::close(fds[0]);
    int status = 0;
    if (timed_out) ::kill(pid, SIGKILL);
    const pid_t waited = reap_child(pid, deadline, timed_out, status);
    if (current < paths.size()) {
      // The child stopped while on `current`.
      ProbeResult& r = results[current];
      if (timed_out) {
        r = {Outcome::hung, 0};
      } else if (waited == pid && WIFSIGNALED(status)) {
        r = {stage >= kStageLoaded ? Outcome::crashed_unloading : Outcome::crashed,
             WTERMSIG(status)};
      } else {
        r = {Outcome::exited, waited == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1};
      }
      ++current;
    }
    next = current;
  }
  return children;
}

std::string timeout_text(std::chrono::milliseconds timeout) {
  return timeout.count() % 1000 == 0 ? fmt::format("{} s", timeout.count() / 1000)
                                     : fmt::format("{} ms", timeout.count());
}

}  // namespace

ProbeSettings ProbeSettings::from_environment(spdlog::logger& log) {
  ProbeSettings settings;
  if (const auto value = env_value("TESSERA_PLUGIN_PROBE"); value && !value->empty()) {
    if (*value == "0") {
      settings.enabled = false;
    } else if (*value != "1") {
      log.warn("TESSERA_PLUGIN_PROBE='{}' is not 0 or 1; the plugin probe stays on", *value);
    }
  }
  if (const auto value = env_value("TESSERA_PLUGIN_PROBE_TIMEOUT_MS"); value && !value->empty()) {
    char* end = nullptr;
    errno = 0;
    const long long ms = std::strtoll(value->c_str(), &end, 10);
    if (errno != 0 || end == value->c_str() || *end != '\0' || ms < 1 || ms > 600'000) {
      log.warn(
          "TESSERA_PLUGIN_PROBE_TIMEOUT_MS='{}' is not a number of milliseconds from 1 to "
          "600000; using {}",
          *value, settings.timeout.count());
    } else {
      settings.timeout = std::chrono::milliseconds(ms);
    }
  }
  settings.cache_file = default_cache_file();
  return settings;
}

std::string probe_rejection(const ProbeResult& result, const ProbeSettings& settings) {
  switch (result.outcome) {
    case Outcome::loads:
      return {};
    case Outcome::crashed:
      return fmt::format("crashed while loading (signal {})", result.code);
    case Outcome::crashed_unloading:
      return fmt::format("crashed while unloading (signal {})", result.code);
    case Outcome::exited:
      return result.code < 0
                 ? std::string("ended the process while loading (exit status unknown)")
                 : fmt::format("ended the process while loading (exit status {})", result.code);
    case Outcome::hung:
      return fmt::format("hung while loading (killed after {})", timeout_text(settings.timeout));
  }
  return {};
}

std::vector<ProbeResult> probe_libraries(const std::vector<std::filesystem::path>& files,
                                         const ProbeSettings& settings, spdlog::logger& log) {
  std::vector<ProbeResult> results(files.size());
  if (!settings.enabled || files.empty()) return results;

  CacheMap cache = read_cache(settings.cache_file);
  std::vector<std::optional<FileIdentity>> ids(files.size());
  std::vector<std::size_t> unknown;  // indexes into files
  for (std::size_t i = 0; i < files.size(); ++i) {
    ids[i] = identify(files[i]);
    const auto found = ids[i] ? cache.find(ids[i]->path) : cache.end();
    if (found != cache.end() && found->second.id == *ids[i]) {
      results[i] = found->second.result;
    } else {
      unknown.push_back(i);
    }
  }
  const std::string cache_name =
      settings.cache_file.empty() ? std::string("no cache") : settings.cache_file.string();
  if (unknown.empty()) {
    log.debug("plugin probe: {} file(s), all known from {}; no probe process started", files.size(),
              cache_name);
    return results;
  }

  std::vector<std::string> paths;
  paths.reserve(unknown.size());
  for (const std::size_t i : unknown) paths.push_back(files[i].string());
  std::vector<ProbeResult> probed(unknown.size());
  std::string error;
  const auto children = run_children(paths, settings.timeout, probed, error);
  if (!children) {
    log.warn("cannot start the plugin probe ({}); loading {} plugin file(s) without it", error,
             unknown.size());
    return results;
  }
  log.debug("plugin probe: {} file(s), {} known from {}, {} probed in {} probe process(es)",
            files.size(), files.size() - unknown.size(), cache_name, unknown.size(), *children);

  // Results of files that were probed to the end; a pipe or fork failure
  // part way leaves the rest as "loads" and out of the cache.
  bool changed = false;
  for (std::size_t k = 0; k < unknown.size(); ++k) {
    const std::size_t i = unknown[k];
    results[i] = probed[k];
    if (ids[i] && (error.empty() || probed[k].outcome != Outcome::loads)) {
      cache[ids[i]->path] = CacheEntry{*ids[i], probed[k]};
      changed = true;
    }
  }
  if (!changed || settings.cache_file.empty()) return results;
  // Keep only entries that still describe their file, so the cache does not
  // grow with every rebuilt or deleted plugin.
  for (auto it = cache.begin(); it != cache.end();) {
    const auto current = identify(it->first);
    it = current && *current == it->second.id ? std::next(it) : cache.erase(it);
  }
  if (const std::string failure = write_cache(settings.cache_file, cache); !failure.empty()) {
    log.debug("plugin probe: results not cached: {}", failure);
  }
  return results;
}

}  // namespace tessera::detail
