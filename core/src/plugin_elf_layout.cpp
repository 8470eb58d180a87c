// The parts of a shared library the dynamic loader acts on before any of its
// code runs: program headers, the dynamic section and the tables it points
// at. glibc trusts them, so a single corrupt byte there can crash the process
// inside dlopen; each is checked here against the file and the loaded
// segments first.
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plugin_elf_file.hpp"

namespace tessera::detail::elf {
namespace {

bool is_power_of_two(uint64_t value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

// An alignment field: 0 and 1 mean none, anything else must be a power of two.
bool valid_alignment(uint64_t align) noexcept { return align <= 1 || is_power_of_two(align); }

std::string segment_label(std::size_t index, const Phdr& p) {
  const char* type = nullptr;
  switch (p.p_type) {
    case PT_LOAD:
      type = "PT_LOAD";
      break;
    case PT_DYNAMIC:
      type = "PT_DYNAMIC";
      break;
    case PT_INTERP:
      type = "PT_INTERP";
      break;
    case PT_NOTE:
      type = "PT_NOTE";
      break;
    case PT_PHDR:
      type = "PT_PHDR";
      break;
    case PT_TLS:
      type = "PT_TLS";
      break;
    case PT_GNU_EH_FRAME:
      type = "PT_GNU_EH_FRAME";
      break;
    case PT_GNU_PROPERTY:
      type = "PT_GNU_PROPERTY";
      break;
    case PT_GNU_RELRO:
      type = "PT_GNU_RELRO";
      break;
    default:
      return fmt::format("program header {} (type {:#x})", index, p.p_type);
  }
  return fmt::format("program header {} ({})", index, type);
}

// The PT_LOAD segment holding the `size` bytes at address `addr`, in its file
// image ([p_vaddr, p_vaddr + p_filesz)) when `file_backed`, else anywhere in
// its memory image; nullptr when no single segment holds them all.
const Phdr* find_load(const std::vector<Phdr>& loads, uint64_t addr, uint64_t size,
                      bool file_backed) noexcept {
  for (const Phdr& load : loads) {
    const uint64_t extent = file_backed ? load.p_filesz : load.p_memsz;
    if (addr >= load.p_vaddr && addr - load.p_vaddr <= extent &&
        size <= extent - (addr - load.p_vaddr)) {
      return &load;
    }
  }
  return nullptr;
}

std::vector<Phdr> read_program_headers(BoundedFile& file, const Ehdr& header) {
  std::vector<Phdr> phdrs(header.e_phnum);
  file.read(header.e_phoff, phdrs.data(), phdrs.size() * sizeof(Phdr), "the program header table");
  return phdrs;
}

// The PT_LOAD segments, in file order, after checking that each lies in the
// file, is no larger on disk than in memory, is aligned consistently, and
// starts after the previous one ends: what the dynamic loader assumes when
// it maps them.
std::vector<Phdr> check_load_segments(const BoundedFile& file, const std::vector<Phdr>& phdrs) {
  std::vector<Phdr> loads;
  for (std::size_t i = 0; i < phdrs.size(); ++i) {
    const Phdr& p = phdrs[i];
    if (p.p_type != PT_LOAD) continue;
    const std::string what = segment_label(i, p);
    if (!file.contains(p.p_offset, p.p_filesz)) {
      throw ElfFormatError(fmt::format(
          "truncated or corrupt: {} needs {} bytes at offset {} but the file has only {} bytes",
          what, p.p_filesz, p.p_offset, file.size()));
    }
    if (p.p_filesz > p.p_memsz) {
      throw ElfFormatError(fmt::format("corrupt {}: its file size {} exceeds its memory size {}",
                                       what, p.p_filesz, p.p_memsz));
    }
    if (p.p_memsz > UINT64_MAX - p.p_vaddr) {
      throw ElfFormatError(fmt::format("corrupt {}: address {:#x} plus memory size {:#x} overflows",
                                       what, p.p_vaddr, p.p_memsz));
    }
    if (!valid_alignment(p.p_align)) {
      throw ElfFormatError(
          fmt::format("corrupt {}: alignment {:#x} is not a power of two", what, p.p_align));
    }
    if (p.p_align > 1 && p.p_offset % p.p_align != p.p_vaddr % p.p_align) {
      throw ElfFormatError(fmt::format(
          "corrupt {}: offset {:#x} and address {:#x} differ modulo the alignment {:#x}", what,
          p.p_offset, p.p_vaddr, p.p_align));
    }
    if (!loads.empty() && p.p_vaddr < loads.back().p_vaddr + loads.back().p_memsz) {
      throw ElfFormatError(fmt::format(
          "corrupt {}: address {:#x} is below the end of the previous PT_LOAD ({:#x}); loadable "
          "segments must be sorted by address and must not overlap",
          what, p.p_vaddr, loads.back().p_vaddr + loads.back().p_memsz));
    }
    loads.push_back(p);
  }
  if (loads.empty()) {
    throw ElfFormatError("corrupt program header table: no loadable segment (PT_LOAD)");
  }
  return loads;
}

// A segment the dynamic loader reads through the mapped file (dynamic
// section, program headers, notes, TLS image, unwind table): its bytes must
// be in the file and inside one PT_LOAD's file image, at the offset that
// segment maps to its address. Returns that PT_LOAD (nullptr for an empty
// segment).
const Phdr* check_mapped_segment(const BoundedFile& file, const std::vector<Phdr>& loads,
                                 const std::string& what, const Phdr& p) {
  if (p.p_filesz == 0) return nullptr;  // e.g. a TLS segment of .tbss only: nothing is read
  if (!file.contains(p.p_offset, p.p_filesz)) {
    throw ElfFormatError(fmt::format(
        "truncated or corrupt: {} needs {} bytes at offset {} but the file has only {} bytes", what,
        p.p_filesz, p.p_offset, file.size()));
  }
  if (p.p_filesz > p.p_memsz) {
    throw ElfFormatError(fmt::format("corrupt {}: its file size {} exceeds its memory size {}",
                                     what, p.p_filesz, p.p_memsz));
  }
  const Phdr* load = find_load(loads, p.p_vaddr, p.p_filesz, true);
  if (load == nullptr) {
    throw ElfFormatError(fmt::format(
        "corrupt {}: its {} bytes at address {:#x} are not inside a loadable segment's file image",
        what, p.p_filesz, p.p_vaddr));
  }
  if (p.p_offset < load->p_offset || p.p_offset - load->p_offset != p.p_vaddr - load->p_vaddr) {
    throw ElfFormatError(fmt::format(
        "corrupt {}: file offset {:#x} does not match address {:#x} (its PT_LOAD maps offset {:#x} "
        "to address {:#x})",
        what, p.p_offset, p.p_vaddr, load->p_offset, load->p_vaddr));
  }
  return load;
}

// The range made read-only after relocation must start inside a PT_LOAD and
// end within that segment's last aligned block (linkers round it up to a
// page), before the next PT_LOAD.
void check_relro(const std::vector<Phdr>& loads, const std::string& what, const Phdr& p) {
  const Phdr* load = find_load(loads, p.p_vaddr, 0, false);
  if (load != nullptr) {
    const uint64_t align = std::max<uint64_t>(load->p_align, 1);
    const uint64_t end = load->p_vaddr + load->p_memsz;
    uint64_t limit = end > UINT64_MAX - align ? UINT64_MAX : (end + align - 1) / align * align;
    if (load != &loads.back()) limit = std::min(limit, (load + 1)->p_vaddr);
    if (p.p_memsz <= limit - p.p_vaddr) return;
  }
  throw ElfFormatError(
      fmt::format("corrupt {}: its {} bytes at address {:#x} are not inside a loadable segment",
                  what, p.p_memsz, p.p_vaddr));
}

// Checks every program header the dynamic loader acts on; returns the one
// PT_DYNAMIC segment.
Phdr check_segments(const Ehdr& header, const BoundedFile& file, const std::vector<Phdr>& phdrs,
                    const std::vector<Phdr>& loads) {
  std::optional<Phdr> dynamic;
  for (std::size_t i = 0; i < phdrs.size(); ++i) {
    const Phdr& p = phdrs[i];
    const std::string what = segment_label(i, p);
    switch (p.p_type) {
      case PT_DYNAMIC: {
        if (dynamic) {
          throw ElfFormatError(fmt::format("corrupt {}: a second dynamic section", what));
        }
        if (p.p_filesz < sizeof(Dyn)) {
          throw ElfFormatError(fmt::format("corrupt {}: empty dynamic section", what));
        }
        const Phdr* load = check_mapped_segment(file, loads, what, p);
        // A writable dynamic section is updated in place by the dynamic
        // loader; in a read-only mapping that write would fault.
        if ((p.p_flags & PF_W) != 0 && (load->p_flags & PF_W) == 0) {
          throw ElfFormatError(
              fmt::format("corrupt {}: marked writable but it lies in a read-only PT_LOAD", what));
        }
        dynamic = p;
        break;
      }
      case PT_PHDR: {
        check_mapped_segment(file, loads, what, p);
        if (p.p_offset != header.e_phoff || p.p_filesz < uint64_t{header.e_phnum} * sizeof(Phdr)) {
          throw ElfFormatError(fmt::format(
              "corrupt {}: {} bytes at offset {:#x}, but the program header table is {} bytes at "
              "offset {:#x}",
              what, p.p_filesz, p.p_offset, uint64_t{header.e_phnum} * sizeof(Phdr),
              header.e_phoff));
        }
        break;
      }
      case PT_TLS:
        if (!valid_alignment(p.p_align)) {
          throw ElfFormatError(
              fmt::format("corrupt {}: alignment {:#x} is not a power of two", what, p.p_align));
        }
        check_mapped_segment(file, loads, what, p);
        break;
      case PT_INTERP:
      case PT_NOTE:
      case PT_GNU_EH_FRAME:
      case PT_GNU_PROPERTY:
        check_mapped_segment(file, loads, what, p);
        break;
      case PT_GNU_RELRO:
        check_relro(loads, what, p);
        break;
      default:
        break;
    }
  }
  if (!dynamic) {
    throw ElfFormatError("not a dynamically linked library: no dynamic section (PT_DYNAMIC)");
  }
  return *dynamic;
}

const char* dynamic_tag_name(int64_t tag) noexcept {
  switch (tag) {
    case DT_NEEDED:
      return "DT_NEEDED";
    case DT_PLTRELSZ:
      return "DT_PLTRELSZ";
    case DT_PLTGOT:
      return "DT_PLTGOT";
    case DT_HASH:
      return "DT_HASH";
    case DT_STRTAB:
      return "DT_STRTAB";
    case DT_SYMTAB:
      return "DT_SYMTAB";
    case DT_RELA:
      return "DT_RELA";
    case DT_RELASZ:
      return "DT_RELASZ";
    case DT_RELAENT:
      return "DT_RELAENT";
    case DT_STRSZ:
      return "DT_STRSZ";
    case DT_SYMENT:
      return "DT_SYMENT";
    case DT_INIT:
      return "DT_INIT";
    case DT_FINI:
      return "DT_FINI";
    case DT_SONAME:
      return "DT_SONAME";
    case DT_RPATH:
      return "DT_RPATH";
    case DT_REL:
      return "DT_REL";
    case DT_RELSZ:
      return "DT_RELSZ";
    case DT_RELENT:
      return "DT_RELENT";
    case DT_PLTREL:
      return "DT_PLTREL";
    case DT_JMPREL:
      return "DT_JMPREL";
    case DT_INIT_ARRAY:
      return "DT_INIT_ARRAY";
    case DT_FINI_ARRAY:
      return "DT_FINI_ARRAY";
    case DT_INIT_ARRAYSZ:
      return "DT_INIT_ARRAYSZ";
    case DT_FINI_ARRAYSZ:
      return "DT_FINI_ARRAYSZ";
    case DT_RUNPATH:
      return "DT_RUNPATH";
    case DT_RELRSZ:
      return "DT_RELRSZ";
    case DT_RELR:
      return "DT_RELR";
    case DT_RELRENT:
      return "DT_RELRENT";
    case DT_GNU_HASH:
      return "DT_GNU_HASH";
    case DT_VERSYM:
      return "DT_VERSYM";
    case DT_VERDEF:
      return "DT_VERDEF";
    case DT_VERDEFNUM:
      return "DT_VERDEFNUM";
    case DT_VERNEED:
      return "DT_VERNEED";
    case DT_VERNEEDNUM:
      return "DT_VERNEEDNUM";
    case DT_AUXILIARY:
      return "DT_AUXILIARY";
    case DT_FILTER:
      return "DT_FILTER";
    default:
      return nullptr;
  }
}

// Tags that hold a string table offset (any number of them).
bool is_string_tag(int64_t tag) noexcept {
  return tag == DT_NEEDED || tag == DT_SONAME || tag == DT_RPATH || tag == DT_RUNPATH ||
         tag == DT_AUXILIARY || tag == DT_FILTER;
}

// The entries of a dynamic section that the dynamic loader uses to find
// its tables, each present at most once.
class DynamicEntries {
 public:
  DynamicEntries(BoundedFile& file, const Phdr& dynamic, std::vector<Phdr> loads)
      : file_(file), loads_(std::move(loads)) {
    std::vector<Dyn> entries(dynamic.p_filesz / sizeof(Dyn));
    file.read(dynamic.p_offset, entries.data(), entries.size() * sizeof(Dyn),
              "the dynamic section");
    bool terminated = false;
    for (const Dyn& d : entries) {
      if (d.d_tag == DT_NULL) {
        terminated = true;
        break;
      }
      if (is_string_tag(d.d_tag)) {
        strings_.emplace_back(d.d_tag, d.d_un.d_val);
      } else if (dynamic_tag_name(d.d_tag) != nullptr &&
                 !values_.emplace(d.d_tag, d.d_un.d_val).second) {
        throw ElfFormatError(
            fmt::format("corrupt dynamic section: {} appears twice", dynamic_tag_name(d.d_tag)));
      }
    }
    if (!terminated) {
      throw ElfFormatError(
          fmt::format("corrupt dynamic section: none of its {} entries is the closing DT_NULL",
                      entries.size()));
    }
  }

  [[nodiscard]] std::optional<uint64_t> get(int64_t tag) const {
    const auto found = values_.find(tag);
    return found == values_.end() ? std::nullopt : std::optional<uint64_t>(found->second);
  }

  [[nodiscard]] const std::vector<std::pair<int64_t, uint64_t>>& strings() const noexcept {
    return strings_;
  }

  uint64_t require(int64_t tag) const {
    const auto value = get(tag);
    if (!value) {
      throw ElfFormatError(fmt::format("corrupt dynamic section: no {}", dynamic_tag_name(tag)));
    }
    return *value;
  }

  // Tags that only mean something together.
  void require_together(int64_t a, int64_t b) const {
    if (get(a).has_value() != get(b).has_value()) {
      const bool has_a = get(a).has_value();
      throw ElfFormatError(fmt::format("corrupt dynamic section: {} without {}",
                                       dynamic_tag_name(has_a ? a : b),
                                       dynamic_tag_name(has_a ? b : a)));
    }
  }

  // Entry size `tag`, when present, must be `expected`.
  void require_entry_size(int64_t tag, uint64_t expected) const {
    if (const auto value = get(tag); value && *value != expected) {
      throw ElfFormatError(fmt::format("corrupt dynamic section: {} is {} (expected {})",
                                       dynamic_tag_name(tag), *value, expected));
    }
  }

  // The `size` bytes at the address of `tag` must lie in one PT_LOAD's file
  // image; with `flags`, in a segment with those permissions. Returns their
  // file offset.
  uint64_t require_table(int64_t tag, uint64_t size, uint32_t flags = 0) const {
    const uint64_t addr = require(tag);
    const Phdr* load = find_load(loads_, addr, size, true);
    if (load == nullptr) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic section: {} ({} bytes at address {:#x}) is not inside a loadable "
          "segment's file image",
          dynamic_tag_name(tag), size, addr));
    }
    if ((load->p_flags & flags) != flags) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic section: {} (address {:#x}) lies in a segment that is not {}",
          dynamic_tag_name(tag), addr, (flags & PF_X) != 0 ? "executable" : "writable"));
    }
    return load->p_offset + (addr - load->p_vaddr);
  }

