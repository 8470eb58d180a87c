// Static inspection of plugin files: copies of the `good` fixture with one
// field of their ELF structures damaged (headers, sections, program headers,
// the dynamic section) must be rejected with a reason that says what is
// wrong, before the dynamic loader sees them.
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Ehdr = ElfW(Ehdr);
using Phdr = ElfW(Phdr);
using Dyn = ElfW(Dyn);
using Shdr = ElfW(Shdr);

class DamagedElf : public ::testing::Test {
 protected:
  void SetUp() override { bytes_ = test::read_bytes(test::backend_fixture("good")); }

  [[nodiscard]] Ehdr header() const {
    Ehdr h{};
    std::memcpy(&h, bytes_.data(), sizeof h);
    return h;
  }

  // Offset of the header of the first section of `type`.
  [[nodiscard]] std::size_t section_offset(uint32_t type) const {
    const Ehdr h = header();
    for (std::size_t i = 0; i < h.e_shnum; ++i) {
      const std::size_t at = h.e_shoff + i * sizeof(Shdr);
      Shdr s{};
      std::memcpy(&s, bytes_.data() + at, sizeof s);
      if (s.sh_type == type) return at;
    }
    ADD_FAILURE() << "the good fixture has no section of type " << type;
    return 0;
  }

  // Offset of the program header of the `nth` (from 0) segment of `type`.
  [[nodiscard]] std::size_t segment_offset(uint32_t type, int nth = 0) const {
    const Ehdr h = header();
    for (std::size_t i = 0; i < h.e_phnum; ++i) {
      const std::size_t at = h.e_phoff + i * sizeof(Phdr);
      Phdr p{};
      std::memcpy(&p, bytes_.data() + at, sizeof p);
      if (p.p_type == type && nth-- == 0) return at;
    }
    ADD_FAILURE() << "the good fixture has no segment of type " << type;
    return 0;
  }

  [[nodiscard]] Phdr segment(uint32_t type, int nth = 0) const {
    Phdr p{};
    std::memcpy(&p, bytes_.data() + segment_offset(type, nth), sizeof p);
    return p;
  }

  // Offset of the dynamic entry with `tag`.
  [[nodiscard]] std::size_t dynamic_offset(int64_t tag) const {
    const Phdr dynamic = segment(PT_DYNAMIC);
    for (std::size_t at = dynamic.p_offset; at + sizeof(Dyn) <= dynamic.p_offset + dynamic.p_filesz;
         at += sizeof(Dyn)) {
      Dyn d{};
      std::memcpy(&d, bytes_.data() + at, sizeof d);
      if (d.d_tag == tag) return at;
    }
    ADD_FAILURE() << "the good fixture has no dynamic entry " << tag;
    return 0;
  }

  [[nodiscard]] uint64_t dynamic_value(int64_t tag) const {
    Dyn d{};
    std::memcpy(&d, bytes_.data() + dynamic_offset(tag), sizeof d);
    return d.d_un.d_val;
  }

  template <typename Field>
  void set_segment(uint32_t type, int nth, std::size_t field, Field value) {
    test::patch(bytes_, segment_offset(type, nth) + field, value);
  }

  void set_dynamic(int64_t tag, uint64_t value) {
    test::patch(bytes_, dynamic_offset(tag) + offsetof(Dyn, d_un), value);
  }

  // Writes the damaged copy under the good plugin's name and loads it.
  PluginRecord load() {
    const fs::path file = dir_.path() / "libtessera_backend_good.so";
    test::write_bytes(file, bytes_);
    PluginRegistry registry;
    return registry.load_file(file);
  }

  void expect_rejected(const std::string& reason) {
    const PluginRecord record = load();
    EXPECT_FALSE(record.loaded);
    EXPECT_NE(record.reason.find(reason), std::string::npos)
        << "reason: " << record.reason << "\nexpected to contain: " << reason;
  }

  std::vector<char> bytes_;
  test::TempDir dir_;
};

TEST_F(DamagedElf, UndamagedCopyLoads) {
  const PluginRecord record = load();
  EXPECT_TRUE(record.loaded) << record.reason;
}

TEST_F(DamagedElf, EmptyFile) {
  bytes_.clear();
  expect_rejected("not a valid shared library: file is empty");
}

TEST_F(DamagedElf, ShorterThanTheIdentification) {
  bytes_.resize(10);
  expect_rejected("not a valid shared library: file is too short to be an ELF file (10 bytes)");
}

TEST_F(DamagedElf, OtherElfClass) {
  bytes_[EI_CLASS] = sizeof(void*) == 8 ? ELFCLASS32 : ELFCLASS64;
  expect_rejected("does not match the");
}

