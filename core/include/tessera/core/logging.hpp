// Host logging: one spdlog logger per component ("core", "backend.inmemory",
// "cli"), every line carrying the rank of the thread that wrote it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace tessera {

// Sets up the shared sinks (stderr, colour when a terminal) and the pattern
// "[time] [level] [logger] [rank N] message". `level` is a spdlog level name
// (trace, debug, info, warn, error, critical, off); when empty, the
// TESSERA_LOG_LEVEL environment variable decides, else "info". Throws
// tessera::Error on an unknown level name. Safe to call more than once.
void init_logging(std::string_view level = {});

// Parses a level name; std::nullopt if unknown.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name);

// The logger named `name`, created on first use with the shared sinks.
std::shared_ptr<spdlog::logger> get_logger(const std::string& name);

// Rank of the calling thread as shown in log lines; -1: none ("-").
void set_thread_rank(int rank) noexcept;
int thread_rank() noexcept;

// Sets the calling thread's rank for the lifetime of the guard.
class ThreadRankGuard {
 public:
  explicit ThreadRankGuard(int rank) noexcept : previous_(thread_rank()) { set_thread_rank(rank); }
  ThreadRankGuard(const ThreadRankGuard&) = delete;
  ThreadRankGuard& operator=(const ThreadRankGuard&) = delete;
  ~ThreadRankGuard() { set_thread_rank(previous_); }

 private:
  int previous_;
};

}  // namespace tessera
