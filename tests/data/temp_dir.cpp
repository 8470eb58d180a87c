// Temporary directory helper for the data tests.
#include "temp_dir.hpp"

#include <fstream>
#include <random>
#include <stdexcept>

namespace tessera::test {

TempDir::TempDir() {
  std::random_device rd;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 16; ++attempt) {
    const auto candidate = base / ("tessera_data_test_" + std::to_string(rd()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory in " + base.string());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path TempDir::write(const std::string& name,
                                     const std::vector<uint8_t>& bytes) const {
  const auto file = path_ / name;
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw std::runtime_error("cannot write " + file.string());
  }
  return file;
}

std::filesystem::path TempDir::write_ids(const std::string& name, const std::vector<uint32_t>& ids,
                                         int width) const {
  std::vector<uint8_t> bytes;
  for (const uint32_t id : ids) {
    for (int b = 0; b < width; ++b) {
      bytes.push_back(static_cast<uint8_t>((id >> (8 * b)) & 0xFFU));
    }
  }
  return write(name, bytes);
}

}  // namespace tessera::test