  // A table given by an address tag and a size tag, made of `entry`-byte
  // entries.
  void require_sized_table(int64_t tag, int64_t size_tag, uint64_t entry) const {
    if (!get(tag)) return;
    const uint64_t size = require(size_tag);
    if (entry != 0 && size % entry != 0) {
      throw ElfFormatError(
          fmt::format("corrupt dynamic section: {} {} is not a multiple of the {}-byte entry",
                      dynamic_tag_name(size_tag), size, entry));
    }
    require_table(tag, size);
  }

  template <typename T>
  T read_at(uint64_t offset, const char* what) const {
    T value{};
    file_.read(offset, &value, sizeof value, what);
    return value;
  }

  [[nodiscard]] const std::vector<Phdr>& loads() const noexcept { return loads_; }
  [[nodiscard]] const std::map<int64_t, uint64_t>& values() const noexcept { return values_; }

 private:
  BoundedFile& file_;
  std::vector<Phdr> loads_;
  std::map<int64_t, uint64_t> values_;
  std::vector<std::pair<int64_t, uint64_t>> strings_;
};

// The hash tables the dynamic loader reads when it sets the library up:
// their headers and bucket arrays must be in the file.
void check_hash_tables(const DynamicEntries& dyn) {
  if (dyn.get(DT_HASH)) {
    const uint64_t at = dyn.require_table(DT_HASH, 2 * sizeof(uint32_t));
    const auto nbucket = dyn.read_at<uint32_t>(at, "the DT_HASH header");
    const auto nchain = dyn.read_at<uint32_t>(at + sizeof(uint32_t), "the DT_HASH header");
    dyn.require_table(DT_HASH, (uint64_t{2} + nbucket + nchain) * sizeof(uint32_t));
  }
  if (dyn.get(DT_GNU_HASH)) {
    const uint64_t at = dyn.require_table(DT_GNU_HASH, 4 * sizeof(uint32_t));
    const auto nbuckets = dyn.read_at<uint32_t>(at, "the DT_GNU_HASH header");
    const auto bloom_words =
        dyn.read_at<uint32_t>(at + 2 * sizeof(uint32_t), "the DT_GNU_HASH header");
    if (!is_power_of_two(bloom_words)) {
      throw ElfFormatError(
          fmt::format("corrupt DT_GNU_HASH table: its bloom filter size {} is not a power of two",
                      bloom_words));
    }
    dyn.require_table(DT_GNU_HASH, 4 * sizeof(uint32_t) +
                                       uint64_t{bloom_words} * sizeof(ElfW(Addr)) +
                                       uint64_t{nbuckets} * sizeof(uint32_t));
  }
}

// The dynamic section: every table the dynamic loader follows from it lies
// in the file, in a loaded segment, with the sizes and entry sizes it
// expects, and every string it names is inside the string table.
void check_dynamic_section(BoundedFile& file, const DynamicEntries& dyn) {
  dyn.require(DT_STRTAB);
  dyn.require(DT_SYMTAB);
  for (const auto& [a, b] : {std::pair<int64_t, int64_t>{DT_STRTAB, DT_STRSZ},
                             {DT_RELA, DT_RELASZ},
                             {DT_RELA, DT_RELAENT},
                             {DT_REL, DT_RELSZ},
                             {DT_REL, DT_RELENT},
                             {DT_RELR, DT_RELRSZ},
                             {DT_RELR, DT_RELRENT},
                             {DT_JMPREL, DT_PLTRELSZ},
                             {DT_JMPREL, DT_PLTREL},
                             {DT_INIT_ARRAY, DT_INIT_ARRAYSZ},
                             {DT_FINI_ARRAY, DT_FINI_ARRAYSZ},
                             {DT_VERNEED, DT_VERNEEDNUM},
                             {DT_VERDEF, DT_VERDEFNUM}}) {
    dyn.require_together(a, b);
  }
  // Symbol versions: the table of each symbol's version and the
  // definitions or requirements it indexes only make sense together.
  const bool versions = dyn.get(DT_VERNEED) || dyn.get(DT_VERDEF);
  if (versions != dyn.get(DT_VERSYM).has_value()) {
    throw ElfFormatError(
        versions ? "corrupt dynamic section: DT_VERNEED or DT_VERDEF without DT_VERSYM"
                 : "corrupt dynamic section: DT_VERSYM without DT_VERNEED or DT_VERDEF");
  }
  dyn.require_entry_size(DT_SYMENT, sizeof(Sym));
  dyn.require_entry_size(DT_RELAENT, sizeof(ElfW(Rela)));
  dyn.require_entry_size(DT_RELENT, sizeof(ElfW(Rel)));
  dyn.require_entry_size(DT_RELRENT, sizeof(ElfW(Relr)));

  // The string table, and every string the loader looks up in it.
  const uint64_t strsz = dyn.require(DT_STRSZ);
  const uint64_t strtab = dyn.require_table(DT_STRTAB, strsz);
  std::vector<char> strings(strsz);
  file.read(strtab, strings.data(), strings.size(), "the dynamic string table");
  for (const auto& [tag, offset] : dyn.strings()) {
    if (offset >= strings.size()) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic section: {} string offset {} is outside the string table ({} bytes)",
          dynamic_tag_name(tag), offset, strings.size()));
    }
    if (std::memchr(strings.data() + offset, '\0', strings.size() - offset) == nullptr) {
      throw ElfFormatError(
          fmt::format("corrupt dynamic section: the {} string at offset {} is not terminated",
                      dynamic_tag_name(tag), offset));
    }
  }

  dyn.require_table(DT_SYMTAB, sizeof(Sym));
  check_hash_tables(dyn);
  dyn.require_sized_table(DT_RELA, DT_RELASZ, sizeof(ElfW(Rela)));
  dyn.require_sized_table(DT_REL, DT_RELSZ, sizeof(ElfW(Rel)));
  dyn.require_sized_table(DT_RELR, DT_RELRSZ, sizeof(ElfW(Relr)));
  if (const auto pltrel = dyn.get(DT_PLTREL)) {
    if (*pltrel != DT_RELA && *pltrel != DT_REL) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic section: DT_PLTREL is {} (expected DT_RELA or DT_REL)", *pltrel));
    }
    dyn.require_sized_table(DT_JMPREL, DT_PLTRELSZ,
                            *pltrel == DT_RELA ? sizeof(ElfW(Rela)) : sizeof(ElfW(Rel)));
  }
  dyn.require_sized_table(DT_INIT_ARRAY, DT_INIT_ARRAYSZ, sizeof(ElfW(Addr)));
  dyn.require_sized_table(DT_FINI_ARRAY, DT_FINI_ARRAYSZ, sizeof(ElfW(Addr)));
  if (dyn.get(DT_INIT)) dyn.require_table(DT_INIT, 1, PF_X);
  if (dyn.get(DT_FINI)) dyn.require_table(DT_FINI, 1, PF_X);
  if (dyn.get(DT_VERSYM)) dyn.require_table(DT_VERSYM, sizeof(ElfW(Versym)));
  if (dyn.get(DT_VERNEED)) dyn.require_table(DT_VERNEED, sizeof(ElfW(Verneed)));
  if (dyn.get(DT_VERDEF)) dyn.require_table(DT_VERDEF, sizeof(ElfW(Verdef)));
  if (const auto pltgot = dyn.get(DT_PLTGOT);
      pltgot && find_load(dyn.loads(), *pltgot, sizeof(ElfW(Addr)), false) == nullptr) {
    throw ElfFormatError(fmt::format(
        "corrupt dynamic section: DT_PLTGOT (address {:#x}) is not inside a loadable segment",
        *pltgot));
  }
}

