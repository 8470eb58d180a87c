// Read-only memory mapping of a whole file.
#include "tessera/core/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera {

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, "data file '" + path.string() + "' " + what);
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    fail(path, "does not exist");
  }
  if (!std::filesystem::is_regular_file(status)) {
    fail(path, "is not a regular file");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(path, std::string("cannot be opened: ") + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot be read: ") + std::strerror(err));
  }
  if (info.st_size == 0) {
    ::close(fd);
    fail(path, "is empty");
  }
  size_ = static_cast<size_t>(info.st_size);
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapped == MAP_FAILED) {
    size_ = 0;
    fail(path, std::string("cannot be mapped: ") + std::strerror(err));
  }
  data_ = static_cast<const std::byte*>(mapped);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace tessera
