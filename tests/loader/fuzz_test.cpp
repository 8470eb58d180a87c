// Copies of real plugins with one byte changed in the ELF header, the
// program headers or the dynamic section, each scanned alone: whatever the
// change, the host survives, and the copy either loads or is rejected with a
// reason and a warning naming its path. The changes come from a fixed seed,
// so every run sees the same files; a few targeted ones damage the fields
// the static checks must catch.
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/plugin_registry.hpp"
#include "test_support.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Ehdr = ElfW(Ehdr);
using Phdr = ElfW(Phdr);
using Dyn = ElfW(Dyn);

// splitmix64: the same sequence with every compiler and standard library.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30U)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27U)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31U);
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

struct Mutant {
  std::string what;
  std::vector<char> bytes;
  std::string expected;  // substring of the reason; empty: any outcome
};

// Bytes [begin, end) of the file.
struct Region {
  std::size_t begin;
  std::size_t end;
};

Ehdr elf_header(const std::vector<char>& bytes) {
  Ehdr h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

std::size_t phdr_offset(const std::vector<char>& bytes, std::size_t index) {
  return elf_header(bytes).e_phoff + index * sizeof(Phdr);
}

Phdr phdr(const std::vector<char>& bytes, std::size_t index) {
  Phdr p{};
  std::memcpy(&p, bytes.data() + phdr_offset(bytes, index), sizeof p);
  return p;
}

// Index of the first program header of `type`, or -1.
int find_phdr(const std::vector<char>& bytes, uint32_t type, int skip = 0) {
  for (std::size_t i = 0; i < elf_header(bytes).e_phnum; ++i) {
    if (phdr(bytes, i).p_type == type && skip-- == 0) return static_cast<int>(i);
  }
  return -1;
}

// The ELF header, the program header table and the dynamic section.
std::vector<Region> damage_regions(const std::vector<char>& bytes) {
  const Ehdr h = elf_header(bytes);
  std::vector<Region> regions = {{0, sizeof(Ehdr)},
                                 {h.e_phoff, h.e_phoff + std::size_t{h.e_phnum} * sizeof(Phdr)}};
  const int dynamic = find_phdr(bytes, PT_DYNAMIC);
  if (dynamic >= 0) {
    const Phdr d = phdr(bytes, static_cast<std::size_t>(dynamic));
    regions.push_back({d.p_offset, d.p_offset + d.p_filesz});
  }
  return regions;
}

std::vector<Mutant> random_mutants(const std::vector<char>& source, uint64_t seed, int count) {
  const std::vector<Region> regions = damage_regions(source);
  Prng prng(seed);
  std::vector<Mutant> mutants;
  for (int i = 0; i < count; ++i) {
    const Region& r = regions[prng.below(regions.size())];
    const std::size_t at = r.begin + prng.below(r.end - r.begin);
    const auto flip = static_cast<unsigned char>(1 + prng.below(255));  // never 0: a real change
    Mutant m{"byte " + std::to_string(at) + " xor " + std::to_string(flip), source, ""};
    m.bytes[at] = static_cast<char>(static_cast<unsigned char>(m.bytes[at]) ^ flip);
    mutants.push_back(std::move(m));
  }
  return mutants;
}

// Damage the static checks must name: a PT_LOAD past the end of the file,
// one larger than the file, one with an alignment that is no power of two,
// one mapping the wrong part of the file.
std::vector<Mutant> targeted_mutants(const std::vector<char>& source) {
  const int load = find_phdr(source, PT_LOAD, 1);  // the second PT_LOAD: code
  EXPECT_GE(load, 0);
  const std::size_t at = phdr_offset(source, static_cast<std::size_t>(load));
  const std::string label = "program header " + std::to_string(load) + " (PT_LOAD)";
  std::vector<Mutant> mutants;
  Mutant past_end{"PT_LOAD offset past the end", source,
                  "not a valid shared library: truncated or corrupt: " + label};
  test::patch(past_end.bytes, at + offsetof(Phdr, p_offset),
              static_cast<decltype(Phdr{}.p_offset)>(source.size() + 4096));
  mutants.push_back(std::move(past_end));
  Mutant huge{"huge PT_LOAD p_filesz", source,
              "not a valid shared library: truncated or corrupt: " + label};
  test::patch(huge.bytes, at + offsetof(Phdr, p_filesz),
              static_cast<decltype(Phdr{}.p_filesz)>(UINT64_C(1) << 40));
  mutants.push_back(std::move(huge));
  Mutant align{"PT_LOAD p_align 0x1001", source,
               "corrupt " + label + ": alignment 0x1001 is not a power of two"};
  test::patch(align.bytes, at + offsetof(Phdr, p_align),
              static_cast<decltype(Phdr{}.p_align)>(0x1001));
  mutants.push_back(std::move(align));
  // The code segment read from one alignment unit (a page) earlier in the
  // file: still aligned, inside the file, and fatal to glibc's dlopen (the
  // reported crash); the sections mapped there no longer match their offsets.
  Mutant shifted{"PT_LOAD p_offset one page early", source,
                 "not a valid shared library: corrupt section"};
  const Phdr code = phdr(source, static_cast<std::size_t>(load));
  EXPECT_GE(code.p_offset, code.p_align);
  test::patch(shifted.bytes, at + offsetof(Phdr, p_offset),
              static_cast<decltype(Phdr{}.p_offset)>(code.p_offset - code.p_align));
  mutants.push_back(std::move(shifted));
  return mutants;
}

enum class Verdict { loaded, elf_checks, probe, loader };

Verdict verdict(const PluginRecord& r) {
  if (r.loaded) return Verdict::loaded;
  if (r.reason.rfind("not a valid shared library", 0) == 0) return Verdict::elf_checks;
  if (r.reason.find("while loading") != std::string::npos ||
      r.reason.find("while unloading") != std::string::npos) {
    return Verdict::probe;
  }
  return Verdict::loader;  // dlopen's own error, the entry point or the descriptor
}

TEST(Fuzz, DamagedCopiesOfRealPluginsNeverCrashTheHost) {
  const test::TempCache cache;
  const test::TempDir dir;
  const std::vector<std::pair<std::string, uint64_t>> sources = {
      {"libtessera_backend_inmemory.so", UINT64_C(0x7e55e4a1)},
      {"libtessera_model_mlp.so", UINT64_C(0x5eed0013)}};
  int counts[4] = {0, 0, 0, 0};
  int index = 0;
  for (const auto& [name, seed] : sources) {
    const fs::path source = test::builtin_dir() / name;
    ASSERT_TRUE(fs::exists(source)) << source << " is not built";
    const std::vector<char> bytes = test::read_bytes(source);
    std::vector<Mutant> mutants = {{"unchanged", bytes, ""}};
    for (Mutant& m : targeted_mutants(bytes)) mutants.push_back(std::move(m));
    for (Mutant& m : random_mutants(bytes, seed, 40)) mutants.push_back(std::move(m));

    for (const Mutant& m : mutants) {
      SCOPED_TRACE(name + ": " + m.what);
      // A new directory and file for each: a library still mapped must never
      // have its file rewritten.
      const fs::path plugins = dir.path() / ("m" + std::to_string(index++));
      fs::create_directory(plugins);
      const fs::path file = plugins / name;
      test::write_bytes(file, m.bytes);
      const test::LogCapture log;
      PluginRegistry registry;
      registry.scan({plugins});
      ASSERT_EQ(registry.records().size(), 1U);
      const PluginRecord& r = registry.records()[0];
      EXPECT_EQ(r.path, file);
      const Verdict v = verdict(r);
      ++counts[static_cast<int>(v)];
      if (m.what == "unchanged") {
        EXPECT_TRUE(r.loaded) << r.reason;
      }
      if (!m.expected.empty()) {
        EXPECT_NE(r.reason.find(m.expected), std::string::npos)
            << "reason: " << r.reason << "\nexpected: " << m.expected;
      }
      if (!r.loaded) {
        EXPECT_FALSE(r.reason.empty());
        EXPECT_TRUE(log.contains("warning", {"plugin " + file.string() + " rejected: " + r.reason}))
            << testing::PrintToString(log.lines());
      }
    }
  }
  std::cout << "[ fuzz     ] " << index << " copies: " << counts[0] << " loaded, " << counts[1]
            << " rejected by the ELF checks, " << counts[2] << " by the probe, " << counts[3]
            << " by the loader or descriptor checks\n";
  EXPECT_GT(counts[1], 0);
}

}  // namespace
}  // namespace tessera
