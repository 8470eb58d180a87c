// checkpoint.dir: the checks before the first step and the run's lock.
#include "tessera/core/train/checkpoint_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "invalid_input.hpp"
#include "tessera/core/atomic_file.hpp"
#include "tessera/core/input_file.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

std::string dir_text(const std::filesystem::path& dir) {
  return "checkpoint.dir '" + dir.string() + "'";
}

// errno of stat(path) (0 when it exists), and its mode.
int stat_errno(const std::filesystem::path& path, unsigned& mode) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno;
  mode = info.st_mode;
  return 0;
}

// "" when this process may create entries in the directory `path`, else
// strerror of access().
std::string write_problem(const std::filesystem::path& path) {
  if (::access(path.c_str(), W_OK | X_OK) == 0) return {};
  return std::strerror(errno);
}

// This machine's name, "unknown" if it has none.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

// The holder a lock file names: "pid 123 on host h", or why it names none.
// The holder writes its line right after taking the lock, so an empty file
// is read again for a short while.
std::string lock_holder(int fd) {
  for (int attempt = 0;; ++attempt) {
    char text[512] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    long pid = 0;
    char host[256] = {};
    if (n > 0 && std::sscanf(text, "%ld %255s", &pid, host) == 2 && pid > 0) {
      return fmt::format("pid {} on host {}", pid, host);
    }
    if (attempt == 20) return "its holder has not written its pid into the lock file";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A file name of the form of an atomic write's temporary file, unique to
// this process and call.
std::string probe_name() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char name[64];
  std::snprintf(name, sizeof name, ".write-probe.tmp.%ld.%016llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(rng()));
  return name;
}

// Appends to `removed` the temporary files of atomic writes found directly
// in `dir` (not following symbolic links), removing them.
void sweep_temp_files(const std::filesystem::path& dir, const std::filesystem::path& top,
                      std::vector<std::filesystem::path>& removed) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) && !it->is_symlink(type_ec) &&
        is_atomic_temp_name(it->path().filename().string())) {
      stale.push_back(it->path());
    }
  }
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("{}: cannot list '{}': {}", dir_text(top), dir.string(), ec.message()));
  }
  for (const std::filesystem::path& path : stale) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw Error(TESSERA_ERR_INTERNAL,
                  fmt::format("{}: cannot remove the stale temporary file '{}': {}", dir_text(top),
                              path.string(), std::strerror(errno)));
    }
    removed.push_back(path);
  }
}

}  // namespace

void check_checkpoint_dir(const std::filesystem::path& dir) {
  unsigned mode = 0;
  const int err = stat_errno(dir, mode);
  if (err == 0) {
    if (!S_ISDIR(mode)) fail(dir_text(dir) + " is " + file_type_text(mode) + ", not a directory");
    const std::string problem = write_problem(dir);
    if (!problem.empty()) fail(dir_text(dir) + " is not writable: " + problem);
    return;
  }
  if (err != ENOENT && err != ENOTDIR) {
    fail(dir_text(dir) + " cannot be examined: " + std::strerror(err));
  }
  // Missing: the nearest parent that exists must be a writable directory.
  std::filesystem::path parent = dir;
  while (true) {
    std::filesystem::path up = parent.parent_path();
    if (up.empty()) up = ".";
    if (up == parent) break;
    parent = std::move(up);
    const int parent_err = stat_errno(parent, mode);
    if (parent_err == ENOENT || parent_err == ENOTDIR) continue;
    if (parent_err != 0) {
      fail(dir_text(dir) + " cannot be created: '" + parent.string() +
           "' cannot be examined: " + std::strerror(parent_err));
    }
    if (!S_ISDIR(mode)) {
      fail(dir_text(dir) + " cannot be created: '" + parent.string() + "' is " +
           file_type_text(mode) + ", not a directory");
    }
    const std::string problem = write_problem(parent);
    if (!problem.empty()) {
      fail(dir_text(dir) + " cannot be created: '" + parent.string() +
           "' is not writable: " + problem);
    }
    return;
  }
}

