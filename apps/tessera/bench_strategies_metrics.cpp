#include "bench_strategies_metrics.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/input_file.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& what, int64_t line, const std::string& message) {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              what + (line > 0 ? " line " + std::to_string(line) : std::string()) + ": " + message);
}

// The categories of the table, as the metrics file names them.
constexpr std::array<tessera_mem_category, kBenchMemColumns> kCategories = {
    TESSERA_MEM_PARAMS, TESSERA_MEM_GRADS, TESSERA_MEM_OPTIMIZER, TESSERA_MEM_COMM,
    TESSERA_MEM_ACTIVATIONS};

// One metrics line, the fields the benchmark uses.
struct Line {
  int64_t step = 0;
  double step_seconds = 0;
  double comm_bytes = 0;
  double bubble = 0;  // pipelines only; 0 when the line has none
  double bubble_cpu = 0;
  double bubble_formula = 0;
};

// Parses one line; its "memory" array goes to `memory`.
Line parse_line(const std::string& text, const std::string& what, int64_t number, json& memory) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(what, number, std::string("not a JSON object: ") + e.what());
  }
  if (!j.is_object()) fail(what, number, "not a JSON object");
  Line line;
  try {
    line.step = j.at("step").get<int64_t>();
    line.step_seconds = j.at("step_seconds").get<double>();
    line.comm_bytes = j.at("comm_bytes").get<double>();
    line.bubble = j.value("bubble", 0.0);
    line.bubble_cpu = j.value("bubble_cpu", 0.0);
    line.bubble_formula = j.value("bubble_formula", 0.0);
    memory = j.at("memory");
  } catch (const json::exception& e) {
    fail(what, number, std::string("missing or ill-typed field: ") + e.what());
  }
  if (!memory.is_array()) fail(what, number, "'memory' is not an array");
  return line;
}

// Peaks of the last line's memory array: per category and total, max over ranks.
void read_peaks(const json& memory, const std::string& what, int64_t number, StrategyMeasure& m) {
  m.ranks = static_cast<int>(memory.size());
  try {
    for (const json& rank : memory) {
      const json& peak = rank.at("peak");
      for (size_t c = 0; c < kCategories.size(); ++c) {
        const char* name = MemoryTracker::category_name(kCategories[c]);
        const int64_t bytes = peak.contains(name) ? peak.at(name).get<int64_t>() : 0;
        m.peak[c] = std::max(m.peak[c], bytes);
      }
      m.total_peak = std::max(m.total_peak, rank.at("total_peak").get<int64_t>());
    }
  } catch (const json::exception& e) {
    fail(what, number, std::string("bad 'memory' entry: ") + e.what());
  }
}

}  // namespace

StrategyMeasure summarize_metrics(std::istream& in, const std::string& what) {
  std::vector<Line> lines;
  std::string text;
  int64_t number = 0;
  json last_memory;
  int64_t last_number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(parse_line(text, what, number, last_memory));
    last_number = number;
  }
  if (lines.empty()) fail(what, 0, "no metrics line (the run logged no step)");

  StrategyMeasure m;
  m.lines = static_cast<int64_t>(lines.size());
  const size_t from = lines.size() > 1 ? 1 : 0;
  double seconds = 0;
  double bytes = 0;
  for (size_t i = from; i < lines.size(); ++i) {
    seconds += lines[i].step_seconds;
    bytes += lines[i].comm_bytes;
    m.bubble += lines[i].bubble;
    m.bubble_cpu += lines[i].bubble_cpu;
    m.bubble_formula = std::max(m.bubble_formula, lines[i].bubble_formula);
  }
  const auto n = static_cast<double>(lines.size() - from);
  m.step_seconds = seconds / n;
  m.sent_bytes = bytes / n;
  m.bubble /= n;
  m.bubble_cpu /= n;
  m.first_averaged = lines[from].step;
  m.last_averaged = lines.back().step;
  read_peaks(last_memory, what, last_number, m);
  return m;
}

StrategyMeasure summarize_metrics_file(const std::filesystem::path& file) {
  // A line per step of a short run: a few kilobytes.
  constexpr uint64_t kMaxMetricsBytes = uint64_t{64} << 20;
  std::istringstream in(read_input_file(file, "metrics file", kMaxMetricsBytes));
  return summarize_metrics(in, "metrics file '" + file.string() + "'");
}

}  // namespace tessera::cli
