// Static inspection of plugin files: copies of the `good` fixture with one
// field of their ELF structures damaged must be rejected with a reason that
// says what is wrong, before the dynamic loader sees them.
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Ehdr = ElfW(Ehdr);
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
