#include "run_fingerprint.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/core/options.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train::detail {
namespace {

// 64-bit FNV-1a: stable across hosts and builds (unlike std::hash).
class Fnv1a {
 public:
  void add(std::string_view bytes) noexcept {
    for (const char c : bytes) {
      state_ ^= static_cast<unsigned char>(c);
      state_ *= 0x100000001b3ULL;
    }
  }
  [[nodiscard]] uint64_t value() const noexcept { return state_; }

 private:
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

// "<size> bytes, hash <16 hex digits>" of a file's contents.
std::string file_digest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "unreadable";
  Fnv1a hash;
  std::array<char, 1 << 16> chunk{};
  uint64_t size = 0;
  while (in) {
    in.read(chunk.data(), chunk.size());
    const auto got = static_cast<size_t>(in.gcount());
    hash.add(std::string_view(chunk.data(), got));
    size += got;
  }
  return fmt::format("{} bytes, hash {:016x}", size, hash.value());
}

bool excluded(std::string_view key) {
  static constexpr std::array<std::string_view, 5> kExact{
      "run.world_size", "run.metrics", "run.log_level", "backend.timeout_s", "backend.options"};
  if (std::find(kExact.begin(), kExact.end(), key) != kExact.end()) return true;
  return key.starts_with("plugins.") || key.starts_with("backend.options.");
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The TOML of to_toml as "section.key = value" lines.
std::vector<std::string> dotted_lines(const std::string& toml_text) {
  std::vector<std::string> lines;
  std::string section;
  for (const std::string_view line : split_lines(toml_text)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = std::string(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string_view::npos) continue;
    const std::string key = section + "." + std::string(line.substr(0, eq));
    if (excluded(key) || excluded(section)) continue;
    lines.push_back(key + std::string(line.substr(eq)));
  }
  return lines;
}

// "key = value" lines as (key, value) pairs, in order.
std::vector<std::pair<std::string, std::string>> entries_of(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& line : split_lines(text)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    entries.emplace_back(line.substr(0, eq), line.substr(eq + 3));
  }
  return entries;
}

// "rank 1 has optimizer.lr = 0.02 where rank 0 has 0.01": the first key, in
// rank 0's order (then in this rank's), whose value differs or that only
// one of them has.
std::string first_difference(const std::string& mine, const std::string& base, int rank) {
  const auto a = entries_of(mine);
  const auto b = entries_of(base);
  const auto value_in = [](const auto& entries, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : entries) {
      if (k == key) return &v;
    }
    return nullptr;
  };
  const auto describe = [&](const std::string& key, const std::string* ours,
                            const std::string* theirs) {
    return fmt::format("rank {} has {} where rank 0 has {}", rank,
                       ours != nullptr ? key + " = " + *ours : "no " + key,
                       theirs != nullptr ? *theirs : "none");
  };
  for (const auto& [key, value] : b) {
    const std::string* ours = value_in(a, key);
    if (ours == nullptr || *ours != value) return describe(key, ours, &value);
  }
  for (const auto& [key, value] : a) {
    if (value_in(b, key) == nullptr) return describe(key, &value, nullptr);
  }
  return fmt::format("rank {} differs from rank 0", rank);
}

// Allgather of `mine` into `all`, not compared by the checked layer.
template <typename T>
void allgather_unverified(Communicator& comm, std::span<T> mine, std::span<T> all) {
  tessera_coll_args args{};
  args.coll = TESSERA_COLL_ALLGATHER;
  args.send = cpu_buffer(mine);
  args.recv = cpu_buffer(all);
  args.peer = -1;
  comm.run_unverified(args);
}

}  // namespace

std::string run_fingerprint(const Config& config, const RunPlan& plan) {
  Config resolved = config;
  resolved.strategy.name = plan.strategy;  // the choice of strategy "auto"
  resolved.strategy.options = options_table(plan.strategy_options);
  std::string text;
  for (const auto& line : dotted_lines(to_toml(resolved))) text += line + '\n';
  text += fmt::format("plugin.backend = {}\n", file_digest(plan.backend_file));
  text += fmt::format("plugin.strategy = {}\n", file_digest(plan.strategy_file));
  text += fmt::format("plugin.model = {}\n", file_digest(plan.model_file));
  return text;
}

void check_ranks_agree(Communicator& comm, const std::string& fingerprint, bool throw_all) {
  const auto size = static_cast<size_t>(comm.size());
  Fnv1a hash;
  hash.add(fingerprint);
  std::array<int64_t, 2> mine{static_cast<int64_t>(hash.value()),
                              static_cast<int64_t>(fingerprint.size())};
  std::vector<int64_t> all(2 * size);
  allgather_unverified(comm, std::span<int64_t>(mine), std::span<int64_t>(all));
  bool same = true;
  size_t longest = 0;
  for (size_t r = 0; r < size; ++r) {
    same = same && all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    longest = std::max(longest, static_cast<size_t>(all[2 * r + 1]));
  }
  if (same) return;

  // Every rank learns every text, so every rank names the same difference.
  std::vector<uint8_t> padded(longest, 0);
  std::copy(fingerprint.begin(), fingerprint.end(), padded.begin());
  std::vector<uint8_t> texts(longest * size);
  allgather_unverified(comm, std::span<uint8_t>(padded), std::span<uint8_t>(texts));
  const auto text_of = [&](size_t r) {
    return std::string(reinterpret_cast<const char*>(texts.data() + r * longest),
                       static_cast<size_t>(all[2 * r + 1]));
  };
  const std::string base = text_of(0);
  std::vector<int> differ;
  std::string first;
  for (size_t r = 1; r < size; ++r) {
    const std::string text = text_of(r);
    if (text == base) continue;
    differ.push_back(static_cast<int>(r));
    if (first.empty()) first = first_difference(text, base, static_cast<int>(r));
  }
  if (!throw_all && text_of(static_cast<size_t>(comm.rank())) == base) return;
  throw Error(TESSERA_ERR_MISMATCH,
              fmt::format("the ranks' configurations differ: {} (rank{} {} of {} differ{} from "
                          "rank 0; every rank must run the same configuration and plugin files, "
                          "see docs/training.md, 'When ranks disagree')",
                          first, differ.size() == 1 ? "" : "s", fmt::join(differ, ", "), size,
                          differ.size() == 1 ? "s" : ""));
}

}  // namespace tessera::train::detail
