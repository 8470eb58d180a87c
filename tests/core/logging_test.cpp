// Logging: the line format (logger name and rank), level selection from the
// argument or TESSERA_LOG_LEVEL, and thread-safe logger creation.
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

// Restores the default level (and a clean TESSERA_LOG_LEVEL) after each test.
class Logging : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("TESSERA_LOG_LEVEL"); }
  void TearDown() override {
    ::unsetenv("TESSERA_LOG_LEVEL");
    init_logging("info");
  }
};

// What `body` writes to stderr.
template <typename Body>
std::string captured(Body&& body) {
  ::testing::internal::CaptureStderr();
  body();
  return ::testing::internal::GetCapturedStderr();
}

// True when `line` starts with "[YYYY-MM-DD HH:MM:SS.mmm] ".
bool starts_with_timestamp(const std::string& line) {
  const std::string shape = "[dddd-dd-dd dd:dd:dd.ddd] ";
  if (line.size() < shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool digit = line[i] >= '0' && line[i] <= '9';
    if (shape[i] == 'd' ? !digit : line[i] != shape[i]) return false;
  }
  return true;
}

TEST_F(Logging, LineShowsTimeLevelLoggerRankAndMessage) {
  init_logging("info");
  const std::string out = captured([] {
    const ThreadRankGuard rank(2);
    get_logger("backend.test")->info("hello {}", 42);
  });
  ASSERT_TRUE(starts_with_timestamp(out)) << out;
  // Colour codes (when stderr is a terminal) may surround the level name.
  const size_t level = out.find("info", 26);
  ASSERT_NE(level, std::string::npos) << out;
  EXPECT_EQ(out[26], '[') << out;
  const std::string rest = "] [backend.test] [rank 2] hello 42\n";
  const size_t at = out.find(rest, level);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.size(), at + rest.size()) << out;  // exactly one line
}

TEST_F(Logging, LinesOutsideARankShowADash) {
  init_logging("info");
  ASSERT_EQ(thread_rank(), -1);
  const std::string out = captured([] { get_logger("core.test")->warn("no rank here"); });
  EXPECT_NE(out.find("[core.test] [rank -] no rank here"), std::string::npos) << out;
}

TEST_F(Logging, EachThreadShowsItsOwnRank) {
  init_logging("info");
  const std::string out = captured([] {
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([r] {
        const ThreadRankGuard guard(r);
        get_logger("strategy.test")->info("from thread {}", r);
      });
    }
    for (auto& t : threads) t.join();
  });
  for (int r = 0; r < 3; ++r) {
    const std::string expected =
        "[strategy.test] [rank " + std::to_string(r) + "] from thread " + std::to_string(r);
    EXPECT_NE(out.find(expected), std::string::npos) << out;
  }
}

TEST_F(Logging, ThreadRankGuardRestoresThePreviousRank) {
  set_thread_rank(5);
  {
    const ThreadRankGuard guard(1);
    EXPECT_EQ(thread_rank(), 1);
  }
  EXPECT_EQ(thread_rank(), 5);
  set_thread_rank(-7);
  EXPECT_EQ(thread_rank(), -1);
}

TEST_F(Logging, LevelFiltersLinesOfEveryLogger) {
  const auto logger = get_logger("core.level");
  init_logging("warn");
  EXPECT_EQ(logger->level(), spdlog::level::warn);
  std::string out = captured([&] {
    logger->info("hidden line");
    logger->warn("shown line");
  });
  EXPECT_EQ(out.find("hidden line"), std::string::npos) << out;
  EXPECT_NE(out.find("shown line"), std::string::npos) << out;
  init_logging("debug");
  EXPECT_EQ(logger->level(), spdlog::level::debug);
  EXPECT_EQ(get_logger("core.level.new")->level(), spdlog::level::debug);  // new loggers too
}

TEST_F(Logging, EnvironmentVariableDecidesWhenNoLevelIsGiven) {
  ::setenv("TESSERA_LOG_LEVEL", "error", 1);
  init_logging();
  EXPECT_EQ(get_logger("core.env")->level(), spdlog::level::err);
  ::unsetenv("TESSERA_LOG_LEVEL");
  init_logging();
  EXPECT_EQ(get_logger("core.env")->level(), spdlog::level::info);
  ::setenv("TESSERA_LOG_LEVEL", "trace", 1);
  init_logging("critical");  // the argument wins over the environment
  EXPECT_EQ(get_logger("core.env")->level(), spdlog::level::critical);
}

TEST_F(Logging, UnknownLevelNamesListTheValidOnes) {
  try {
    init_logging("loud");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown log level 'loud'; valid levels: trace, debug, info, warn, error, "
              "critical, off");
  }
  ::setenv("TESSERA_LOG_LEVEL", "chatty", 1);
  try {
    init_logging();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'chatty' in TESSERA_LOG_LEVEL"), std::string::npos);
  }
}

TEST_F(Logging, ParseLogLevel) {
  EXPECT_EQ(parse_log_level("trace"), spdlog::level::trace);
  EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("warning"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("error"), spdlog::level::err);
  EXPECT_EQ(parse_log_level("off"), spdlog::level::off);
  EXPECT_FALSE(parse_log_level("INFO").has_value());
  EXPECT_FALSE(parse_log_level("").has_value());
}

TEST_F(Logging, GetLoggerIsThreadSafeAndReturnsOneLoggerPerName) {
  std::vector<std::shared_ptr<spdlog::logger>> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = get_logger("core.shared"); });
  }
  for (auto& t : threads) t.join();
  for (const auto& logger : seen) EXPECT_EQ(logger, seen[0]);
  EXPECT_EQ(seen[0]->name(), "core.shared");
  EXPECT_NE(get_logger("core.other"), seen[0]);
}

}  // namespace
}  // namespace tessera