CheckpointDirLock::CheckpointDirLock(const std::filesystem::path& dir) : dir_(dir) {
  // 1. The directory.
  unsigned mode = 0;
  if (stat_errno(dir, mode) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail(dir_text(dir) + " cannot be created: " + ec.message());
    if (const int err = stat_errno(dir, mode); err != 0) {
      fail(dir_text(dir) + " cannot be examined: " + std::strerror(err));
    }
  }
  if (!S_ISDIR(mode)) fail(dir_text(dir) + " is " + file_type_text(mode) + ", not a directory");

  // 2. The lock. O_NONBLOCK and O_NOFOLLOW: a FIFO or a link planted as the
  // lock file must neither block open() nor redirect the lock.
  const std::filesystem::path lock_path = dir / kLockFile;
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
               0644);
  if (fd_ < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM || err == EROFS) {
      fail(fmt::format("{} is not writable: cannot create its lock file '{}': {}", dir_text(dir),
                       lock_path.string(), std::strerror(err)));
    }
    fail(fmt::format("{}: cannot open its lock file '{}': {}", dir_text(dir), lock_path.string(),
                     std::strerror(err)));
  }
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) {
      fail(fmt::format("{}: cannot examine its lock file '{}': {}", dir_text(dir),
                       lock_path.string(), std::strerror(errno)));
    }
    if (!S_ISREG(info.st_mode)) {
      fail(fmt::format("{}: its lock file '{}' is {}, not a regular file (remove it)",
                       dir_text(dir), lock_path.string(), file_type_text(info.st_mode)));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        fail(fmt::format(
            "{} is in use by another run ({}); wait for it to end or give this run another "
            "checkpoint.dir",
            dir_text(dir), lock_holder(fd_)));
      }
      fail(fmt::format("{}: cannot lock '{}': {}", dir_text(dir), lock_path.string(),
                       std::strerror(err)));
    }

    // 3. Who holds it.
    const std::string holder = fmt::format("{} {}\n", static_cast<long>(::getpid()), host_name());
    if (::ftruncate(fd_, 0) != 0 ||
        ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
      fail(fmt::format("{}: cannot write its lock file '{}': {}", dir_text(dir), lock_path.string(),
                       std::strerror(errno)));
    }

    // 4. A probe: the lock file may have existed, so creating it proved
    // nothing.
    const std::filesystem::path probe = dir / probe_name();
    const int probe_fd =
        ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (probe_fd < 0) {
      fail(fmt::format("{} is not writable: cannot create a file in it: {}", dir_text(dir),
                       std::strerror(errno)));
    }
    ::close(probe_fd);
    if (::unlink(probe.c_str()) != 0) {
      fail(fmt::format("{}: cannot remove the probe file '{}': {}", dir_text(dir), probe.string(),
                       std::strerror(errno)));
    }

    // 5. What a killed writer left.
    sweep_temp_files(dir, dir, removed_);
    std::error_code ec;
    std::vector<std::filesystem::path> step_dirs;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_directory(type_ec) && !it->is_symlink(type_ec) &&
          parse_checkpoint_dir_name(it->path().filename().string())) {
        step_dirs.push_back(it->path());
      }
    }
    if (ec) {
      fail(fmt::format("{}: cannot list it: {}", dir_text(dir), ec.message()));
    }
    for (const std::filesystem::path& step_dir : step_dirs)
      sweep_temp_files(step_dir, dir, removed_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string CheckpointDirLock::removed_files_message() const {
  if (removed_.empty()) return {};
  constexpr size_t kListed = 8;
  std::string names;
  for (size_t i = 0; i < removed_.size() && i < kListed; ++i) {
    if (i > 0) names += ", ";
    names += removed_[i].lexically_relative(dir_).string();
  }
  if (removed_.size() > kListed) names += fmt::format(" and {} more", removed_.size() - kListed);
  return fmt::format(
      "checkpoint: removed {} temporary file{} left in '{}' by an interrupted write: {}",
      removed_.size(), removed_.size() == 1 ? "" : "s", dir_.string(), names);
}

}  // namespace tessera::train