// Names of sections, from the section name table when it can be read.
class SectionNames {
 public:
  SectionNames(BoundedFile& file, const Ehdr& header, const std::vector<Shdr>& sections) {
    uint64_t index = header.e_shstrndx;
    if (index == SHN_XINDEX) index = sections.front().sh_link;
    if (index != SHN_UNDEF && index < sections.size() && sections[index].sh_type == SHT_STRTAB) {
      names_.resize(sections[index].sh_size);
      file.read(sections[index].sh_offset, names_.data(), names_.size(), "the section name table");
    }
  }

  // The section's name; empty when unknown.
  [[nodiscard]] std::string_view name(const Shdr& s) const noexcept {
    if (s.sh_name >= names_.size()) return {};
    const char* begin = names_.data() + s.sh_name;
    if (std::memchr(begin, '\0', names_.size() - s.sh_name) == nullptr) return {};
    return begin;
  }

  // "section 12 (.text)", or "section 12" when the name is unknown.
  [[nodiscard]] std::string label(const std::vector<Shdr>& sections, const Shdr& s) const {
    const auto index = static_cast<std::size_t>(&s - sections.data());
    const std::string_view text = name(s);
    return text.empty() ? fmt::format("section {}", index)
                        : fmt::format("section {} ({})", index, text);
  }

