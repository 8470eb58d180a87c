// How the CLI shows a file or directory it found (a plugin file, a search
// directory): absolute and normalised, or as given if it cannot be made
// absolute.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace tessera::cli {

inline std::string display_path(const std::filesystem::path& path) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(path, ec);
  return (ec ? path : abs.lexically_normal()).string();
}

}  // namespace tessera::cli
