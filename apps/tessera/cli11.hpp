// CLI11, included with GCC 12's -Wnull-dereference silenced: inlining
// CLI11's string splitting into std::vector growth triggers a false positive
// inside libstdc++ that -Werror would turn into a build failure. Every file
// of this tool includes CLI11 through this header.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop
