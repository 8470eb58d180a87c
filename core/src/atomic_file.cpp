#include "tessera/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include "fd_guard.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

[[noreturn]] void throw_errno(const char* what, const std::filesystem::path& path, int err) {
  throw Error(TESSERA_ERR_INTERNAL, detail::concat("atomic write: cannot ", what, " '",
                                                   path.string(), "': ", std::strerror(err)));
}

// `<path>.tmp.<pid>.<16 random hex digits>`: unique per process and attempt.
std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%016llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(rng()));
  std::filesystem::path temp = path;
  temp += suffix;
  return temp;
}

// Directory that holds `path` ("." for a bare file name).
std::filesystem::path directory_of(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// Flushes the directory entry changes (the rename) of `dir` to disk.
void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open directory", dir, errno);
  FdGuard guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) throw_errno("fsync directory", dir, errno);
}

}  // namespace

void AtomicFileSink::write(const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", temp_path_, errno);
    }
    bytes += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(AtomicFileSink&)>& produce) {
  if (path.empty() || !path.has_filename()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("atomic write: '", path.string(), "' is not a file path"));
  }
  const std::filesystem::path temp = temp_path_for(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("create temporary file", temp, errno);
  FdGuard guard(fd);
  try {
    AtomicFileSink sink(fd, temp);
    produce(sink);
    if (::fsync(fd) != 0) throw_errno("fsync", temp, errno);
    if (const int err = guard.close_now(); err != 0) throw_errno("close", temp, err);
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat("atomic write: cannot rename '", temp.string(), "' to '",
                                 path.string(), "': ", std::strerror(err)));
    }
  } catch (...) {
    guard.close_now();
    ::unlink(temp.c_str());
    throw;
  }
  // The new content is in place; only its durability across a power loss
  // depends on this last step, which is still reported if it fails.
  sync_directory(directory_of(path));
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  write_file_atomically(path, [bytes](AtomicFileSink& sink) { sink.write(bytes); });
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, [text](AtomicFileSink& sink) { sink.write(text); });
}

bool is_atomic_temp_name(std::string_view name) noexcept {
  constexpr std::string_view marker = ".tmp.";
  constexpr size_t kHexDigits = 16;
  const size_t at = name.rfind(marker);
  if (at == std::string_view::npos || at == 0) return false;
  const std::string_view rest = name.substr(at + marker.size());  // <pid>.<hex>
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || rest.size() - dot - 1 != kHexDigits) {
    return false;
  }
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto is_hex = [&](char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); };
  const std::string_view pid = rest.substr(0, dot);
  const std::string_view hex = rest.substr(dot + 1);
  return std::all_of(pid.begin(), pid.end(), is_digit) &&
         std::all_of(hex.begin(), hex.end(), is_hex);
}

size_t remove_stale_temp_files(const std::filesystem::path& path) {
  const std::filesystem::path dir = directory_of(path);
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return 0;
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL, detail::concat("atomic write: cannot list directory '",
                                                     dir.string(), "': ", ec.message()));
  }
  size_t removed = 0;
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const bool gone = std::filesystem::remove(entry.path(), ec);
    if (ec) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat("atomic write: cannot remove stale temporary file '",
                                 entry.path().string(), "': ", ec.message()));
    }
    if (gone) ++removed;
  }
  return removed;
}

}  // namespace tessera
