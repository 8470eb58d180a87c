#include "tessera/core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

std::string not_regular(unsigned mode) {
  return "is " + file_type_text(mode) + ", not a regular file";
}

}  // namespace

std::string file_type_text(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a regular file";
  }
}

std::string regular_file_problem(const std::filesystem::path& path) noexcept {
  try {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      const int err = errno;
      return err == ENOENT ? std::string("does not exist")
                           : std::string("cannot be examined: ") + std::strerror(err);
    }
    return S_ISREG(info.st_mode) ? std::string() : not_regular(info.st_mode);
  } catch (...) {  // std::bad_alloc from a message
    return "cannot be examined";
  }
}

int open_regular_file(const std::filesystem::path& path, uint64_t& size,
                      std::string& problem) noexcept {
  try {
    problem = regular_file_problem(path);
    if (!problem.empty()) return -1;
    // O_NONBLOCK: should a FIFO replace the file after stat(), open() still
    // returns at once and the fstat() below refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      problem = std::string("cannot be opened: ") + std::strerror(errno);
      return -1;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      problem = std::string("cannot be examined: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    if (!S_ISREG(info.st_mode)) {
      problem = not_regular(info.st_mode);
      ::close(fd);
      return -1;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      problem = std::string("cannot be opened: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    size = static_cast<uint64_t>(info.st_size);
    return fd;
  } catch (...) {  // std::bad_alloc from a message
    problem = "cannot be opened";
    return -1;
  }
}

InputFile::InputFile(const std::filesystem::path& path, std::string_view what)
    : path_(path), what_(what) {
  std::string problem;
  fd_ = open_regular_file(path, size_, problem);
  if (fd_ < 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat(what_, " '", path.string(), "' ", problem));
  }
}

InputFile::~InputFile() { release(); }

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void InputFile::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint64_t InputFile::current_size() const {
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat(what_, " '", path_.string(),
                               "' cannot be examined: ", std::strerror(errno)));
  }
  return static_cast<uint64_t>(info.st_size);
}

size_t InputFile::read_at(uint64_t offset, void* out, size_t count) const {
  auto* to = static_cast<char*>(out);
  size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, to + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(what_, " '", path_.string(), "': read error at byte ",
                                 offset + done, ": ", std::strerror(errno)));
    }
    if (n == 0) break;  // end of file
    done += static_cast<size_t>(n);
  }
  return done;
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes) {
  const InputFile file(path, what);
  const auto too_large = [&](uint64_t bytes) {
    return Error(TESSERA_ERR_INVALID_ARGUMENT,
                 detail::concat(what, " '", path.string(), "' is ", bytes,
                                " bytes, more than the limit of ", max_bytes));
  };
  if (file.size() > max_bytes) throw too_large(file.size());
  std::string text;
  text.resize(static_cast<size_t>(file.size()));
  size_t length = file.read_at(0, text.data(), text.size());
  // A file that grew since it was opened: read on, up to one byte past the
  // limit.
  if (length == text.size()) {
    char more[4096];
    while (true) {
      const size_t n = file.read_at(length, more, sizeof more);
      if (n == 0) break;
      if (length + n > max_bytes) throw too_large(length + n);
      text.append(more, n);
      length += n;
    }
  }
  text.resize(length);
  return text;
}

}  // namespace tessera