 private:
  std::vector<char> names_;
};

// An allocated section must be where a PT_LOAD maps it: inside the
// segment's file image at the matching offset (in its memory image for
// .bss-like sections), and in a segment with the permissions it needs.
void check_section_placement(const std::vector<Shdr>& sections, const SectionNames& names,
                             const std::vector<Phdr>& loads) {
  for (const Shdr& s : sections) {
    if ((s.sh_flags & SHF_ALLOC) == 0 || s.sh_size == 0) continue;
    const bool nobits = s.sh_type == SHT_NOBITS;
    if (nobits && (s.sh_flags & SHF_TLS) != 0) continue;  // .tbss takes no room in a segment
    const Phdr* load = find_load(loads, s.sh_addr, s.sh_size, !nobits);
    if (load == nullptr) {
      throw ElfFormatError(fmt::format(
          "corrupt {}: its {} bytes at address {:#x} are not inside a loadable segment{}",
          names.label(sections, s), s.sh_size, s.sh_addr, nobits ? "" : "'s file image"));
    }
    if (!nobits && (s.sh_offset < load->p_offset ||
                    s.sh_offset - load->p_offset != s.sh_addr - load->p_vaddr)) {
      throw ElfFormatError(fmt::format(
          "corrupt {}: file offset {:#x} does not match address {:#x} (its PT_LOAD maps offset "
          "{:#x} to address {:#x})",
          names.label(sections, s), s.sh_offset, s.sh_addr, load->p_offset, load->p_vaddr));
    }
    const bool exec = (s.sh_flags & SHF_EXECINSTR) != 0;
    const bool write = (s.sh_flags & SHF_WRITE) != 0;
    const uint32_t needed = exec ? PF_X : write ? PF_W : PF_R;
    if ((load->p_flags & needed) == 0) {
      throw ElfFormatError(fmt::format("corrupt {}: it is {} but the PT_LOAD holding it is not",
                                       names.label(sections, s),
                                       exec    ? "code"
                                       : write ? "writable data"
                                               : "read-only data"));
    }
  }
}

