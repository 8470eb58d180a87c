#include "tessera/core/logging.hpp"

#include <array>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

thread_local int t_rank = -1;

// Accepted level names, in severity order; "warning" is an alias of "warn".
struct LevelName {
  std::string_view name;
  spdlog::level::level_enum level;
};
constexpr std::array<LevelName, 8> kLevelNames{{{"trace", spdlog::level::trace},
                                                {"debug", spdlog::level::debug},
                                                {"info", spdlog::level::info},
                                                {"warn", spdlog::level::warn},
                                                {"warning", spdlog::level::warn},
                                                {"error", spdlog::level::err},
                                                {"critical", spdlog::level::critical},
                                                {"off", spdlog::level::off}}};

constexpr const char* kValidLevels = "trace, debug, info, warn, error, critical, off";
constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [%n] [rank %*] %v";

// The "%*" flag: the rank of the thread that formats the line ("-" if none).
// Sinks format synchronously in the logging thread, so this is the rank of
// the thread that wrote the line.
class RankFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& /*msg*/, const std::tm& /*time*/,
              spdlog::memory_buf_t& dest) override {
    if (t_rank < 0) {
      dest.push_back('-');
    } else {
      fmt::format_to(std::back_inserter(dest), "{}", t_rank);
    }
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RankFlag>();
  }
};

// The one sink every logger writes to, the loggers by name, and the level
// they share. Never destroyed, so plugins and static objects can still log
// while the process exits.
struct LoggingState {
  std::mutex mutex;
  std::shared_ptr<spdlog::sinks::sink> sink;
  std::unordered_map<std::string, std::shared_ptr<spdlog::logger>> loggers;
  spdlog::level::level_enum level = spdlog::level::info;
};

std::optional<spdlog::level::level_enum> env_level() {
  const char* value = std::getenv("TESSERA_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse_log_level(value);
}

LoggingState& state() {
  static LoggingState* const instance = [] {
    auto* s = new LoggingState();
    // Colour only when stderr is a colour-capable terminal.
    auto sink =
        std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic);
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<RankFlag>('*').set_pattern(kPattern);
    sink->set_formatter(std::move(formatter));
    s->sink = std::move(sink);
    s->level = env_level().value_or(spdlog::level::info);
    return s;
  }();
  return *instance;
}

}  // namespace

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  for (const auto& entry : kLevelNames) {
    if (entry.name == name) return entry.level;
  }
  return std::nullopt;
}

void init_logging(std::string_view level) {
  spdlog::level::level_enum chosen = spdlog::level::info;
  if (!level.empty()) {
    const auto parsed = parse_log_level(level);
    if (!parsed) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  "unknown log level '" + std::string(level) + "'; valid levels: " + kValidLevels);
    }
    chosen = *parsed;
  } else if (const char* env = std::getenv("TESSERA_LOG_LEVEL"); env != nullptr && *env != '\0') {
    const auto parsed = parse_log_level(env);
    if (!parsed) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  "unknown log level '" + std::string(env) +
                      "' in TESSERA_LOG_LEVEL; valid levels: " + kValidLevels);
    }
    chosen = *parsed;
  }
  LoggingState& s = state();
  const std::lock_guard lock(s.mutex);
  s.level = chosen;
  for (auto& [name, logger] : s.loggers) logger->set_level(chosen);
}

std::shared_ptr<spdlog::logger> get_logger(const std::string& name) {
  LoggingState& s = state();
  const std::lock_guard lock(s.mutex);
  auto it = s.loggers.find(name);
  if (it != s.loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(name, s.sink);
  logger->set_level(s.level);
  s.loggers.emplace(name, logger);
  return logger;
}

void set_thread_rank(int rank) noexcept { t_rank = rank < 0 ? -1 : rank; }

int thread_rank() noexcept { return t_rank; }

}  // namespace tessera