TEST_F(DamagedElf, OtherByteOrder) {
  bytes_[EI_DATA] = bytes_[EI_DATA] == ELFDATA2LSB ? ELFDATA2MSB : ELFDATA2LSB;
  expect_rejected("ELF byte order does not match the host");
}

TEST_F(DamagedElf, NotASharedObject) {
  test::patch(bytes_, offsetof(Ehdr, e_type), static_cast<uint16_t>(ET_REL));
  expect_rejected("not a shared library (ELF type 1: relocatable object)");
}

TEST_F(DamagedElf, OtherMachine) {
  const uint16_t other = header().e_machine == EM_AARCH64 ? EM_X86_64 : EM_AARCH64;
  test::patch(bytes_, offsetof(Ehdr, e_machine), other);
  expect_rejected("built for ELF machine " + std::to_string(other) + " but the host is");
}

TEST_F(DamagedElf, SectionHeaderTableBeyondTheEnd) {
  test::patch(bytes_, offsetof(Ehdr, e_shoff),
              static_cast<decltype(Ehdr{}.e_shoff)>(bytes_.size()));
  expect_rejected("not a valid shared library: truncated or corrupt: the section header table");
}

TEST_F(DamagedElf, SectionBeyondTheEnd) {
  const std::size_t dynsym = section_offset(SHT_DYNSYM);
  test::patch(bytes_, dynsym + offsetof(Shdr, sh_offset),
              static_cast<decltype(Shdr{}.sh_offset)>(bytes_.size() - 8));
  expect_rejected("truncated or corrupt: section ");
}

TEST_F(DamagedElf, HugeSectionSizeIsNotAllocated) {
  const std::size_t dynsym = section_offset(SHT_DYNSYM);
  test::patch(bytes_, dynsym + offsetof(Shdr, sh_size),
              static_cast<decltype(Shdr{}.sh_size)>(UINT64_C(1) << 60));
  expect_rejected("truncated or corrupt: section ");
}

TEST_F(DamagedElf, SymbolNameOutsideItsStringTable) {
  Shdr dynsym{};
  std::memcpy(&dynsym, bytes_.data() + section_offset(SHT_DYNSYM), sizeof dynsym);
  const std::size_t dynstr = header().e_shoff + dynsym.sh_link * sizeof(Shdr);
  test::patch(bytes_, dynstr + offsetof(Shdr, sh_size), static_cast<decltype(Shdr{}.sh_size)>(1));
  expect_rejected("corrupt dynamic symbol table: name offset");
}

// Program headers and the dynamic section: what glibc's dlopen trusts.
using Addr = decltype(Phdr{}.p_offset);

TEST_F(DamagedElf, LoadSegmentBeyondTheEnd) {
  set_segment(PT_LOAD, 1, offsetof(Phdr, p_offset), static_cast<Addr>(bytes_.size()));
  expect_rejected(
      "not a valid shared library: truncated or corrupt: program header 1 (PT_LOAD) "
      "needs");
}

TEST_F(DamagedElf, LoadSegmentLargerInTheFileThanInMemory) {
  const Phdr code = segment(PT_LOAD, 1);
  set_segment(PT_LOAD, 1, offsetof(Phdr, p_filesz), static_cast<Addr>(code.p_memsz + 1));
  expect_rejected("corrupt program header 1 (PT_LOAD): its file size " +
                  std::to_string(code.p_memsz + 1) + " exceeds its memory size " +
                  std::to_string(code.p_memsz));
}

TEST_F(DamagedElf, LoadAlignmentNotAPowerOfTwo) {
  set_segment(PT_LOAD, 1, offsetof(Phdr, p_align), static_cast<Addr>(0x1001));
  expect_rejected("corrupt program header 1 (PT_LOAD): alignment 0x1001 is not a power of two");
}

TEST_F(DamagedElf, LoadOffsetAndAddressDisagree) {
  const Phdr code = segment(PT_LOAD, 1);
  set_segment(PT_LOAD, 1, offsetof(Phdr, p_vaddr), static_cast<Addr>(code.p_vaddr + 8));
  expect_rejected(fmt::format("differ modulo the alignment {:#x}", code.p_align));
}

TEST_F(DamagedElf, LoadSegmentsOverlap) {
  const Phdr code = segment(PT_LOAD, 1);
  set_segment(PT_LOAD, 2, offsetof(Phdr, p_vaddr), code.p_vaddr);
  set_segment(PT_LOAD, 2, offsetof(Phdr, p_paddr), code.p_vaddr);
  expect_rejected(fmt::format(
      "corrupt program header 2 (PT_LOAD): address {:#x} is below the end of the previous PT_LOAD",
      code.p_vaddr));
}

