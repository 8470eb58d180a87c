// Memory sizes as users write them ("2GiB", "512MiB", "1.5GB", "1048576")
// and as the project prints them ("20.0 MiB").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Bytes of `text`: a positive number (digits, optionally with a fraction)
// followed by an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024) or
// KB, MB, GB, TB (powers of 1000), in any case; spaces between number and
// unit are allowed. std::nullopt for anything else, zero, or a value that
// does not fit in 63 bits.
std::optional<int64_t> parse_memory_size(std::string_view text);

// What parse_memory_size accepts, for messages: "a positive number with a
// unit, e.g. ...".
std::string memory_size_hint();

// "512 B", "20.0 KiB", "28.3 MiB", "1.50 GiB": one decimal (two for GiB
// and above).
std::string format_memory(int64_t bytes);

}  // namespace tessera
