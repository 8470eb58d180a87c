#include "test_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include "tessera/core/logging.hpp"

namespace tessera::test {

namespace fs = std::filesystem;

fs::path fixture_dir() { return TESSERA_TEST_FIXTURE_DIR; }

fs::path fixture_dup_dir() { return TESSERA_TEST_FIXTURE_DUP_DIR; }

fs::path backend_fixture(const std::string& name) {
  return fixture_dir() / ("libtessera_backend_" + name + ".so");
}

fs::path crash_dir() { return TESSERA_TEST_CRASH_DIR; }

fs::path hang_dir() { return TESSERA_TEST_HANG_DIR; }

fs::path builtin_dir() { return TESSERA_TEST_BUILTIN_DIR; }

// The tests change the environment from one thread only, so the functions
// that clang-tidy flags as not thread safe are safe here.
// NOLINTBEGIN(concurrency-mt-unsafe)
ScopedEnv::ScopedEnv(std::string name, const std::optional<std::string>& value)
    : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str()); old != nullptr) previous_ = old;
  if (value) {
    setenv(name_.c_str(), value->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  if (previous_) {
    setenv(name_.c_str(), previous_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

// NOLINTEND(concurrency-mt-unsafe)

TempCache::TempCache() : env_("XDG_CACHE_HOME", dir_.path().string()) {}

fs::path TempCache::file() const { return dir_.path() / "tessera" / "plugin-probe.txt"; }

std::vector<char> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

LogCapture::LogCapture(bool debug)
    : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1024)),
      previous_level_(get_logger("core")->level()) {
  sink_->set_pattern("%l: %v");
  const auto logger = get_logger("core");
  logger->sinks().push_back(sink_);
  if (debug && previous_level_ > spdlog::level::debug) logger->set_level(spdlog::level::debug);
}

LogCapture::~LogCapture() {
  get_logger("core")->set_level(previous_level_);
  auto& sinks = get_logger("core")->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

std::vector<std::string> LogCapture::lines() const { return sink_->last_formatted(); }

bool LogCapture::contains(const std::string& level, const std::vector<std::string>& parts) const {
  for (const std::string& line : lines()) {
    if (line.rfind(level + ": ", 0) != 0) continue;
    const bool all = std::all_of(parts.begin(), parts.end(), [&](const std::string& part) {
      return line.find(part) != std::string::npos;
    });
    if (all) return true;
  }
  return false;
}

}  // namespace tessera::test
