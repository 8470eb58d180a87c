#include "tessera/core/train/run_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kBarWidth = 28;
constexpr size_t kMaxRanksListed = 8;

double mib(int64_t bytes) { return static_cast<double>(bytes) / kMiB; }

// 950, 12.3k, 4.56M: a rate in three significant figures or so.
std::string rate_text(double rate) {
  if (!std::isfinite(rate)) return "-";
  if (rate >= 1e6) return fmt::format("{:.2f}M", rate / 1e6);
  if (rate >= 1e4) return fmt::format("{:.1f}k", rate / 1e3);
  return fmt::format("{:.0f}", rate);
}

std::string memory_text(const std::vector<MemoryStats>& memory) {
  if (memory.empty()) return "";
  std::string text = " | mem MiB";
  if (memory.size() <= kMaxRanksListed) {
    for (size_t r = 0; r < memory.size(); ++r) {
      text += fmt::format(" r{} {:.1f}/{:.1f}", r, mib(memory[r].total_current),
                          mib(memory[r].total_peak));
    }
    return text;
  }
  const auto top = std::max_element(
      memory.begin(), memory.end(),
      [](const MemoryStats& a, const MemoryStats& b) { return a.total_peak < b.total_peak; });
  return text + fmt::format(" max r{} {:.1f}/{:.1f} of {} ranks", top - memory.begin(),
                            mib(top->total_current), mib(top->total_peak), memory.size());
}

nlohmann::json categories(const std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT>& bytes) {
  nlohmann::json object = nlohmann::json::object();
  for (int c = 0; c < TESSERA_MEM_CATEGORY_COUNT; ++c) {
    object[MemoryTracker::category_name(static_cast<tessera_mem_category>(c))] =
        bytes[static_cast<size_t>(c)];
  }
  return object;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total >= 3600) {
    return fmt::format("{}:{:02}:{:02}", total / 3600, (total / 60) % 60, total % 60);
  }
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

// " | 38.5 GFLOP/s/rank, MFU 49.1%" (the MFU part only when measured);
// "" when the model declares no FLOPs.
std::string flops_text(double flops_per_second, double mfu) {
  if (flops_per_second <= 0) return "";
  std::string text = fmt::format(" | {:.1f} GFLOP/s/rank", flops_per_second / 1e9);
  if (mfu > 0) text += fmt::format(", MFU {:.1f}%", mfu * 100.0);
  return text;
}

// "\n  ranks' mean steps differ: fastest rank 2 2.1 ms (476 steps/s),
// slowest rank 1 52.3 ms (19.1 steps/s)" when the slowest rank's mean step
// is over 1.2 times the fastest's; empty otherwise.
std::string step_spread_text(const std::vector<double>& seconds) {
  if (seconds.size() < 2) return {};
  const auto fastest = std::min_element(seconds.begin(), seconds.end());
  const auto slowest = std::max_element(seconds.begin(), seconds.end());  // the first of ties
  if (*fastest <= 0 || *slowest <= 1.2 * *fastest) return {};
  const auto rank_of = [&](auto it) { return it - seconds.begin(); };
  return fmt::format(
      "\n  ranks' mean steps differ: fastest rank {} {:.1f} ms ({:.3g} steps/s), slowest rank {} "
      "{:.1f} ms ({:.3g} steps/s)",
      rank_of(fastest), *fastest * 1e3, 1.0 / *fastest, rank_of(slowest), *slowest * 1e3,
      1.0 / *slowest);
}

}  // namespace

std::string format_step_line(const StepMetrics& m, int64_t total_steps, bool sequence) {
  const int width = static_cast<int>(std::to_string(std::max<int64_t>(total_steps, 1)).size());
  std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | ", m.step, width,
                                 total_steps, m.loss, m.lr);
  line += sequence ? rate_text(m.tokens_per_second) + " tok/s"
                   : rate_text(m.samples_per_second) + " samples/s";
  line += fmt::format(" | step {:.1f} ms | comm wait {:.1f}%", m.step_seconds * 1e3,
                      m.comm_wait_share * 100.0);
  line += flops_text(m.model_flops_per_second, m.mfu);
  if (m.comm_bytes_raw > 0 && m.comm_bytes_raw != m.comm_bytes) {
    line += fmt::format(" | sent {:.2f} MiB (f32 {:.2f} MiB), compress {:.1f} ms",
                        mib(m.comm_bytes), mib(m.comm_bytes_raw), m.compress_seconds * 1e3);
  }
  if (m.comm_bytes_cross_node > 0) {
    line += fmt::format(" | cross-node {:.2f} MiB", mib(m.comm_bytes_cross_node));
  }
  if (m.loss_scale > 0) {
    line += fmt::format(" | loss scale {}", m.loss_scale);
    if (m.skipped_steps > 0) line += fmt::format(" ({} skipped)", m.skipped_steps);
  }
  if (m.bubble > 0 || m.bubble_formula > 0) {
    line += fmt::format(" | bubble {:.1f}% (cpu clock {:.1f}%, formula {:.1f}%)", m.bubble * 100.0,
                        m.bubble_cpu * 100.0, m.bubble_formula * 100.0);
  }
  return line + memory_text(m.memory);
}