// The dynamic entries must point at the sections they describe.
class DynamicAgainstSections {
 public:
  DynamicAgainstSections(const std::vector<Shdr>& sections, const SectionNames& names,
                         const Layout& layout)
      : sections_(sections), names_(names), values_(layout.dynamic_values) {}

  // `tag`, when present, is the address of an allocated section of `type`
  // (when the file has one); with `size_tag`, that entry is its size.
  // `required`: such a section without the entry is an error too.
  void matches(int64_t tag, uint32_t type) const { check(tag, type, DT_NULL, false); }
  void matches_required(int64_t tag, uint32_t type, int64_t size_tag = DT_NULL) const {
    check(tag, type, size_tag, true);
  }

  // The table at `tag` with `size_tag` bytes, when present, lies wholly in
  // allocated sections of `type` (relocations: a wrong size would have the
  // loader apply other bytes as relocations).
  void covered(int64_t tag, int64_t size_tag, uint32_t type) const {
    const auto addr = get(tag);
    const auto size = get(size_tag);
    if (!addr || !size || *size == 0) return;
    bool any = false;
    uint64_t at = *addr;
    const uint64_t end = *addr + *size;  // inside a segment: checked, no overflow
    while (at < end) {
      const Shdr* holder = nullptr;
      for (const Shdr& s : sections_) {
        if ((s.sh_flags & SHF_ALLOC) == 0 || s.sh_type != type) continue;
        any = true;
        if (at >= s.sh_addr && at - s.sh_addr < s.sh_size) holder = &s;
      }
      if (holder == nullptr) {
        if (!any) return;  // nothing to compare with
        throw ElfFormatError(fmt::format(
            "corrupt dynamic section: {} {} at {:#x} reaches {:#x}, outside the {} sections",
            dynamic_tag_name(size_tag), *size, *addr, at,
            type == SHT_RELA ? "SHT_RELA" : "SHT_REL"));
      }
      at = holder->sh_addr + holder->sh_size;
    }
  }

