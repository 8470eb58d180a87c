// File helpers of the checkpoint tests: whole-file bytes and hand-made
// safetensors files; test::TempDir is the shared temporary directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/temp_dir.hpp"

namespace tessera::test {

// Whole content of `path` as bytes (empty if it cannot be read).
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string bytes(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// Replaces the content of `path` with `bytes` (plain, non-atomic write).
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from its parts: the header's length as 8 little-endian
// bytes (spelled out byte by byte, whatever the host's order), the JSON
// header, then the data.
inline std::string craft(const std::string& header, const std::string& data) {
  std::string file;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    file.push_back(static_cast<char>(n & 0xffU));
    n >>= 8;
  }
  return file + header + data;
}

}  // namespace tessera::test
