// Loading a library runs its code (relocation, constructors) and trusts its
// headers, so a corrupt or hostile file that passed the static ELF checks can
// still crash or hang the host inside dlopen. The probe loads such files
// first in a short-lived child process and reports how that ended; results
// are cached per file (canonical path, size, modification time), so a start
// with nothing new forks nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <spdlog/logger.h>

namespace tessera::detail {

// How loading one library in a probe process ended.
struct ProbeResult {
  enum class Outcome {
    loads,              // loaded, entry point called, descriptor read, unloaded
    crashed,            // killed by a signal while loading or reading the descriptor
    crashed_unloading,  // killed by a signal while unloading
    exited,             // ended the process (exit() or a loader assertion)
    hung,               // no progress within the timeout; killed
  };
  Outcome outcome = Outcome::loads;
  int code = 0;  // the signal (crashed*), or the exit status (exited; -1 if unknown)
};

// What controls the probe, from the environment:
//   TESSERA_PLUGIN_PROBE=0                     no probe (files are loaded directly)
//   TESSERA_PLUGIN_PROBE_TIMEOUT_MS=<ms>       how long one file may take (default 5000)
//   XDG_CACHE_HOME, else HOME/.cache           where tessera/plugin-probe.txt is kept
struct ProbeSettings {
  bool enabled = true;
  std::chrono::milliseconds timeout{5000};
  std::filesystem::path cache_file;  // empty: no cache

  // Reads the variables above; an invalid value is reported on `log` as a
  // warning and its default used.
  static ProbeSettings from_environment(spdlog::logger& log);
};

// The rejection reason for `result` ("crashed while loading (signal 11)",
// "hung while loading (killed after 5 s)", ...); empty when it loads.
std::string probe_rejection(const ProbeResult& result, const ProbeSettings& settings);

// Probes `files` (paths of libraries that passed the static checks):
// results from the cache where it has them, the others loaded in one child
// process in order (a new child for the files after one that crashed or
// hung). result[i] is for files[i]. With the probe disabled, or when no
// child can be started, every file "loads" (the caller loads it itself).
// Never throws for a file, the cache or a child process.
std::vector<ProbeResult> probe_libraries(const std::vector<std::filesystem::path>& files,
                                         const ProbeSettings& settings, spdlog::logger& log);

}  // namespace tessera::detail
