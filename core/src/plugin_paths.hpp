// Path helpers shared by the registry's source files.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::detail {

// Identity of a directory for de-duplication: a symlinked or relative
// spelling of a directory gives the same key as its canonical path. Falls
// back to the absolute, lexically normal path when the directory does not
// exist. Never throws for a bad path.
std::string directory_key(const std::filesystem::path& dir);

}  // namespace tessera::detail
