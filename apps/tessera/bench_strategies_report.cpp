#include "bench_strategies_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The rows are streamed, so the first column is as wide as the longest
// entry from the start.
std::vector<Column> columns(std::size_t label_width) {
  std::vector<Column> c;
  c.push_back({"strategy", Align::kLeft, std::max<std::size_t>(8, label_width)});
  for (const char* title : {"step(ms)", "sent(MiB)", "sent/4P", "params", "grads", "optim", "comm",
                            "activ", "total", "rss(MiB)"}) {
    c.push_back({title, Align::kRight, 9});
  }
  for (const char* title : {"bubble", "cpu", "formula"}) c.push_back({title, Align::kRight, 7});
  return c;
}

std::string mib(double bytes) { return fmt::format("{:.3f}", bytes / kMiB); }

// bytes sent / (4 B x parameters): the papers' 2Ψ and 3Ψ in f32 elements.
double sent_per_4p(const StrategyMeasure& m, int64_t parameters) {
  return parameters > 0 ? m.sent_bytes / (4.0 * static_cast<double>(parameters)) : 0.0;
}

}  // namespace

StrategiesReporter::StrategiesReporter(StrategiesHeader header, std::ostream& out)
    : header_(std::move(header)), out_(out), table_(columns(header_.label_width)) {
  if (header_.csv_path.empty()) return;
  csv_.emplace(header_.csv_path, std::ios::out | std::ios::trunc);
  if (!*csv_) {
    const std::string why = std::strerror(errno);
    csv_.reset();
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "cannot write CSV file '" + header_.csv_path + "': " + why);
  }
  *csv_ << "strategy,status,backend,ranks,parameters,steps,step_ms,sent_bytes_per_step,"
           "sent_per_4psi,params_bytes,grads_bytes,optimizer_bytes,comm_bytes,"
           "activations_bytes,total_bytes,peak_rss_bytes,bubble,bubble_cpu,bubble_formula\n";
}

void StrategiesReporter::begin() {
  const StrategiesHeader& h = header_;
  out_ << fmt::format(
      "# bench strategies: model {} ({} parameters = P), {} ranks as threads ({} backend), "
      "batch {}, {} steps per strategy, each strategy in its own process\n",
      h.model, h.parameters, h.world_size, h.backend, h.global_batch, h.steps);
  out_ << (h.steps > 1
               ? fmt::format("# step(ms), sent(MiB): means over steps 2-{} (step 1 is warm-up)",
                             h.steps)
               : std::string("# step(ms), sent(MiB): the only step (warm-up included)"))
       << "; step: slowest rank; sent: bytes sent per step by the rank sending most\n";
  out_ << "# sent/4P: bytes sent / (4 B x P), i.e. in f32 parameters (ddp ~ 2(N-1)/N, as "
          "the papers' 2P)\n";
  out_ << "# params grads optim comm activ total: peak tracked MiB per rank, largest rank; "
          "total: peak of a rank's sum over all categories\n";
  out_ << "# bubble cpu formula (pipelines): mean measured idle share of the schedule by the "
          "wall clock and on the schedule's CPU clock (docs/strategies/pipeline.md), and the "
          "schedule's formula\n";
  out_ << fmt::format(
      "# rss(MiB): peak resident memory of each strategy's process (wait4 ru_maxrss); ranks are "
      "threads, so it is the whole process, all {} ranks together (at least the {:.1f} MiB this "
      "command held when it started the child)\n",
      h.world_size, static_cast<double>(h.launcher_rss_kib) / 1024.0);
  if (h.config_has_options) {
    out_ << "# [strategy.options] of the config apply to '" << h.config_strategy
         << "' only; the other strategies run with their default options\n";
  }
  for (const auto& note : h.notes) out_ << "# " << note << '\n';
  out_ << table_.format_title() << '\n' << std::flush;
}

std::vector<std::string> StrategiesReporter::cells(const StrategyRow& row) const {
  std::vector<std::string> c{row.strategy};
  if (!row.ok) {
    c.emplace_back("failed");
    c.resize(14, "-");
    return c;
  }
  const StrategyMeasure& m = row.measure;
  c.push_back(fmt::format("{:.2f}", m.step_seconds * 1e3));
  c.push_back(mib(m.sent_bytes));
  c.push_back(fmt::format("{:.3f}", sent_per_4p(m, header_.parameters)));
  for (const int64_t bytes : m.peak) c.push_back(mib(static_cast<double>(bytes)));
  c.push_back(mib(static_cast<double>(m.total_peak)));
  c.push_back(fmt::format("{:.1f}", static_cast<double>(row.max_rss_kib) / 1024.0));
  for (const double share : {m.bubble, m.bubble_cpu, m.bubble_formula}) {
    c.push_back(m.bubble_formula > 0 ? fmt::format("{:.3f}", share) : std::string("-"));
  }
  return c;
}

void StrategiesReporter::row(const StrategyRow& row) {
  out_ << table_.format_row(cells(row)) << '\n' << std::flush;
  if (!csv_) return;
  const StrategiesHeader& h = header_;
  *csv_ << fmt::format("{},{},{},{},{},{}", row.strategy, row.ok ? "ok" : "failed", h.backend,
                       h.world_size, h.parameters, h.steps);
  if (!row.ok) {
    *csv_ << ",,,,,,,,,," << (row.max_rss_kib > 0 ? std::to_string(row.max_rss_kib * 1024) : "")
          << ",,,\n";
  } else {
    const StrategyMeasure& m = row.measure;
    *csv_ << fmt::format(",{:.4f},{:.0f},{:.6f}", m.step_seconds * 1e3, m.sent_bytes,
                         sent_per_4p(m, h.parameters));
    for (const int64_t bytes : m.peak) *csv_ << ',' << bytes;
    *csv_ << ',' << m.total_peak << ',' << row.max_rss_kib * 1024;
    *csv_ << fmt::format(",{:.6f},{:.6f},{:.6f}\n", m.bubble, m.bubble_cpu, m.bubble_formula);
  }
  csv_->flush();
  if (!*csv_) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "writing CSV file '" + h.csv_path + "' failed: " + std::strerror(errno));
  }
}

}  // namespace tessera::cli
