// Path helpers shared by the registry's source files.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tessera::detail {

// Identity of a directory for de-duplication: a symlinked or relative
// spelling of a directory gives the same key as its canonical path. Falls
// back to the absolute, lexically normal path when the directory does not
// exist. Never throws for a bad path.
std::string directory_key(const std::filesystem::path& dir);

// Whether a directory entry is meant as a plugin: its name starts with
// "libtessera_" and ends with ".so". Such an entry is examined (and
// rejected with its reason when the rest of its name, or the file, is not
// a plugin's), every other one is left alone.
bool meant_as_plugin(std::string_view filename) noexcept;

// What is wrong with a plugin file name, or "" when it follows
// "libtessera_<kind>_<name>.so".
std::string plugin_filename_problem(std::string_view filename);

}  // namespace tessera::detail