  // `tag`, when present, is an address inside an allocated code section.
  void in_code(int64_t tag) const {
    const auto value = get(tag);
    if (!value) return;
    for (const Shdr& s : sections_) {
      if ((s.sh_flags & (SHF_ALLOC | SHF_EXECINSTR)) == (SHF_ALLOC | SHF_EXECINSTR) &&
          *value >= s.sh_addr && *value - s.sh_addr < s.sh_size) {
        return;
      }
    }
    throw ElfFormatError(
        fmt::format("corrupt dynamic section: {} ({:#x}) is not inside a code section",
                    dynamic_tag_name(tag), *value));
  }

 private:
  void check(int64_t tag, uint32_t type, int64_t size_tag, bool required) const {
    const Shdr* first = nullptr;
    const auto value = get(tag);
    for (const Shdr& s : sections_) {
      if ((s.sh_flags & SHF_ALLOC) == 0 || s.sh_type != type) continue;
      if (first == nullptr) first = &s;
      if (value && s.sh_addr == *value) {
        const auto size = size_tag != DT_NULL ? get(size_tag) : std::nullopt;
        if (size && *size != s.sh_size) {
          throw ElfFormatError(fmt::format("corrupt dynamic section: {} is {} but {} has {} bytes",
                                           dynamic_tag_name(size_tag), *size,
                                           names_.label(sections_, s), s.sh_size));
        }
        return;
      }
    }
    if (first == nullptr) return;  // nothing to compare with
    if (!value) {
      if (!required || first->sh_size == 0) return;
      throw ElfFormatError(fmt::format("corrupt dynamic section: no {} for {}",
                                       dynamic_tag_name(tag), names_.label(sections_, *first)));
    }
    throw ElfFormatError(fmt::format("corrupt dynamic section: {} is {:#x} but {} is at {:#x}",
                                     dynamic_tag_name(tag), *value, names_.label(sections_, *first),
                                     first->sh_addr));
  }