std::string metrics_json(const StepMetrics& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["loss_mean"] = m.loss_mean;
  j["grad_norm"] = m.grad_norm;
  j["lr"] = m.lr;
  j["step_seconds"] = m.step_seconds;
  j["comm_wait_share"] = m.comm_wait_share;
  j["samples_per_second"] = m.samples_per_second;
  j["tokens_per_second"] = m.tokens_per_second;
  j["comm_bytes"] = m.comm_bytes;
  j["comm_bytes_raw"] = m.comm_bytes_raw;
  j["compress_seconds"] = m.compress_seconds;
  j["comm_bytes_cross_node"] = m.comm_bytes_cross_node;
  j["model_flops_per_second"] = m.model_flops_per_second;
  j["mfu"] = m.mfu;
  if (m.loss_scale > 0) {
    j["loss_scale"] = m.loss_scale;
    j["skipped_steps"] = m.skipped_steps;
  }
  if (m.bubble > 0 || m.bubble_formula > 0) {
    j["bubble"] = m.bubble;
    j["bubble_cpu"] = m.bubble_cpu;
    j["bubble_formula"] = m.bubble_formula;
  }
  nlohmann::json memory = nlohmann::json::array();
  for (size_t r = 0; r < m.memory.size(); ++r) {
    const MemoryStats& s = m.memory[r];
    memory.push_back({{"rank", r},
                      {"current", categories(s.current)},
                      {"peak", categories(s.peak)},
                      {"total_current", s.total_current},
                      {"total_peak", s.total_peak}});
  }
  j["memory"] = std::move(memory);
  return j.dump();
}

std::string format_summary(const RunSummary& s) {
  std::string text;
  if (s.last_step < s.first_step) {
    text = fmt::format("summary: no steps to run (the run ends at step {})", s.last_step);
  } else {
    text = fmt::format(
        "summary: steps {}-{} ({} run), final loss {:.4f}{}\n"
        "  mean step {:.1f} ms, {}, comm wait {:.1f}%",
        s.first_step, s.last_step, s.last_step - s.first_step + 1, s.final_loss,
        s.final_window_steps > 1 ? fmt::format(" (mean {:.4f} over steps {}-{})", s.final_loss_mean,
                                               s.last_step - s.final_window_steps + 1, s.last_step)
                                 : std::string(),
        s.mean_step_seconds * 1e3,
        s.tokens_per_second > 0 ? rate_text(s.tokens_per_second) + " tok/s"
                                : rate_text(s.samples_per_second) + " samples/s",
        s.comm_wait_share * 100.0);
    text += flops_text(s.model_flops_per_second, s.mfu);
    text += step_spread_text(s.rank_step_seconds);
  }
  if (!s.memory.empty()) {
    text += fmt::format("\n  {:<18}", "peak memory (MiB)");
    for (int c = 0; c < TESSERA_MEM_CATEGORY_COUNT; ++c) {
      text += fmt::format(" {:>11}",
                          MemoryTracker::category_name(static_cast<tessera_mem_category>(c)));
    }
    text += fmt::format(" {:>11}", "total");
    for (size_t r = 0; r < s.memory.size(); ++r) {
      text += fmt::format("\n  {:<18}", fmt::format("rank {}", r));
      for (const int64_t bytes : s.memory[r].peak) text += fmt::format(" {:>11.2f}", mib(bytes));
      text += fmt::format(" {:>11.2f}", mib(s.memory[r].total_peak));
    }
  }
  if (!s.checkpoint.empty()) text += "\n  checkpoint: " + s.checkpoint.string();
  return text;
}

RunLog::RunLog(RunLogOptions options)
    : options_(std::move(options)), started_(std::chrono::steady_clock::now()) {
  if (options_.metrics_path.empty()) return;
  const std::filesystem::path path(options_.metrics_path);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const int mode = options_.append_metrics ? O_APPEND : O_TRUNC;
  metrics_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
  if (metrics_fd_ < 0) {
    const int err = errno;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "run.metrics: cannot open '" + options_.metrics_path +
                    "' for writing: " + std::strerror(err) +
                    (ec ? " (creating its directory: " + ec.message() + ")" : ""));
  }
}

RunLog::~RunLog() {
  clear_progress();
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

void RunLog::clear_progress() {
  if (!bar_shown_) return;
  std::cerr << "\r\033[K";
  std::cerr.flush();
  bar_shown_ = false;
}

void RunLog::emit(const std::string& text) {
  clear_progress();
  if (options_.out != nullptr) {
    *options_.out << text << '\n';
    options_.out->flush();
  } else {
    get_logger("train")->info(text);
  }
}

void RunLog::message(const std::string& line) { emit(line); }

void RunLog::step_done(int64_t step) {
  ++steps_seen_;
  if (!options_.progress) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = step >= options_.total_steps;
  if (!last && bar_shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double total = static_cast<double>(std::max<int64_t>(options_.total_steps, 1));
  const double done = std::clamp(static_cast<double>(step) / total, 0.0, 1.0);
  const int filled = static_cast<int>(done * kBarWidth);
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  const double eta =
      elapsed / static_cast<double>(steps_seen_) * static_cast<double>(options_.total_steps - step);
  std::string bar = "\r[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(kBarWidth - filled), '.') + "] ";
  bar += fmt::format("{}/{} {:3.0f}%", step, options_.total_steps, done * 100.0);
  if (last_loss_ >= 0) bar += fmt::format(" loss {:.4f}", last_loss_);
  bar += " eta " + duration_text(eta) + "\033[K";
  std::cerr << bar;
  std::cerr.flush();
  bar_shown_ = true;
}

void RunLog::logged(const StepMetrics& metrics) {
  last_loss_ = metrics.loss;
  emit(format_step_line(metrics, options_.total_steps, options_.sequence));
  if (metrics_fd_ >= 0) {
    const std::string line = metrics_json(metrics) + '\n';
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(metrics_fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        throw Error(TESSERA_ERR_INTERNAL, "run.metrics: writing '" + options_.metrics_path +
                                              "' failed: " + std::strerror(errno));
      }
      done += static_cast<size_t>(n);
    }
  }
}

void RunLog::summary(const RunSummary& summary) { emit(format_summary(summary)); }

}  // namespace tessera::train
