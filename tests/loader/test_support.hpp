// Helpers shared by the loader tests: fixture paths, temporary directories,
// environment overrides, file byte edits and capture of the "core" log.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "../support/temp_dir.hpp"

namespace tessera::test {

// Directory of the fixture set, and the second directory holding a
// duplicate of the `good` plugin.
std::filesystem::path fixture_dir();
std::filesystem::path fixture_dup_dir();

// <fixture_dir>/libtessera_backend_<name>.so
std::filesystem::path backend_fixture(const std::string& name);

// Directories of the fixtures that crash or end the process while loading
// or unloading, and of the one that never finishes loading; and the build
// tree's own plugin directory.
std::filesystem::path crash_dir();
std::filesystem::path hang_dir();
std::filesystem::path builtin_dir();

// Sets (or, with nullopt, unsets) an environment variable for the lifetime of
// the object and restores the previous state afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value);
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv();

 private:
  std::string name_;
  std::optional<std::string> previous_;
};

// The plugin probe's cache in a fresh temporary directory (XDG_CACHE_HOME)
// for the lifetime of the object, so that a test sees no earlier results.
class TempCache {
 public:
  TempCache();
  [[nodiscard]] std::filesystem::path file() const;  // the cache file inside

 private:
  TempDir dir_;
  ScopedEnv env_;
};

// Whole-file read and write; throw std::runtime_error naming the path on
// failure.
std::vector<char> read_bytes(const std::filesystem::path& file);
void write_bytes(const std::filesystem::path& file, const std::vector<char>& bytes);

// Overwrites sizeof(T) bytes of `bytes` at `offset` with `value`; throws
// std::out_of_range if they do not fit.
template <typename T>
void patch(std::vector<char>& bytes, std::size_t offset, const T& value) {
  if (offset > bytes.size() || sizeof(T) > bytes.size() - offset) {
    throw std::out_of_range("patch beyond the end of the file");
  }
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Records what the logger "core" writes while the object lives (level and
// message of each line). With `debug`, the logger's level is lowered to
// debug meanwhile, so its debug lines are recorded too.
class LogCapture {
 public:
  explicit LogCapture(bool debug = false);
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture();
  // Lines as "<level>: <message>", oldest first.
  [[nodiscard]] std::vector<std::string> lines() const;
  // True if some line at `level` contains every one of `parts`.
  [[nodiscard]] bool contains(const std::string& level,
                              const std::vector<std::string>& parts) const;

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  spdlog::level::level_enum previous_level_;
};

}  // namespace tessera::test
