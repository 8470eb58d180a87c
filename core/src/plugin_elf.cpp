// Bounds-checked reader of the ELF structures the loader needs: the file
// header, the program headers and the dynamic section the dynamic loader
// acts on, the section header table and the dynamic symbol table.
#include "plugin_elf.hpp"

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plugin_elf_file.hpp"

namespace tessera::detail {
namespace {

using BoundedFile = elf::BoundedFile;
using Ehdr = elf::Ehdr;
using Phdr = elf::Phdr;
using Shdr = elf::Shdr;
using Sym = elf::Sym;

constexpr unsigned char kNativeClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
constexpr unsigned char kNativeData =
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;

const char* class_name(unsigned char elf_class) noexcept {
  switch (elf_class) {
    case ELFCLASS32:
      return "32-bit";
    case ELFCLASS64:
      return "64-bit";
    default:
      return "unknown-class";
  }
}

const char* type_name(unsigned type) noexcept {
  switch (type) {
    case ET_REL:
      return "relocatable object";
    case ET_EXEC:
      return "executable";
    case ET_CORE:
      return "core dump";
    default:
      return "unknown type";
  }
}

// ELF machine of the running executable, read once; nullopt if unreadable
// (the machine check is then left to the dynamic loader).
std::optional<uint16_t> host_machine() {
  static const std::optional<uint16_t> machine = []() -> std::optional<uint16_t> {
    std::ifstream self("/proc/self/exe", std::ios::binary);
    Ehdr header{};
    if (!self.read(reinterpret_cast<char*>(&header), sizeof header)) {  // NOLINT
      return std::nullopt;
    }
    return header.e_machine;
  }();
  return machine;
}

Ehdr read_header(BoundedFile& file) {
  if (file.size() == 0) throw ElfFormatError("file is empty");
  unsigned char ident[EI_NIDENT] = {};
  if (file.size() < EI_NIDENT) {
    throw ElfFormatError(
        fmt::format("file is too short to be an ELF file ({} bytes)", file.size()));
  }
  file.read(0, ident, EI_NIDENT, "the ELF identification");
  if (std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    throw ElfFormatError("not an ELF file (no ELF magic number)");
  }
  if (ident[EI_CLASS] != kNativeClass) {
    throw ElfFormatError(fmt::format("ELF class {} does not match the {} host",
                                     class_name(ident[EI_CLASS]), class_name(kNativeClass)));
  }
  if (ident[EI_DATA] != kNativeData) {
    throw ElfFormatError("ELF byte order does not match the host");
  }
  Ehdr header{};
  file.read(0, &header, sizeof header, "the ELF header");
  if (header.e_type != ET_DYN) {
    throw ElfFormatError(fmt::format("not a shared library (ELF type {}: {})", header.e_type,
                                     type_name(header.e_type)));
  }
  const auto machine = host_machine();
  if (machine && header.e_machine != *machine) {
    throw ElfFormatError(fmt::format("built for ELF machine {} but the host is ELF machine {}",
                                     header.e_machine, *machine));
  }
  if (ident[EI_VERSION] != EV_CURRENT || header.e_version != EV_CURRENT) {
    throw ElfFormatError(fmt::format(
        "unsupported ELF version {} (expected {})",
        ident[EI_VERSION] != EV_CURRENT ? ident[EI_VERSION] : header.e_version, EV_CURRENT));
  }
  if (header.e_phnum == 0 || header.e_phnum >= PN_XNUM || header.e_phentsize != sizeof(Phdr)) {
    throw ElfFormatError(fmt::format("corrupt program header table ({} entries of {} bytes)",
                                     header.e_phnum, header.e_phentsize));
  }
  if (!file.contains(header.e_phoff, uint64_t{header.e_phnum} * header.e_phentsize)) {
    throw ElfFormatError(fmt::format(
        "truncated or corrupt: the program header table ({} entries at offset {}) lies beyond "
        "the end of the file ({} bytes)",
        header.e_phnum, header.e_phoff, file.size()));
  }
  return header;
}

// All section headers; empty when the file has none.
std::vector<Shdr> read_sections(BoundedFile& file, const Ehdr& header) {
  if (header.e_shoff == 0) return {};
  if (header.e_shentsize != sizeof(Shdr)) {
    throw ElfFormatError(fmt::format("corrupt section header entry size {} (expected {})",
                                     header.e_shentsize, sizeof(Shdr)));
  }
  uint64_t count = header.e_shnum;
  if (count == 0) {
    // Extended numbering: the real count is in the first entry's sh_size.
    Shdr first{};
    file.read(header.e_shoff, &first, sizeof first, "the first section header");
    count = first.sh_size;
  }
  if (count == 0 || count > file.size() / sizeof(Shdr)) {
    throw ElfFormatError(fmt::format(
        "truncated or corrupt: the section header table ({} entries at offset {}) does not fit "
        "in the file ({} bytes)",
        count, header.e_shoff, file.size()));
  }
  std::vector<Shdr> sections(count);
  file.read(header.e_shoff, sections.data(), count * sizeof(Shdr), "the section header table");
  for (uint64_t i = 0; i < count; ++i) {
    const Shdr& s = sections[i];
    if (s.sh_type == SHT_NULL || s.sh_type == SHT_NOBITS) continue;
    if (!file.contains(s.sh_offset, s.sh_size)) {
      throw ElfFormatError(fmt::format(
          "truncated or corrupt: section {} needs {} bytes at offset {} but the file has only "
          "{} bytes",
          i, s.sh_size, s.sh_offset, file.size()));
    }
  }
  return sections;
}

std::vector<std::string> read_dynamic_exports(BoundedFile& file,
                                              const std::vector<Shdr>& sections) {
  std::vector<std::string> exports;
  const Shdr* dynsym = nullptr;
  for (const Shdr& s : sections) {
    if (s.sh_type == SHT_DYNSYM) {
      dynsym = &s;
      break;
    }
  }
  if (dynsym == nullptr) return exports;  // a library without dynamic symbols exports nothing
  if (dynsym->sh_entsize != sizeof(Sym) || dynsym->sh_link >= sections.size() ||
      sections[dynsym->sh_link].sh_type != SHT_STRTAB) {
    throw ElfFormatError("corrupt dynamic symbol table header");
  }
  const Shdr& strtab = sections[dynsym->sh_link];
  std::vector<char> names(strtab.sh_size);
  file.read(strtab.sh_offset, names.data(), names.size(), "the dynamic string table");
  std::vector<Sym> symbols(dynsym->sh_size / sizeof(Sym));
  file.read(dynsym->sh_offset, symbols.data(), symbols.size() * sizeof(Sym),
            "the dynamic symbol table");

  for (const Sym& sym : symbols) {
    const unsigned bind = static_cast<unsigned>(sym.st_info) >> 4U;
    const unsigned visibility = static_cast<unsigned>(sym.st_other) & 0x3U;
    const bool global = bind == STB_GLOBAL || bind == STB_WEAK || bind == STB_GNU_UNIQUE;
    const bool visible = visibility == STV_DEFAULT || visibility == STV_PROTECTED;
    if (sym.st_shndx == SHN_UNDEF || !global || !visible || sym.st_name == 0) continue;
    if (sym.st_name >= names.size()) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic symbol table: name offset {} is outside the string table ({} bytes)",
          sym.st_name, names.size()));
    }
    const char* begin = names.data() + sym.st_name;
    const void* end = std::memchr(begin, '\0', names.size() - sym.st_name);
    if (end == nullptr) {
      throw ElfFormatError("corrupt dynamic string table: a symbol name is not terminated");
    }
    exports.emplace_back(begin, static_cast<const char*>(end));
  }
  return exports;
}

}  // namespace

ElfLibraryInfo inspect_elf_library(const std::filesystem::path& file) {
  BoundedFile in(file);
  const Ehdr header = read_header(in);
  const elf::Layout layout = elf::check_layout(in, header);
  const std::vector<Shdr> sections = read_sections(in, header);
  ElfLibraryInfo info;
  if (sections.empty()) return info;  // exports unknown: checked after loading
  elf::check_sections_against_layout(in, header, sections, layout);
  info.exports_known = true;
  info.exports = read_dynamic_exports(in, sections);
  return info;
}

}  // namespace tessera::detail
