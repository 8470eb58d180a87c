// Private to the ELF reader: bounded reads of a file, and the checks of the
// parts of a library the dynamic loader acts on (plugin_elf_layout.cpp).
#pragma once

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "plugin_elf.hpp"
#include "tessera/core/input_file.hpp"

namespace tessera::detail::elf {

using Ehdr = ElfW(Ehdr);
using Phdr = ElfW(Phdr);
using Dyn = ElfW(Dyn);
using Shdr = ElfW(Shdr);
using Sym = ElfW(Sym);

// Random access to a regular file that refuses any read outside the file.
class BoundedFile {
 public:
  explicit BoundedFile(const std::filesystem::path& file) {
    std::string problem;
    fd_ = open_regular_file(file, size_, problem);
    if (fd_ < 0) throw ElfFormatError("cannot open file for reading: the file " + problem);
  }
  ~BoundedFile() { ::close(fd_); }
  BoundedFile(const BoundedFile&) = delete;
  BoundedFile& operator=(const BoundedFile&) = delete;

  [[nodiscard]] uint64_t size() const noexcept { return size_; }

  // Whether `count` bytes at `offset` lie inside the file (overflow-safe).
  [[nodiscard]] bool contains(uint64_t offset, uint64_t count) const noexcept {
    return offset <= size_ && count <= size_ - offset;
  }

  // Reads `count` bytes at `offset` into `out`; `what` names the structure
  // for the error message.
  void read(uint64_t offset, void* out, uint64_t count, const std::string& what) const {
    if (!contains(offset, count)) {
      throw ElfFormatError(
          fmt::format("truncated or corrupt: {} needs {} bytes at offset {} but the file has "
                      "only {} bytes",
                      what, count, offset, size_));
    }
    auto* to = static_cast<char*>(out);
    uint64_t done = 0;
    while (done < count) {
      const ssize_t n = ::pread(fd_, to + done, count - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw ElfFormatError(fmt::format("read error in {} at offset {}: {}", what, offset + done,
                                         n < 0 ? std::strerror(errno) : "the file shrank"));
      }
      done += static_cast<uint64_t>(n);
    }
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// What the layout checks established: the PT_LOAD segments in address
// order, the PT_DYNAMIC segment, and the dynamic entries the loader uses to
// find its tables (each at most once).
struct Layout {
  std::vector<Phdr> loads;
  Phdr dynamic{};
  std::map<int64_t, uint64_t> dynamic_values;
};

// Checks the program headers (PT_LOAD segments in the file, sorted, not
// overlapping, consistently aligned; every other segment the loader reads
// inside one of them) and the dynamic section (terminated, its tables inside
// loaded segments with the sizes and entry sizes the loader expects, its
// strings inside the string table). Throws ElfFormatError naming the
// program header or dynamic entry at fault.
Layout check_layout(BoundedFile& file, const Ehdr& header);

// With section headers present: every allocated section lies where a
// PT_LOAD maps it, with that segment's permissions, and the dynamic entries
// point at the sections they describe. Throws ElfFormatError naming the
// section or entry at fault.
void check_sections_against_layout(BoundedFile& file, const Ehdr& header,
                                   const std::vector<Shdr>& sections, const Layout& layout);

}  // namespace tessera::detail::elf
