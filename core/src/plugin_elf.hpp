// Static inspection of a candidate plugin file: reads its ELF headers and
// dynamic symbol table from disk, without mapping the file or running any of
// its code, so that a file which is not a loadable shared library for this
// host is refused before the dynamic loader ever sees it.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::detail {

// A file that is not a valid shared library for this host. what() is the
// detail only ("not an ELF file (bad magic number)", "truncated: ..."); the
// caller adds the file's path.
class ElfFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the inspection learned about a valid shared library.
struct ElfLibraryInfo {
  // False when the file carries no section headers, so its exports cannot be
  // listed statically; the caller must then look the entry point up after
  // loading instead.
  bool exports_known = false;
  // Names of the symbols the dynamic loader can resolve in this library:
  // defined, global or weak, default or protected visibility (the dynamic
  // symbol table, which a stripped library keeps).
  std::vector<std::string> exports;
};

// Checks that `file` is an ELF shared object of this host's class, byte order
// and machine, that every header and section it declares lies inside the
// file, that what the dynamic loader acts on is consistent (the PT_LOAD
// segments, the other segments inside them, the dynamic section and the
// tables it points at, and, when the file has section headers, that the
// sections agree with both), and lists its dynamic exports. Every offset and
// size is checked against the file size before it is used, so a truncated or
// corrupt file yields an ElfFormatError instead of a crash or an oversized
// allocation. Throws ElfFormatError (with the detail) for any of these
// failures, including a file that cannot be opened or read.
ElfLibraryInfo inspect_elf_library(const std::filesystem::path& file);

}  // namespace tessera::detail