TEST_F(DamagedElf, CodeSegmentReadFromTheWrongPage) {
  // A single byte of a program header: the code comes from a page earlier in
  // the file. glibc maps it and crashes running it.
  const Phdr code = segment(PT_LOAD, 1);
  ASSERT_GE(code.p_offset, code.p_align);
  set_segment(PT_LOAD, 1, offsetof(Phdr, p_offset),
              static_cast<Addr>(code.p_offset - code.p_align));
  expect_rejected("not a valid shared library: corrupt section");
}

TEST_F(DamagedElf, DynamicSegmentOutsideTheLoadedSegments) {
  set_segment(PT_DYNAMIC, 0, offsetof(Phdr, p_vaddr),
              static_cast<Addr>(segment(PT_DYNAMIC).p_vaddr + 0x10000));
  expect_rejected("PT_DYNAMIC): its " + std::to_string(segment(PT_DYNAMIC).p_filesz) +
                  " bytes at address");
}

TEST_F(DamagedElf, WritableDynamicSectionInAReadOnlySegment) {
  const int data = 3;  // the RW PT_LOAD holding .dynamic
  ASSERT_NE(segment(PT_LOAD, data).p_flags & PF_W, 0U);
  set_segment(PT_LOAD, data, offsetof(Phdr, p_flags), static_cast<uint32_t>(PF_R));
  expect_rejected("(PT_DYNAMIC): marked writable but it lies in a read-only PT_LOAD");
}

TEST_F(DamagedElf, DynamicSectionWithoutItsTerminator) {
  const Phdr dynamic = segment(PT_DYNAMIC);
  for (std::size_t at = dynamic_offset(DT_NULL); at < dynamic.p_offset + dynamic.p_filesz;
       at += sizeof(Dyn)) {
    test::patch(bytes_, at, static_cast<decltype(Dyn{}.d_tag)>(DT_DEBUG));
  }
  expect_rejected("corrupt dynamic section: none of its " +
                  std::to_string(dynamic.p_filesz / sizeof(Dyn)) +
                  " entries is the closing DT_NULL");
}

TEST_F(DamagedElf, DynamicTagTwice) {
  test::patch(bytes_, dynamic_offset(DT_RELAENT), static_cast<decltype(Dyn{}.d_tag)>(DT_STRTAB));
  expect_rejected("corrupt dynamic section: DT_STRTAB appears twice");
}

TEST_F(DamagedElf, StringTableBeyondItsSegment) {
  set_dynamic(DT_STRSZ, UINT64_C(1) << 32);
  expect_rejected("corrupt dynamic section: DT_STRTAB (4294967296 bytes at address");
}

TEST_F(DamagedElf, NeededLibraryNameOutsideTheStringTable) {
  // Turn the last entry before DT_NULL into a DT_NEEDED far past the strings.
  const std::size_t last = dynamic_offset(DT_NULL) - sizeof(Dyn);
  test::patch(bytes_, last, static_cast<decltype(Dyn{}.d_tag)>(DT_NEEDED));
  test::patch(bytes_, last + offsetof(Dyn, d_un), static_cast<uint64_t>(0x10000));
  expect_rejected(
      "corrupt dynamic section: DT_NEEDED string offset 65536 is outside the string "
      "table (" +
      std::to_string(dynamic_value(DT_STRSZ)) + " bytes)");
}

TEST_F(DamagedElf, SymbolTableAddressIsNotTheDynamicSymbolSection) {
  set_dynamic(DT_SYMTAB, dynamic_value(DT_SYMTAB) + sizeof(ElfW(Sym)));
  expect_rejected("corrupt dynamic section: DT_SYMTAB is");
}

TEST_F(DamagedElf, InitArraySizeIsNotTheSectionSize) {
  set_dynamic(DT_INIT_ARRAYSZ, dynamic_value(DT_INIT_ARRAYSZ) + sizeof(void*));
  expect_rejected("corrupt dynamic section: DT_INIT_ARRAYSZ is");
}

TEST_F(DamagedElf, WithoutSectionHeadersTheEntryIsLookedUpAfterLoading) {
  // The dynamic loader needs no section headers; the exports are then
  // unknown statically and the entry point is looked up in the loaded library.
  test::patch(bytes_, offsetof(Ehdr, e_shoff), static_cast<decltype(Ehdr{}.e_shoff)>(0));
  test::patch(bytes_, offsetof(Ehdr, e_shnum), static_cast<uint16_t>(0));
  test::patch(bytes_, offsetof(Ehdr, e_shstrndx), static_cast<uint16_t>(0));
  const PluginRecord record = load();
  EXPECT_TRUE(record.loaded) << record.reason;
}

}  // namespace
}  // namespace tessera