  [[nodiscard]] std::optional<uint64_t> get(int64_t tag) const {
    const auto found = values_.find(tag);
    return found == values_.end() ? std::nullopt : std::optional<uint64_t>(found->second);
  }

  const std::vector<Shdr>& sections_;
  const SectionNames& names_;
  const std::map<int64_t, uint64_t>& values_;
};

}  // namespace

Layout check_layout(BoundedFile& file, const Ehdr& header) {
  const std::vector<Phdr> phdrs = read_program_headers(file, header);
  Layout layout;
  layout.loads = check_load_segments(file, phdrs);
  layout.dynamic = check_segments(header, file, phdrs, layout.loads);
  const DynamicEntries dyn(file, layout.dynamic, layout.loads);
  check_dynamic_section(file, dyn);
  layout.dynamic_values = dyn.values();
  return layout;
}

void check_sections_against_layout(BoundedFile& file, const Ehdr& header,
                                   const std::vector<Shdr>& sections, const Layout& layout) {
  const SectionNames names(file, header, sections);
  check_section_placement(sections, names, layout.loads);
  for (const Shdr& s : sections) {
    if (s.sh_type == SHT_DYNAMIC && (s.sh_flags & SHF_ALLOC) != 0 &&
        s.sh_addr != layout.dynamic.p_vaddr) {
      throw ElfFormatError(
          fmt::format("corrupt PT_DYNAMIC: its address {:#x} is not that of {} ({:#x})",
                      layout.dynamic.p_vaddr, names.label(sections, s), s.sh_addr));
    }
  }
  const DynamicAgainstSections dyn(sections, names, layout);
  dyn.matches_required(DT_SYMTAB, SHT_DYNSYM);
  for (const Shdr& s : sections) {
    // The dynamic string table is the one the dynamic symbol table links to.
    if (s.sh_type != SHT_DYNSYM || s.sh_link >= sections.size()) continue;
    const auto strtab = layout.dynamic_values.find(DT_STRTAB);
    if (strtab != layout.dynamic_values.end() && strtab->second != sections[s.sh_link].sh_addr) {
      throw ElfFormatError(fmt::format(
          "corrupt dynamic section: DT_STRTAB is {:#x} but {} is at {:#x}", strtab->second,
          names.label(sections, sections[s.sh_link]), sections[s.sh_link].sh_addr));
    }
    break;
  }
  dyn.matches(DT_HASH, SHT_HASH);
  dyn.matches(DT_GNU_HASH, SHT_GNU_HASH);
  dyn.matches_required(DT_VERSYM, SHT_GNU_versym);
  dyn.matches_required(DT_VERNEED, SHT_GNU_verneed);
  dyn.matches_required(DT_VERDEF, SHT_GNU_verdef);
  dyn.matches(DT_RELA, SHT_RELA);
  dyn.matches(DT_JMPREL, layout.dynamic_values.count(DT_PLTREL) != 0 &&
                                 layout.dynamic_values.at(DT_PLTREL) == DT_REL
                             ? SHT_REL
                             : SHT_RELA);
  dyn.matches(DT_REL, SHT_REL);
  dyn.covered(DT_RELA, DT_RELASZ, SHT_RELA);
  dyn.covered(DT_REL, DT_RELSZ, SHT_REL);
  if (layout.dynamic_values.count(DT_PLTREL) != 0) {
    dyn.covered(DT_JMPREL, DT_PLTRELSZ,
                layout.dynamic_values.at(DT_PLTREL) == DT_REL ? SHT_REL : SHT_RELA);
  }
  dyn.matches_required(DT_INIT_ARRAY, SHT_INIT_ARRAY, DT_INIT_ARRAYSZ);
  dyn.matches_required(DT_FINI_ARRAY, SHT_FINI_ARRAY, DT_FINI_ARRAYSZ);
  dyn.in_code(DT_INIT);
  dyn.in_code(DT_FINI);
}

}  // namespace tessera::detail::elf
